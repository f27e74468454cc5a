"""The operation registry: the op kinds, each a folder (surgery/ops/<kind>/, the kind being the
step's key in a recipe) that holds its step class, spec, expansion, plan-time checks, rendering and
one performer per engine that performs it.

    from surgery.ops.registry import UNITS, performer
    UNITS["share_kv"].refusal("hf")            # None: the HF performer exists
    performer("share_kv", "vllm").prepare      # surgery/ops/share_kv/vllm.py

The registry sits above the op packages and imports them; nothing in an op package imports it,
and it never imports a performer or an engine (performers are found by module name, on first
use). Each unit is checked when it is registered: every engine either has a performer file or is
named in the unit's `refused_by` with a reason, never both, never neither; its spec says the unit's
kind and declares what it decides (`DECIDES`), which the plan's contradiction check reads; and its step
class is a `Step` (the recipe schema's op part is generated from it, surgery/ops/schema.py).
"""
from __future__ import annotations

import importlib
import importlib.util
from dataclasses import fields, is_dataclass
from types import ModuleType

from ..engine.cards import ENGINES
from . import capture_hidden_states, copy_attrs, keep, share_buffer, share_kv, share_module
from .base import OpUnit, Step, resolve_shape

UNITS: dict[str, OpUnit] = {}  # kind (= the step's key in a recipe) -> unit, in the order recipes' schema lists them


def performer_module(unit: OpUnit, engine: str) -> str:
    return f"{__package__}.{unit.kind}.{engine}"


def has_performer(unit: OpUnit, engine: str) -> bool:
    """Whether the performer file exists (looked up, not imported: no torch, no engine here)."""
    try:
        return importlib.util.find_spec(performer_module(unit, engine)) is not None
    except ModuleNotFoundError:  # the op's own package is missing
        return False


def register(unit: OpUnit) -> OpUnit:
    """Add an op kind, checking what it declares (as PEFT's `register_peft_method` does)."""
    if unit.kind in UNITS:
        raise ValueError(f"op kind {unit.kind!r} registered twice")
    if unit.spec.kind != unit.kind:
        raise ValueError(f"op {unit.kind}: its spec {unit.spec.__name__} says kind {unit.spec.kind!r}")
    if not (isinstance(unit.step_class, type) and issubclass(unit.step_class, Step)):
        raise ValueError(f"op {unit.kind}: its step class must be a surgery.ops.base.Step (got {unit.step_class!r}); "
                         "the recipe schema's op part is generated from it")
    resolve_shape(unit.step_class)
    unknown = set(unit.refused_by) - set(ENGINES)
    if unknown:
        raise ValueError(f"op {unit.kind} refuses unknown engine(s) {sorted(unknown)} (engines: {', '.join(ENGINES)})")
    for engine in ENGINES:
        has = has_performer(unit, engine)
        refused = engine in unit.refused_by
        if has == refused:
            raise ValueError(f"op {unit.kind} x {engine}: " + (
                "has a performer and a declared refusal" if has else
                f"neither a performer ({performer_module(unit, engine)}) nor a declared refusal"))
    subject, keys = getattr(unit.spec, "DECIDES", None) or ("", ())
    names = {f.name for f in fields(unit.spec)} if is_dataclass(unit.spec) else set()
    if not subject or not set(keys) <= names - set(unit.spec.BOOKKEEPING):
        raise ValueError(f"op {unit.kind}: its spec must declare DECIDES = (subject, key fields), the key fields "
                         f"among its own non-bookkeeping fields (got {getattr(unit.spec, 'DECIDES', None)!r}); "
                         "the plan's contradiction check reads it")
    UNITS[unit.kind] = unit
    return unit


for _package in (share_kv, copy_attrs, share_module, keep, capture_hidden_states, share_buffer):
    register(_package.UNIT)


def implemented(engine: str, kind: str) -> bool:
    """Whether `engine` performs `kind`: it has the performer (registration checked that exactly
    the engines without a declared refusal have one)."""
    return kind in UNITS and has_performer(UNITS[kind], engine)


def performer(kind: str, engine: str) -> ModuleType:
    """The module whose `prepare(op, draft, target, context)` performs `kind` on `engine`."""
    unit = UNITS[kind]
    if unit.refusal(engine) is not None:
        raise KeyError(f"{engine} does not perform {kind}: {unit.refusal(engine)}")
    return importlib.import_module(performer_module(unit, engine))
