"""`surgery explain [CODE]`: the long form of a diagnostic code, or the list of codes."""
from __future__ import annotations

import json

from ..diagnostics import EXIT_OK, SurgeryError, catalogue, diag


def cmd_explain(args, out) -> int:
    cat = catalogue()
    if args.code is None:
        if args.json:
            out.write(json.dumps(cat, indent=2) + "\n")
        else:
            for code, entry in cat.items():
                out.write(f"{code}  {entry['title']}\n")
        return EXIT_OK
    code = args.code.upper()
    if code not in cat:
        raise SurgeryError(diag("SRG012", f"unknown code {args.code!r}"))
    entry = cat[code]
    if args.json:
        out.write(json.dumps({"code": code, **entry}, indent=2) + "\n")
        return EXIT_OK
    out.write(f"{code}: {entry['title']}  (severity {entry.get('severity', 'error')}, exit {entry.get('exit', 1)})\n\n")
    out.write(entry.get("explain", "") + "\n")
    if entry.get("hint"):
        out.write(f"\nhint: {entry['hint']}\n")
    return EXIT_OK
