"""`surgery pair list` / `surgery pair export`: the built-in tiny pairs."""
from __future__ import annotations

import json

from .. import pairs
from ..text.diagnostics import EXIT_OK
from ..extras import require


def cmd_pair(args, out) -> int:
    if args.pair_command == "list":
        rows = [{"name": n, "summary": e.get("summary", "")} for n, e in sorted(pairs.builtin_pairs().items())]
        if args.json:
            out.write(json.dumps(rows, indent=2) + "\n")
        else:
            for r in rows:
                out.write(f"{r['name']}  {r['summary']}\n")
        return EXIT_OK
    require("pair export")
    result = pairs.export(args.name, args.dir, force=args.force)
    if args.json:
        out.write(json.dumps({"ok": True, **result}, indent=2) + "\n")
    else:
        out.write(f"wrote {result['target']} and {result['draft']} (pair {result['pair']})\n")
    return EXIT_OK
