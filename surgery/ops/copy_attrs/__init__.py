"""copy_attrs: per mapped layer pair, copy attention attributes (KV-cache scales) from target to draft."""
from __future__ import annotations

from typing import Literal

from ...text.records import record
from ..base import NAME_PATTERN, Args, Operation, OpUnit, Step, arg
from ..common import group_by_target, map_arg, step_fields

Mode = Literal["clone_keep_registration", "assign", "copy_inplace"]  # what `vllm.py` performs


@record
class CopyRule(Args):
    HELP = "One group of attributes copied the same way."
    EXAMPLES = [{"attrs": ["_k_scale_cpu"], "mode": "copy_inplace"}]

    attrs: tuple[str, ...] = arg("Attribute names on the engine's attention layer.", [["_k_scale", "_v_scale"]],
                                 minItems=1, maxItems=32, uniqueItems=True, items={"pattern": NAME_PATTERN})
    mode: Mode = arg("`clone_keep_registration`: clone the target tensor, keep the draft's registration kind (buffer / "
                     "Parameter), shape follows the target; `assign`: plain value assignment; `copy_inplace`: copy "
                     "into the draft's existing tensor.", ["assign"])


@record
class CopyAttrsStep(Step):
    HELP = ("Copy attributes (e.g. KV-cache quantisation scales) from each mapped target attention layer onto its "
            "draft layer.")
    EXAMPLES = [{"map": "kv_source", "rules": [{"attrs": ["_k_scale", "_v_scale"], "mode": "clone_keep_registration"}]}]

    map: str = map_arg()
    rules: tuple[CopyRule, ...] = arg("Attribute groups and how each is copied.",
                                      [[{"attrs": ["_k_scale_float"], "mode": "assign"}]], minItems=1, maxItems=32)


@record
class CopyAttr(Operation):
    kind = "copy_attrs"
    BOOKKEEPING = Operation.BOOKKEEPING + ("map",)
    DECIDES = ("a draft attention attribute", ("draft_layer", "attr"))

    map: str
    draft_layer: int
    target_layer: int
    attr: str
    mode: Mode


def expand(resolver, step) -> list[CopyAttr]:
    m = step.args.map
    out = []
    for rule in step.args.rules:
        for attr in rule.attrs:
            for row in resolver.maps.get(m, ()):
                out.append(CopyAttr(id=f"copy_attrs:{m}:{attr}:{row.draft}<-{row.target}", map=m, draft_layer=row.draft,
                                    target_layer=row.target, attr=attr, mode=rule.mode, **step_fields(step)))
    return out


def render(step: int, ops: list[CopyAttr]) -> list[str]:
    attrs: dict[tuple, list[tuple[int, int]]] = {}
    for o in ops:
        attrs.setdefault((o.attr, o.mode), []).append((o.draft_layer, o.target_layer))
    return [f"  [{step}] copy {attr} ({mode}): " + "; ".join(f"draft {d} <- target {t}" for d, t in group_by_target(pairs))
            for (attr, mode), pairs in attrs.items()]


UNIT = OpUnit(
    kind="copy_attrs", step_class=CopyAttrsStep, spec=CopyAttr, expand=expand, render=render,
    label=lambda o: "copy_attrs",
    summary="copy attention attributes (KV-cache quantisation scales) from the mapped target layer",
    refused_by={"hf": "HF attention layers hold no KV-cache quantisation scales (a vLLM concept)",
                "sglang": "copy_attrs copies KV scales between layers that share a KV cache (share_kv), which "
                          "SGLang's draft never does (it allocates the draft's own KV pool); docs/sglang.md"},
)
