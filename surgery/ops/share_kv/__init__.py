"""share_kv: a draft attention layer reads the mapped target layer's KV cache."""
from __future__ import annotations

from dataclasses import dataclass

from ..base import Operation, OpUnit
from ..common import group_by_target, step_fields


@dataclass(frozen=True, kw_only=True)
class ShareKV(Operation):
    kind = "share_kv"
    BOOKKEEPING = Operation.BOOKKEEPING + ("map",)  # the map's name; its rows are draft/target_layer
    DECIDES = ("the KV cache a draft layer reads", ("draft_layer",))

    map: str
    draft_layer: int
    target_layer: int


def expand(resolver, step) -> list[ShareKV]:
    m = step.args["map"]
    return [ShareKV(id=f"share_kv:{m}:{row.draft}->{row.target}", map=m, draft_layer=row.draft,
                    target_layer=row.target, **step_fields(step)) for row in resolver.maps.get(m, ())]


def render(step: int, ops: list[ShareKV]) -> list[str]:
    desc = "; ".join(f"draft {d} -> target {t}" for d, t in group_by_target([(o.draft_layer, o.target_layer) for o in ops]))
    return [f"  [{step}] share_kv ({ops[0].map}): {desc}"]


UNIT = OpUnit(kind="share_kv", spec=ShareKV, expand=expand, render=render, label=lambda o: f"share_kv ({o.map})",
              summary="draft attention layer reads the mapped target layer's KV cache",
              refused_by={"sglang": "SGLang gives the draft worker its own KV pool (EagleDraftWorker.alloc_memory_pool "
                                    "shares only req_to_token_pool); a draft layer cannot read a target layer's cache "
                                    "there. Gemma 4 assistants: use vLLM or HF; docs/sglang.md"})
