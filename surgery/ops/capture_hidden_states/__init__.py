"""capture_hidden_states: the target returns the hidden states of a layer set (EAGLE-3 auxiliary layers)."""
from __future__ import annotations

from dataclasses import dataclass

from ...engines import ENGINES, card
from ..base import Operation, OpUnit
from ..common import step_fields


@dataclass(frozen=True, kw_only=True)
class CaptureHiddenStates(Operation):
    kind = "capture_hidden_states"
    BOOKKEEPING = Operation.BOOKKEEPING + ("layer_set",)
    DECIDES = ("the target layers the draft is fed", ())  # one set per plan

    layers: tuple[int, ...]
    layer_set: str


def expand(resolver, step) -> list[CaptureHiddenStates]:
    name = step.args["layers"]
    layers = tuple(resolver.sets.get(name, ()))
    check_capturable(resolver, step, layers)
    return [CaptureHiddenStates(id=f"capture_hidden_states:{name}", layers=layers, layer_set=name, **step_fields(step))]


def check_capturable(resolver, step, layers: tuple[int, ...]) -> None:
    """Plan time: ids the engine's capture loop cannot return (the card's `wiring.capturable_ids`,
    `1..L-1` for SGLang: no embedding output, no final state), said before anything loads (SRG362)."""
    engine = resolver.runtime.engine
    wiring = card(engine).wiring if engine in ENGINES else None
    span = wiring.capturable_ids if wiring is not None else None
    if span != "1..L-1":
        return
    n = resolver.target.num_layers
    outside = [i for i in layers if not 1 <= i < n]
    if outside:
        resolver.add("SRG362", f"{engine} cannot capture aux ids {outside} of a {n}-layer target (it captures the "
                     f"input of layers 1..{n - 1})", resolver.recipe.location(step.path + ("layers",)))


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
