"""Fail fast: check the selected recipe where the engine is configured, before any weight is loaded.

The plugin's apply step runs in the worker, after both models are loaded; a recipe that cannot work
(missing file, YAML error, recipe of another family, misspelled shipped name) used to stop a server
only there, 30+ s into start-up, its coded line buried between the tracebacks of three processes.

vLLM builds its whole configuration, including the speculative config with the draft's HF config,
in `EngineArgs.create_engine_config`, in the process that then starts the engine (the API server
front-end, or the `LLM(...)` caller). It is called once per engine, reads only config files, and
runs after vLLM loaded the general plugins in that process (EngineArgs.__post_init__ and the CLI
parser both call `load_general_plugins`). We wrap it: right after vLLM built the config, the selected
recipe is read, schema-checked and resolved against both checkpoints' config.json and the runtime
(pp / tp / KV-cache dtype). Before it, what the release would refuse there with its own uncoded error (0.34:
P-EAGLE's parallel drafting, SRG723) is refused with our code, from the engine arguments. Errors raise `SurgeryError` there; warnings (no speculative config, a
speculative method the recipe was not written for) are coded lines in vLLM's log.

When the error reaches the top of the program uncaught, it is printed as its coded block alone
(`SURGERY_TRACEBACK=1` shows the traceback too): a start-up refused on bad input is not a crash.

This module is the wrap; the check itself is surgery/vllm/config_check.py, imported when vLLM builds
a config.
"""
from __future__ import annotations

import functools

from ..text.diagnostics import diag
from .log import DIAGNOSTIC, get_logger

WRAP_TARGET = ("vllm.engine.arg_utils", "EngineArgs", "create_engine_config")
_MARK = "__surgery_config_check__"


def _wrap_class():
    """The class named by WRAP_TARGET (static import: vLLM's module, never a name from data)."""
    from vllm.engine import arg_utils

    if WRAP_TARGET[0] != arg_utils.__name__:
        raise ImportError(f"no wrap point in module {WRAP_TARGET[0]}")
    return getattr(arg_utils, WRAP_TARGET[1])


def wrap_point_missing() -> str | None:
    """Why WRAP_TARGET cannot be wrapped in this vLLM (None: it can); `surgery doctor` asks before serving."""
    try:
        _wrap_class().__dict__[WRAP_TARGET[2]]
    except Exception as exc:  # noqa: BLE001 - the same failures install() reports as SRG033
        return f"{type(exc).__name__}: {exc}"
    return None


def install() -> bool:
    """Wrap `EngineArgs.create_engine_config` (idempotent). A wrap point that is missing in this
    vLLM is a visible coded warning (SRG033): the recipe is then checked only in the worker."""
    module, cls_name, method = WRAP_TARGET
    try:
        cls = _wrap_class()
        orig = cls.__dict__[method]
    except Exception as exc:  # noqa: BLE001 - any vLLM layout change lands here
        get_logger().warning(DIAGNOSTIC.fmt, diag(
            "SRG033", f"cannot wrap {module}.{cls_name}.{method} ({type(exc).__name__}: {exc}); a bad recipe "
            "is reported only after the models are loaded").render())
        return False
    if getattr(orig, _MARK, False):
        return True

    @functools.wraps(orig)
    def create_engine_config(self, *args, **kwargs):
        # the check (recipe, resolver, release rules: ~15 ms of imports) loads here, where a config is
        # built, not in register(), which every process vLLM starts runs
        from .config_check import check_engine_args, check_engine_config

        check_engine_args(self)  # what this release would refuse with its own uncoded error, coded first
        config = orig(self, *args, **kwargs)
        check_engine_config(config)
        return config

    setattr(create_engine_config, _MARK, True)
    create_engine_config.__wrapped_original__ = orig
    setattr(cls, method, create_engine_config)
    return True
