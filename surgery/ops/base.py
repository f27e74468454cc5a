"""What every operation kind has: a typed, frozen spec and a unit describing it.

An *op unit* (one folder per kind in this package) holds everything about one kind of
operation: its spec (a frozen `Operation` subclass with only the fields that kind uses), how a recipe step
expands into concrete specs, how a step renders in the plan table, and, per engine, either a
performer (`surgery/ops/<kind>/<engine>.py` with `prepare(op, draft, target, context)`) or a
declared reason why that engine cannot perform it. The registry (surgery/ops/registry.py) checks
both when a unit is registered; tests/ops/test_registry.py fails when a spec field is ignored by a
performer.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Callable, ClassVar

@dataclass(frozen=True, kw_only=True)
class Operation:
    """Fields every concrete operation carries. `otherwise` is the recipe step's explicit
    `otherwise:` (None when the recipe leaves it out): besides a false `when`, it also decides
    what happens when the selected engine cannot perform the operation (None: an error)."""

    kind: ClassVar[str] = "?"
    # fields that describe an operation but do not change what it does (the field-sensitivity
    # test leaves them out): the id, the step it came from, the human reason, the policy.
    BOOKKEEPING: ClassVar[tuple[str, ...]] = ("id", "step", "because", "otherwise")

    # what the op decides (resolver.check_contradictions): a subject (shared by the kinds that decide
    # the same thing: `keep` and `share_module` both decide which module a draft role uses) and the
    # fields that pick the one thing decided (`role`, `layer`). Two ops with the same subject and equal
    # key fields decide the same thing: they must not differ (a contradiction) and must not repeat (a
    # duplicate). A key field that is None covers every value (a per-layer role given without
    # `layers:`). The registry checks each kind declares it.
    DECIDES: ClassVar[tuple[str, tuple[str, ...]]] = ("", ())

    id: str
    step: int
    because: str | None = None
    otherwise: str | None = None

    def decision(self) -> tuple[str, tuple]:
        """(subject, values of the key fields): what this op decides."""
        subject, keys = self.DECIDES
        return subject, tuple(getattr(self, k) for k in keys)

    def content(self) -> tuple:
        """How it decides: the kind and every field that changes what the op does (not its bookkeeping,
        not the key fields). Equal decisions with equal content are duplicates."""
        keys = set(self.DECIDES[1])
        return (self.kind,) + tuple((f.name, getattr(self, f.name)) for f in fields(self)
                                    if f.name not in self.BOOKKEEPING and f.name not in keys)

    @property
    def op(self) -> str:
        return self.kind

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"id": self.id, "op": self.kind, "step": self.step}
        for f in fields(self):
            if f.name in ("id", "step"):
                continue
            v = getattr(self, f.name)
            if v is not None:
                out[f.name] = list(v) if isinstance(v, tuple) else v
        return out


@dataclass(frozen=True)
class OpUnit:
    """One operation kind: the recipe key that introduces it, its spec class, expansion,
    rendering, and the engines that refuse it (engine -> reason). An engine not listed in
    `refused_by` must have a performer module `surgery/ops/<recipe_key>/<engine>.py`."""

    kind: str
    spec: type
    expand: Callable[[Any, Any], list]  # (resolver, recipe OpSpec) -> list of specs
    render: Callable[[int, list], list[str]]  # (step, specs of that step) -> table lines
    label: Callable[[Any], str]  # first spec of a step -> short label ("share_kv (kv_source)")
    summary: str
    recipe_key: str = ""  # the step's key in a recipe: the kind unless given
    refused_by: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        if not self.recipe_key:
            object.__setattr__(self, "recipe_key", self.kind)

    def refusal(self, engine: str) -> str | None:
        return self.refused_by.get(engine)
