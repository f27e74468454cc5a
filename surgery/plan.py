"""The Plan: the resolved, concrete, frozen list of what apply will do, and what it will not do and why.

Appliers read only the Plan. It serialises to JSON (schema: schemas/plan.schema.json; the keys
`ok`, `layer_maps`, `operations`, `skipped`, `diagnostics` are a stable contract) and renders as a
table with compact layer ranges.
"""
from __future__ import annotations

import json
from dataclasses import field, replace
from typing import Any

from .text.diagnostics import ERROR, Diagnostic
from .ops.base import Operation
from .ops.common import compact_ranges
from .ops.registry import UNITS
from .text.render import counts, render_diagnostics
from .engine.cards import ENGINES, card
from .hints import unchecked_hints
from .text.records import Record, record

PLAN_FORMAT = 1


@record
class Runtime(Record):
    """Facts about where the plan will run; conditions in recipes read these."""

    engine: str = "vllm"
    pp_size: int = 1
    tp_size: int = 1
    kv_cache_dtype: str = "auto"
    attention_backend: str | None = None
    pp_rank: int | None = None
    tp_rank: int | None = None
    draft_tp_size: int | None = None  # None: vLLM's default, the target's tp_size
    device: str | None = None  # cuda, cpu, ... (None: not known when resolving)
    # the engine release as given (--engine-version) or installed; None: not known. Not a recipe condition
    # name (RUNTIME_NAMES): SGLang's capture range (SRG362) is judged per release (surgery/engine/capture.py)
    engine_version: str | None = None

    def lookup(self, name: str) -> Any:
        if name == "draft_tp_size":
            return self.tp_size if self.draft_tp_size is None else self.draft_tp_size
        if name == "backend_head_sizes":
            if not self.attention_backend:
                return None

            if self.engine not in ENGINES:  # an engine without a card knows no backend sizes
                return None
            sizes = card(self.engine).attention_backends.get(self.attention_backend)
            return list(sizes) if sizes is not None else None
        return getattr(self, name)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@record
class Skipped(Record):
    step: int
    op: str
    reason: str
    code: str
    severity: str  # info | warning | error
    role: str | None = None
    map: str | None = None
    attr: str | None = None  # share_buffer
    layer_set: str | None = None  # capture_hidden_states / per-layer share_module

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@record
class MapRow(Record):
    draft: int
    target: int
    draft_type: str
    target_type: str
    head_dim: int
    num_kv_heads: int
    sliding_window: int | None

    def to_dict(self) -> dict:
        return {"draft": self.draft, "target": self.target, "draft_type": self.draft_type,
                "target_type": self.target_type, "head_dim": self.head_dim,
                "num_kv_heads": self.num_kv_heads, "sliding_window": self.sliding_window}


@record
class Plan(Record):
    recipe: str
    recipe_file: str | None
    runtime: Runtime
    target: dict  # summary of the target facts (model type, layers, source)
    draft: dict
    layer_maps: dict[str, tuple[MapRow, ...]]
    map_rules: dict[str, str]
    operations: tuple[Operation, ...]
    skipped: tuple[Skipped, ...]
    diagnostics: tuple[Diagnostic, ...]
    engine_hints: dict = field(default_factory=dict)
    defaults_used: dict = field(default_factory=dict)
    layer_sets: dict = field(default_factory=dict)  # name -> tuple of layer indices

    def layer_set(self, name: str) -> list[int]:
        return list(self.layer_sets.get(name, ()))

    @property
    def ok(self) -> bool:
        return not any(d.severity == ERROR for d in self.diagnostics)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == ERROR]

    def pairs(self, map_name: str) -> list[tuple[int, int]]:
        return [(r.draft, r.target) for r in self.layer_maps.get(map_name, ())]

    def ops(self, kind: str) -> list[Operation]:
        return [o for o in self.operations if o.op == kind]

    def without_step(self, step: int) -> "Plan":
        """The same plan with one recipe operation removed (used by `surgery apply --ablate`)."""
        return replace(self, operations=tuple(o for o in self.operations if o.step != step))

    @property
    def unchecked_hints(self) -> list[str]:
        """The recipe's hints for this plan's engine that the engine does not check (surgery/hints.py)."""

        return unchecked_hints(self.engine_hints, self.runtime.engine)

    def to_dict(self) -> dict:
        return {
            "format": PLAN_FORMAT,
            "ok": self.ok,
            "recipe": self.recipe,
            "recipe_file": self.recipe_file,
            "runtime": self.runtime.to_dict(),
            "target": self.target,
            "draft": self.draft,
            "layer_maps": {name: [{"draft": r.draft, "target": r.target} for r in rows]
                           for name, rows in self.layer_maps.items()},
            "layer_map_details": {name: {"rule": self.map_rules[name], "rows": [r.to_dict() for r in rows]}
                                  for name, rows in self.layer_maps.items()},
            "operations": [o.to_dict() for o in self.operations],
            "skipped": [s.to_dict() for s in self.skipped],
            "diagnostics": [d.to_dict() for d in self.diagnostics],
            "engine_hints": self.engine_hints,
            "engine_hints_unchecked": self.unchecked_hints,
            "defaults_used": self.defaults_used,
            "layer_sets": {name: list(v) for name, v in self.layer_sets.items()},
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)


