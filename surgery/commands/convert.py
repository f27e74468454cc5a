"""`surgery convert`: a draft head written in another published format (convert_folder.py)."""
from __future__ import annotations

import json
import sys

from ..text.diagnostics import EXIT_OK
from ..text.escape import escape_lines
from .convert_folder import convert_folder


def cmd_convert(args, out) -> int:
    result = convert_folder(args.draft_dir, args.to, args.out_dir, target=args.target, producer=args.producer,
                            k=args.num_speculative_tokens, force=args.force, config_only=args.config_only)
    for d in result["diagnostics"]:  # write-time warnings (SRG023, SRG024), on stderr as validate's are
        sys.stderr.write(escape_lines(f"{d['location']}: {d['severity']} {d['code']}: {d['message']}\n" +
                                      (f"    hint: {d['hint']}\n" if d["hint"] else "")))
    if args.json:
        out.write(json.dumps(result, indent=2) + "\n")
        return EXIT_OK
    what = "config only (--config-only)" if result["config_only"] else \
        f"{len(result['files'])} files copied byte for byte"
    out.write(f"wrote {result['out']} ({result['from']} -> {result['format']}; {what}; provenance in "
              "surgery-provenance.json)\n")
    if result["verifier"]:
        out.write(f"verifier: {result['verifier']}\n")
    return EXIT_OK
