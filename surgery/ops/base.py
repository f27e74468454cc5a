"""What every operation kind has: a typed recipe step, a typed, frozen spec and a unit describing it.

An *op unit* (one folder per kind in this package) holds everything about one kind of
operation: its step class (a frozen `Step` subclass: the keys a recipe step of that kind takes, each
with its description, examples and JSON constraints, from which the recipe schema's op part is
generated), its spec (a frozen `Operation` subclass with only the fields that kind uses), how a recipe step
expands into concrete specs, its plan-time checks, how a step renders in the plan table, and, per engine, either a
performer (`surgery/ops/<kind>/<engine>.py` with `prepare(op, draft, target, context)`) or a
declared reason why that engine cannot perform it. The registry (surgery/ops/registry.py) checks
both when a unit is registered; tests/ops/test_registry.py fails when a spec field is ignored by a
performer.
"""
from __future__ import annotations

import types
from dataclasses import MISSING, Field, dataclass, field, fields
from functools import lru_cache
from typing import Any, Callable, ClassVar, Literal, Union, get_args, get_origin, get_type_hints

from ..text.records import Record, record

# the codes a recipe step (and a `requires:` entry) may name for itself: the plan-check range and the
# recipe-defined requirement codes (surgery/data/codes.yaml)
RECIPE_CODE_PATTERN = "^SRG(3[0-9]{2}|67[2-9]|68[1-4])$"
NAME_PATTERN = "^[A-Za-z_][A-Za-z0-9_]{0,63}$"  # an attribute name on an engine module


def arg(help: str, examples: list, *, default: Any = MISSING, key: str | None = None, ref: str | None = None,
        items: dict | None = None, **json: Any) -> Any:
    """A recipe-facing field of a step class, with what the recipe schema says of it: `help` (its
    description, as PEFT's LoraConfig keeps `metadata={"help": ...}`) and `examples` (editors show both on
    hover; docs/recipe-reference.md is made of them), the JSON constraints its type does not carry
    (`pattern`, `minLength`, `maxItems`, ...; `items`: constraints on each item), `ref` (a `$defs`
    schema that replaces the type: an expression) and `key` (the recipe key where it is not the
    field's name: `from` is a Python keyword). surgery/ops/schema.py turns it into JSON Schema."""
    metadata = {"help": help, "examples": examples, "key": key, "ref": ref, "items": items or {}, "json": json}
    return field(metadata=metadata) if default is MISSING else field(default=default, metadata=metadata)


def key_of(f) -> str:
    """The key a step field has in a recipe."""
    return f.metadata.get("key") or f.name


@record
class Args(Record):
    """A typed mapping of a recipe: the keys a recipe may give, one field each (`arg`), with the
    mapping's own description and examples (`HELP`, `EXAMPLES`). Built from the recipe's data after
    the schema check passed it, so the data has the shape the fields say."""

    HELP: ClassVar[str] = ""
    EXAMPLES: ClassVar[list] = []

    @classmethod
    def from_recipe(cls, data: dict) -> "Args":
        values = {}
        for f, hint in typed_fields(cls):
            if key_of(f) in data:
                values[f.name] = _typed(data[key_of(f)], item_class(hint))
        return cls(**values)


@lru_cache(maxsize=None)
def typed_fields(cls: type) -> tuple[tuple[Field, Any], ...]:
    """(field, its resolved type) of an `Args` class, in field order (the annotations are strings here)."""
    hints = get_type_hints(cls)
    return tuple((f, hints[f.name]) for f in fields(cls))


def resolve_shape(cls: type) -> None:
    """Resolve the field types of a step class and of the mappings it nests, once, when its op kind is
    registered (at import): resolving a string annotation evaluates it (this package's own source),
    which must never happen while a recipe is parsed (tests/test_security.py traps eval there)."""
    for _, hint in typed_fields(cls):
        if item_class(hint):
            resolve_shape(item_class(hint))


