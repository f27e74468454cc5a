"""share_buffer: draft modules use the target's object for a named attribute (e.g. DeepSeek V3.2 top-k buffer)."""
from __future__ import annotations

from typing import Literal

from ...text.records import record
from ..base import NAME_PATTERN, Operation, OpUnit, Step, arg
from ..common import step_fields

Scope = Literal["all_modules", "model"]  # model: the draft's inner model | all_modules: that and every submodule holding attr


@record
class ShareBufferStep(Step):
    HELP = ("Alias a target buffer onto the draft: every draft module that holds the attribute gets the target "
            "model's object (e.g. DeepSeek V3.2's `topk_indices_buffer`).")
    EXAMPLES = [{"attr": "topk_indices_buffer", "when": "target.index_topk != null", "otherwise": "skip"}]

    attr: str = arg("Attribute name held by the target's inner model and by draft modules.", ["topk_indices_buffer"],
                    pattern=NAME_PATTERN)
    scope: Scope = arg("`all_modules`: the draft's inner model and every submodule holding the attribute; `model`: the "
                       "draft's inner model only.", ["all_modules"], default="all_modules")


@record
class ShareBuffer(Operation):
    kind = "share_buffer"
    BOOKKEEPING = Operation.BOOKKEEPING + ("source",)
    DECIDES = ("a draft buffer attribute", ("attr",))

    attr: str
    source: str = "target"
    scope: Scope = "all_modules"


def expand(resolver, step) -> list[ShareBuffer]:
    attr = step.args.attr
    return [ShareBuffer(id=f"share_buffer:{attr}", attr=attr, scope=step.args.scope,
                        **step_fields(step))]


def render(step: int, ops: list[ShareBuffer]) -> list[str]:
    first = ops[0]
    return [f"  [{step}] share_buffer {first.attr}: draft modules ({first.scope}) use the target's object"]


UNIT = OpUnit(
    kind="share_buffer", step_class=ShareBufferStep, spec=ShareBuffer, expand=expand, render=render,
    label=lambda o: f"share_buffer {o.attr}",
    summary="draft modules use the target's object for a named attribute (e.g. a shared top-k indices buffer)",
    refused_by={"hf": "surgery's HF loader runs Gemma 4 pairs only; their modules hold no buffer shared with "
                      "the target",
                "sglang": "the recipes' share_buffer is for vLLM's DeepSeek-V3.2 / GLM MTP indexer buffers; "
                          "surgery does not wire SGLang's sparse-attention (DSA) drafts; docs/sglang.md"},
)
