"""The HF transformers context: live `PreTrainedModel`s as surgery's loader leaves them.

Whether a draft checkpoint brought its own weights for a role is known only to the loader that
read it: surgery's loaders (surgery/tinymodels/tinypair.py, surgery/hf/standalone.py) record the checkpoint's
missing keys on the model with `record_missing_keys`; a model loaded elsewhere carries no record
and the answer is None (cannot tell).

The forward's cache keyword is a fact of the installed transformers release that the kernel's KV routing
(kvrouting.py) and the HF integration (surgery/hf/compat.py, which lists every internal the HF side relies
on) both need: it lives here, below both, and compat re-exports it.
"""
from __future__ import annotations

import inspect
from typing import Any

from ..text.diagnostics import diag
from .context import Context
from .paths import get_path, layers_path

_MISSING_KEYS = "_surgery_missing_keys"  # the one place this attribute is named
_CACHE_KWARG: dict = {}  # model class -> its forward's cache keyword


def cache_kwarg(model: Any) -> str:
    """The forward's keyword for the KV cache: ``cache`` where the release renamed it (5.25 still takes
    ``past_key_values``, with a FutureWarning per call), else ``past_key_values``. Read from the
    forward's signature, never the version number; one answer per model class."""
    cls = type(model)
    got = _CACHE_KWARG.get(cls)
    if got is None:
        try:
            params = inspect.signature(cls.forward).parameters
        except (TypeError, ValueError):
            params = {}
        got = _CACHE_KWARG[cls] = "cache" if "cache" in params else "past_key_values"
    return got


def record_missing_keys(model: Any, keys) -> None:
    setattr(model, _MISSING_KEYS, frozenset(keys))


def missing_keys(model: Any) -> frozenset | None:
    return getattr(model, _MISSING_KEYS, None)


class HFContext(Context):
    engine = "hf"

    def static_checks(self, plan: Any, draft: Any, target: Any) -> list:
        problems = []
        for side, model, facts in (("draft", draft, plan.draft), ("target", target, plan.target)):
            n = len(get_path(model, layers_path("hf", model, side)))
            if n != facts["num_layers"]:
                problems.append(diag("SRG402", f"live {side} has {n} decoder layers but its config says "
                                     f"{facts['num_layers']}"))
        return problems

    def draft_has_own(self, draft: Any, role: str, path: str) -> bool | None:
        missing = missing_keys(draft)
        if missing is None:
            return None
        return not any(k == path or k.startswith(path + ".") for k in missing)
