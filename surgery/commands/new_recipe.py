"""`surgery new`: a starting recipe for a pair, from the closest shipped one (surgery/new.py)."""
from __future__ import annotations

import json
import sys

from ..text.diagnostics import EXIT_INVALID, EXIT_OK
from ..new import label, new_recipe, no_fit_diagnostic
from ..text.render import render_diagnostics
from .validate import runtime


def cmd_new(args, out) -> int:
    result = new_recipe(args.target, args.draft, out=args.out, name=args.name, force=args.force,
                        runtime=runtime(args, args.engine))
    if args.json:
        out.write(json.dumps(result.to_dict(), indent=2) + "\n")
    if not result.ok:
        sys.stderr.write(render_diagnostics([no_fit_diagnostic(result)]))
        return EXIT_INVALID
    if args.json:
        return EXIT_OK
    c = result.chosen
    said = (f"{'wrote ' + result.out + ': ' if result.out else ''}starting recipe from shipped `{c.name}` for draft "
            f"{label(result.draft)} -> target {label(result.target)} (validates: {c.operations} operations, "
            f"{c.skipped} skipped{'; also fits: ' + ', '.join(result.alternatives) if result.alternatives else ''})")
    if result.out:
        out.write(said + "\n")
    else:
        out.write(result.text)
        sys.stderr.write(said + "\n")
    return EXIT_OK
