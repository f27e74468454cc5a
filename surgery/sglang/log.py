"""The SGLang hook's logger: a child of SGLang's own `sglang` logger tree.

SGLang configures its logging once per process (`configure_logger`: format with the time, level
from --log-level) and its modules log under `sglang.*`; a line logged under `sglang.surgery`
prints wherever SGLang's own lines print, in the scheduler process where the draft is loaded.

The line the tests read is defined here once (surgery/text/loglines.py says why): live_apply.py logs
`APPLIED.fmt`, tests/sglang_engine/ parse SGLang's output with `APPLIED.find(text)`."""
from __future__ import annotations

import logging

from ..text.loglines import LogLine

NAME = "sglang.surgery"

# live_apply.py, in SGLang's scheduler: the plan applied at the draft-load point, verified, and
# SGLang's own wiring before the recipe next to the wiring after it
APPLIED = LogLine("spec-surgery: recipe %s applied at SGLang's draft load (%s): %d operations, %s, verification %s "
                  "(%d checks)%s; wiring SGLang's own %s, after the recipe %s (%s)",
                  ("recipe", "algorithm", "operations", "summary", "verification", "checks", "failed",
                   "sglang_wiring", "after_recipe", "difference"))


def get_logger() -> logging.Logger:
    return logging.getLogger(NAME)
