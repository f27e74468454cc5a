"""share_buffer: draft modules use the target's object for a named attribute (e.g. DeepSeek V3.2 top-k buffer)."""
from __future__ import annotations

from dataclasses import dataclass

from ..base import Operation, OpUnit
from ..common import step_fields


@dataclass(frozen=True, kw_only=True)
class ShareBuffer(Operation):
    kind = "share_buffer"
    BOOKKEEPING = Operation.BOOKKEEPING + ("source",)
    DECIDES = ("a draft buffer attribute", ("attr",))

    attr: str
    source: str = "target"
    scope: str = "all_modules"  # model: the draft's inner model | all_modules: that and every submodule holding attr


def expand(resolver, step) -> list[ShareBuffer]:
    attr = step.args["attr"]
    return [ShareBuffer(id=f"share_buffer:{attr}", attr=attr, scope=step.args.get("scope", "all_modules"),
                        **step_fields(step))]


def render(step: int, ops: list[ShareBuffer]) -> list[str]:
    first = ops[0]
    return [f"  [{step}] share_buffer {first.attr}: draft modules ({first.scope}) use the target's object"]


UNIT = OpUnit(
    kind="share_buffer", spec=ShareBuffer, expand=expand, render=render,
    label=lambda o: f"share_buffer {o.attr}",
    summary="draft modules use the target's object for a named attribute (e.g. a shared top-k indices buffer)",
    refused_by={"hf": "surgery's HF loader runs Gemma 4 pairs only; their modules hold no buffer shared with "
                      "the target",
                "sglang": "the recipes' share_buffer is for vLLM's DeepSeek-V3.2 / GLM MTP indexer buffers; "
                          "surgery does not wire SGLang's sparse-attention (DSA) drafts; docs/sglang.md"},
)
