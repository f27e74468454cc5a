"""The SGLang hook's logger: a child of SGLang's own `sglang` logger tree.

SGLang configures its logging once per process (`configure_logger`: format with the time, level
from --log-level) and its modules log under `sglang.*`; a line logged under `sglang.surgery`
prints wherever SGLang's own lines print, in the scheduler process where the draft is loaded."""
from __future__ import annotations

import logging

NAME = "sglang.surgery"


def get_logger() -> logging.Logger:
    return logging.getLogger(NAME)
