"""`surgery releases`: the release matrix, or one validate verdict per vLLM release."""
from __future__ import annotations

import io
import json

from ..text.diagnostics import EXIT_OK, Location, SurgeryError, diag
from ..engine.releases import release_data
from ..engine.matrix import matrix_markdown, run_across
from .validate import cmd_plan


def cmd_releases(args, out) -> int:
    if args.recipe is None:
        if args.json:
            out.write(json.dumps({e: release_data(e) for e in ("vllm", "sglang")}, indent=1) + "\n")
        else:
            out.write(matrix_markdown())
        return EXIT_OK
    if args.draft is None:
        raise SurgeryError(diag("SRG011", "surgery releases RECIPE needs --draft (and --target, unless the draft is "
                                "a speculators head naming its verifier)", Location("--draft")))

    def validate_at(version: str) -> tuple[int, dict]:
        buf = io.StringIO()
        rc = cmd_plan(args, buf, release=version)
        return rc, json.loads(buf.getvalue())

    return run_across(validate_at, args.json, out)
