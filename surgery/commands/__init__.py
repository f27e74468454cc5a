"""Command runners: the top layer, which may import every layer below it and is imported by none
but the CLI (docs/architecture.md, surgery/data/layers.yaml). Issue 43 moves every command's runner
here, and each command's handler (`<command>.py`, named by cli.COMMANDS as "module:function" and imported
when that command runs)."""
from __future__ import annotations

import importlib
from typing import Callable


def load_entry(entry: str) -> Callable:
    """A "module:function" of a command table (cli.COMMANDS, apply's RUNNERS), imported now: a command
    imports its own modules only when it runs, so `surgery --help` or `surgery explain` never load the
    engines (pip's `commands_dict` works the same way)."""
    module, _, function = entry.partition(":")
    return getattr(importlib.import_module(module), function)
