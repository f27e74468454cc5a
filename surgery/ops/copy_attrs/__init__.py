"""copy_attrs: per mapped layer pair, copy attention attributes (KV-cache scales) from target to draft."""
from __future__ import annotations

from dataclasses import dataclass

from ..base import Operation, OpUnit
from ..common import group_by_target, step_fields


@dataclass(frozen=True, kw_only=True)
class CopyAttr(Operation):
    kind = "copy_attrs"
    BOOKKEEPING = Operation.BOOKKEEPING + ("map",)
    DECIDES = ("a draft attention attribute", ("draft_layer", "attr"))

    map: str
    draft_layer: int
    target_layer: int
    attr: str
    mode: str  # clone_keep_registration | assign | copy_inplace


def expand(resolver, step) -> list[CopyAttr]:
    m = step.args["map"]
    out = []
    for rule in step.args["rules"]:
        for attr in rule["attrs"]:
            for row in resolver.maps.get(m, ()):
                out.append(CopyAttr(id=f"copy_attrs:{m}:{attr}:{row.draft}<-{row.target}", map=m, draft_layer=row.draft,
                                    target_layer=row.target, attr=attr, mode=rule["mode"], **step_fields(step)))
    return out


def render(step: int, ops: list[CopyAttr]) -> list[str]:
    attrs: dict[tuple, list[tuple[int, int]]] = {}
    for o in ops:
        attrs.setdefault((o.attr, o.mode), []).append((o.draft_layer, o.target_layer))
    return [f"  [{step}] copy {attr} ({mode}): " + "; ".join(f"draft {d} <- target {t}" for d, t in group_by_target(pairs))
            for (attr, mode), pairs in attrs.items()]


UNIT = OpUnit(
    kind="copy_attrs", recipe_key="copy_attrs", spec=CopyAttr, expand=expand, render=render,
    label=lambda o: "copy_attrs",
    summary="copy attention attributes (KV-cache quantisation scales) from the mapped target layer",
    refused_by={"hf": "HF attention layers hold no KV-cache quantisation scales (a vLLM concept)",
                "sglang": "copy_attrs copies KV scales between layers that share a KV cache (share_kv), which "
                          "SGLang's draft never does (it allocates the draft's own KV pool); docs/sglang.md"},
)
