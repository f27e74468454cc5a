"""The operation registry: one unit per kind (see surgery/ops/base.py).

    from surgery.ops import UNITS, unit_for_step
    UNITS["share_kv"].refusal("hf")   # None: the HF adapter performs it

Engine adapters (surgery/hf/adapter.py, surgery/vllm/adapter.py) implement `_prepare_<kind>` for
every kind whose unit does not name that engine in `refused_by`; tests/test_op_registry.py holds
both sides to that.
"""
from __future__ import annotations

from . import capture_hidden_states, copy_attrs, keep, share_buffer, share_kv, share_module
from .base import ENGINES, Operation, OpUnit
from .capture_hidden_states import CaptureHiddenStates
from .copy_attrs import CopyAttr
from .keep import Keep
from .share_buffer import ShareBuffer
from .share_kv import ShareKV
from .share_module import ShareModule

UNITS: dict[str, OpUnit] = {u.kind: u for u in (share_kv.UNIT, copy_attrs.UNIT, share_module.UNIT, keep.UNIT,
                                                capture_hidden_states.UNIT, share_buffer.UNIT)}
BY_RECIPE_KEY: dict[str, OpUnit] = {u.recipe_key: u for u in UNITS.values()}
# where each engine's implementations live (imported only when asked: no torch here)
ADAPTERS = {"hf": "surgery.hf.adapter.HFAdapter", "vllm": "surgery.vllm.adapter.VLLMAdapter"}


def adapter_class(engine: str) -> type:
    if engine == "hf":
        from ..hf.adapter import HFAdapter

        return HFAdapter
    if engine == "vllm":
        from ..vllm.adapter import VLLMAdapter

        return VLLMAdapter
    raise KeyError(f"no adapter for engine {engine!r} (engines: {', '.join(ENGINES)})")


def implemented(engine: str, kind: str) -> bool:
    return callable(getattr(adapter_class(engine), f"_prepare_{kind}", None))


__all__ = ["ENGINES", "UNITS", "BY_RECIPE_KEY", "ADAPTERS", "Operation", "OpUnit", "ShareKV", "CopyAttr",
           "ShareModule", "Keep", "CaptureHiddenStates", "ShareBuffer", "adapter_class", "implemented"]
