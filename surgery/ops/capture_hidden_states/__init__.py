"""capture_hidden_states: the target returns the hidden states of a layer set (EAGLE-3 auxiliary layers)."""
from __future__ import annotations

from dataclasses import dataclass

from ..base import Operation, OpUnit
from ..common import step_fields


@dataclass(frozen=True, kw_only=True)
class CaptureHiddenStates(Operation):
    kind = "capture_hidden_states"
    BOOKKEEPING = Operation.BOOKKEEPING + ("layer_set",)

    layers: tuple[int, ...]
    layer_set: str


def expand(resolver, step) -> list[CaptureHiddenStates]:
    name = step.args["layers"]
    return [CaptureHiddenStates(id=f"capture_hidden_states:{name}", layers=tuple(resolver.sets.get(name, ())),
                                layer_set=name, **step_fields(step))]


def render(step: int, ops: list[CaptureHiddenStates]) -> list[str]:
    first = ops[0]
    return [f"  [{step}] capture_hidden_states ({first.layer_set}): target layers "
            f"{', '.join(str(i) for i in first.layers)} feed the draft"]


UNIT = OpUnit(
    kind="capture_hidden_states", spec=CaptureHiddenStates, expand=expand,
    render=render, label=lambda o: f"capture_hidden_states ({o.layer_set})",
    summary="the target returns the hidden states of a layer set to the draft (EAGLE-3 auxiliary layers)",
    refused_by={"hf": "surgery's HF loader and decoding loop run Gemma 4 pairs only; no HF draft here consumes "
                      "auxiliary target hidden states"},
)
