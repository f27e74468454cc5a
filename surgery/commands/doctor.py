"""`surgery doctor`: the checks of surgery/doctor.py, verdict first."""
from __future__ import annotations

import json

from ..text.diagnostics import EXIT_INVALID, EXIT_OK
from ..doctor import ENTRY_POINT_GROUPS, render, run_doctor


def cmd_doctor(args, out) -> int:
    engines = list(ENTRY_POINT_GROUPS) if args.engine == "all" else [args.engine]
    checks = run_doctor(engines, args.recipe, {"target": args.target, "draft": args.draft})
    ok = not any(c.status == "error" for c in checks)
    if args.json:
        out.write(json.dumps({"ok": ok, "checks": [c.to_dict() for c in checks]}, indent=2) + "\n")
    else:  # the verdict first, then the checks worst first (errors, warnings, the ones that passed)
        out.write(f"{'ok' if ok else 'FAILED'}: {sum(c.status == 'error' for c in checks)} errors, "
                  f"{sum(c.status == 'warning' for c in checks)} warnings\n")
        for status in ("error", "warning", "ok"):
            for c in checks:
                if c.status == status:
                    out.write(render(c) + "\n")
    return EXIT_OK if ok else EXIT_INVALID
