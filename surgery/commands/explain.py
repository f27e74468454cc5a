"""`surgery explain [CODE]`: the long form of a diagnostic code, or the list of codes."""
from __future__ import annotations

import json

from ..text.diagnostics import ERROR, EXIT_OK, SurgeryError, catalogue, diag, exit_code_for


def exit_status(code: str, severity: str) -> int:
    """The exit status a run gives when this finding is its worst, from the constants the CLI itself uses:
    a warning or a note leaves the verdict valid (validate returns EXIT_OK while `plan.ok`), and an error
    exits with `exit_code_for`, what `SurgeryError.exit_code` returns (2 for a usage error or unreadable
    input, else EXIT_INVALID, validate's status for an invalid plan). codes.yaml's `exit` is the status
    "when this code is an error", so a warning's `exit: 1` there is not what a run of it returns."""
    return exit_code_for(code) if severity == ERROR else EXIT_OK


def described(code: str) -> dict:
    """One catalogue entry with its severity and its real exit status filled in (text and --json alike)."""
    entry = catalogue()[code]
    severity = entry.get("severity", ERROR)
    return {**entry, "severity": severity, "exit": exit_status(code, severity)}


def cmd_explain(args, out) -> int:
    cat = catalogue()
    if args.code is None:
        if args.json:
            out.write(json.dumps({code: described(code) for code in cat}, indent=2) + "\n")
        else:
            for code, entry in cat.items():
                out.write(f"{code}  {entry['title']}\n")
        return EXIT_OK
    code = args.code.upper()
    if code not in cat:
        raise SurgeryError(diag("SRG012", f"unknown code {args.code!r}"))
    entry = described(code)
    if args.json:
        out.write(json.dumps({"code": code, **entry}, indent=2) + "\n")
        return EXIT_OK
    out.write(f"{code}: {entry['title']}  (severity {entry['severity']}, exit {entry['exit']})\n\n")
    out.write(entry.get("explain", "") + "\n")
    if entry.get("hint"):
        out.write(f"\nhint: {entry['hint']}\n")
    return EXIT_OK
