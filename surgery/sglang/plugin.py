"""The `sglang.srt.plugins` entry point: `register()`.

SGLang loads its general plugins in every process it starts, the scheduler (where the draft is
loaded) included (srt/plugins/__init__.py `load_plugins`, called from managers/scheduler.py).
`register()` installs the hooks (hooks.py) with the recipe the environment selects
(`SURGERY_RECIPE`). SGLang logs and swallows an exception a plugin raises ("Failed to execute
general plugin"), so a hook with nothing to wrap under a selected recipe (SRG361) is also logged
at error level here, in SGLang's logger tree, before it is raised; `SGLANG_PLUGINS` can leave the
plugin out. A launcher that calls `hooks.install(recipe=...)` itself needs no entry point."""
from __future__ import annotations

from ..text.diagnostics import SurgeryError
from . import hooks
from .log import get_logger


def register() -> None:
    try:
        hooks.install()
    except SurgeryError as exc:
        get_logger().error("spec-surgery: %s", "; ".join(f"{d.code} {d.message}" for d in exc.diagnostics))
        raise