def without_none(hint: Any) -> Any:
    """`X | None` -> X (a field that may be left out); anything else as it is."""
    if get_origin(hint) in (Union, types.UnionType):
        rest = [a for a in get_args(hint) if a is not type(None)]
        return rest[0] if len(rest) == 1 else Union[tuple(rest)]
    return hint


def item_class(hint: Any) -> type | None:
    """The `Args` class of a list field's items when they are mappings of their own (copy_attrs' rules)."""
    hint = without_none(hint)
    if get_origin(hint) is tuple and isinstance(get_args(hint)[0], type) and issubclass(get_args(hint)[0], Args):
        return get_args(hint)[0]
    return None


def _typed(value: Any, items: type | None) -> Any:
    """A recipe value as the field holds it: a list becomes a tuple (of `items` objects, when its items
    are mappings of their own shape), so steps stay frozen and hashable."""
    if isinstance(value, list):
        return tuple(items.from_recipe(v) if items else v for v in value)
    return value


@record
class Step(Args):
    """The fields every recipe step has, whatever its op: when it runs and what happens when it does not
    (the op's own fields come from its step class, `surgery/ops/<kind>/__init__.py`)."""

    when: str | None = arg(
        "Run this step only when the expression holds (runtime facts: pp_size, tp_size, draft_tp_size, "
        "kv_cache_dtype, engine, attention_backend, device, backend_head_sizes; model facts: draft.X, target.X).",
        ["pp_size == 1"], default=None, ref="#/$defs/expression")
    otherwise: Literal["skip", "warn", "error"] | None = arg(
        "What happens when `when` is false: `skip` (listed in the plan with the reason), `warn` (skipped with a "
        "warning), `error` (the plan is not ok). Also what happens when the selected engine cannot perform the step "
        "at load time: `skip` / `warn` report it (SRG321); `error` or no `otherwise` stops apply / engine start "
        "(SRG322, strict by default).", ["error"], default=None)
    because: str | None = arg("Why this step exists / why it may be skipped; shown in the plan and in diagnostics.",
                              ["the draft's embedding is a placeholder"], default=None, minLength=1, maxLength=500)
    code: str | None = arg("Diagnostic code reported when this step cannot run (defaults to SRG311 for error, SRG312 "
                           "for warn, SRG320 for skip).", ["SRG311"], default=None, pattern=RECIPE_CODE_PATTERN)


@record
class Operation(Record):
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
    """One operation kind: its name (the step's key in a recipe, the spec's `kind`, the folder
    `surgery/ops/<kind>/`: one name, checked when registered), the step class the recipe's mapping
    is read into (its fields generate the op's part of the recipe schema, surgery/ops/schema.py), the
    spec class of the operations it expands into, expansion, rendering, the plan-time checks, and the
    engines that refuse it (engine -> reason). An engine not listed in `refused_by` must have a
    performer module `surgery/ops/<kind>/<engine>.py`.

    The plan-time checks the resolver calls (surgery/resolver.py), both optional:
    - `check_recipe(resolver, steps)`: once per plan, with every step of this kind whether its `when`
      holds or not, after the layer maps and sets are built and before any step expands (share_kv:
      the KV maps its steps read);
    - `check(resolver, step) -> bool`: each step whose `when` holds, just before it expands; False
      (with the diagnostic added) and the step expands to nothing (share_module: the shapes fit)."""

    kind: str
    step_class: type
    spec: type
    expand: Callable[[Any, Any], list]  # (resolver, recipe OpSpec) -> list of specs
    render: Callable[[int, list], list[str]]  # (step, specs of that step) -> table lines
    label: Callable[[Any], str]  # first spec of a step -> short label ("share_kv (kv_source)")
    summary: str
    refused_by: dict[str, str] = field(default_factory=dict)
    check_recipe: Callable[[Any, list], None] | None = None
    check: Callable[[Any, Any], bool] | None = None

    def refusal(self, engine: str) -> str | None:
        return self.refused_by.get(engine)