def render_table(plan: Plan, verbose: bool = False, inline_diagnostics: bool = True) -> str:
    """The plan for people. First line: the verdict ([OK] / [NOT OK]) and the runtime, with how many findings there
    are. inline_diagnostics: the findings follow the plan (errors, then warnings, each once; notes with verbose;
    surgery/text/render.py); `surgery plan` prints them on stderr instead, as every command does."""

    lines = []
    status = "OK" if plan.ok else "NOT OK"
    rt = plan.runtime
    said = counts(plan.diagnostics, verbose=verbose)
    lines.append(f"plan {plan.recipe}  [{status}]  engine={rt.engine} pp={rt.pp_size} tp={rt.tp_size} "
                 f"kv_cache_dtype={rt.kv_cache_dtype}" + (f" device={rt.device}" if rt.device else "")
                 + (f"; {said}" if said else ""))
    lines.append(f"  target: {plan.target['model_type']} ({plan.target['num_layers']} layers, "
                 f"{plan.target['num_kv_shared_layers']} KV-shared)  {plan.target['source']}")
    lines.append(f"  draft:  {plan.draft['model_type']} ({plan.draft['num_layers']} layers, "
                 f"{plan.draft['num_kv_shared_layers']} KV-shared)  {plan.draft['source']}")
    for name, rows in plan.layer_maps.items():
        lines.append("")
        lines.append(f"layer map {name} (rule {plan.map_rules[name]})")
        lines.append(f"  {'draft':<8} {'target':<7} {'type':<18} {'head_dim':>8} {'kv_heads':>8} {'window':>7}")
        groups: dict[tuple, list[int]] = {}
        for r in rows:
            groups.setdefault((r.target, r.draft_type, r.head_dim, r.num_kv_heads, r.sliding_window), []).append(r.draft)
        for (t, typ, hd, kv, win), ds in sorted(groups.items(), key=lambda kv: min(kv[1])):
            lines.append(f"  {compact_ranges(ds):<8} {t:<7} {typ:<18} {hd:>8} {kv:>8} {win if win else '-':>7}")
    if plan.layer_sets:
        lines.append("")
        for name, idx in plan.layer_sets.items():
            lines.append(f"layer set {name}: {compact_ranges(list(idx)) or '(empty)'}")
    lines.append("")
    lines.append("operations")
    by_step: dict[int, list[Operation]] = {}
    for o in plan.operations:
        by_step.setdefault(o.step, []).append(o)

    for step, ops in by_step.items():
        lines.extend(UNITS[ops[0].op].render(step, ops))
    if plan.skipped:
        lines.append("")
        lines.append("skipped")
        for s in plan.skipped:
            what = s.role or s.map or s.attr or s.layer_set or ""
            lines.append(f"  [{s.step}] {s.op} {what}: {s.code} {s.reason}")
    hints = plan.engine_hints.get(plan.runtime.engine)
    if hints:
        lines.append("")
        lines.append("engine hints (" + plan.runtime.engine + "): " + ", ".join(f"{k}={v}" for k, v in hints.items()))
        if plan.unchecked_hints:
            lines.append(f"  not checked by {plan.runtime.engine}: {', '.join(plan.unchecked_hints)} "
                         "(recorded only; surgery/hints.py)")
    if inline_diagnostics:

        block = render_diagnostics(plan.diagnostics, verbose=verbose)
        if block:
            lines.append("")
            lines.append(f"diagnostics ({counts(plan.diagnostics, verbose=verbose)})")
            lines.extend("  " + line for line in block.rstrip("\n").split("\n"))
        elif counts(plan.diagnostics, verbose=verbose):
            lines.append("")
            lines.append(f"diagnostics: {counts(plan.diagnostics, verbose=verbose)}")
    return "\n".join(lines)
