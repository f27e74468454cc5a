"""capture_hidden_states: the target returns the hidden states of a layer set (EAGLE-3 auxiliary layers)."""
from __future__ import annotations


from ...engine.cards import ENGINES, card
from ...records import record
from ..base import Operation, OpUnit, Step
from ..common import layer_set_arg, step_fields


@record
class CaptureHiddenStatesStep(Step):
    HELP = ("The target returns the hidden states of these layers (EAGLE-3 auxiliary hidden states) to the draft; "
            "layer id k is the input of target layer k (vLLM's `aux_hidden_state_layers` semantics).")
    EXAMPLES = [{"layers": "aux_layers"}]

    layers: str = layer_set_arg(["aux_layers"], "Name of a layer set (see `layer_sets`): the target returns the hidden "
                                "states of its layer ids, all in one operation.")


@record
class CaptureHiddenStates(Operation):
    kind = "capture_hidden_states"
    BOOKKEEPING = Operation.BOOKKEEPING + ("layer_set",)
    DECIDES = ("the target layers the draft is fed", ())  # one set per plan

    layers: tuple[int, ...]
    layer_set: str


def expand(resolver, step) -> list[CaptureHiddenStates]:
    name = step.args.layers
    layers = tuple(resolver.sets.get(name, ()))
    return [CaptureHiddenStates(id=f"capture_hidden_states:{name}", layers=layers, layer_set=name, **step_fields(step))]


def check(resolver, step) -> bool:
    """Plan time, a step whose `when` holds: ids the engine's capture loop cannot return (the card's
    `wiring.capturable_ids`, `1..L-1` for SGLang: no embedding output, no final state), said before
    anything loads (SRG362). The step expands whatever it finds (the engine start refuses them)."""
    engine = resolver.runtime.engine
    wiring = card(engine).wiring if engine in ENGINES else None
    span = wiring.capturable_ids if wiring is not None else None
    if span != "1..L-1":
        return True
    layers = resolver.sets.get(step.args.layers, ())
    n = resolver.target.num_layers
    outside = [i for i in layers if not 1 <= i < n]
    if outside:
        resolver.add("SRG362", f"{engine} cannot capture aux ids {outside} of a {n}-layer target (it captures the "
                     f"input of layers 1..{n - 1})", resolver.recipe.location(step.path + ("layers",)))
    return True


def render(step: int, ops: list[CaptureHiddenStates]) -> list[str]:
    first = ops[0]
    return [f"  [{step}] capture_hidden_states ({first.layer_set}): target layers "
            f"{', '.join(str(i) for i in first.layers)} feed the draft"]


UNIT = OpUnit(
    kind="capture_hidden_states", step_class=CaptureHiddenStatesStep, spec=CaptureHiddenStates, expand=expand,
    check=check,
    render=render, label=lambda o: f"capture_hidden_states ({o.layer_set})",
    summary="the target returns the hidden states of a layer set to the draft (EAGLE-3 auxiliary layers)",
    refused_by={"hf": "surgery's HF loader and decoding loop run Gemma 4 pairs only; no HF draft here consumes "
                      "auxiliary target hidden states"},
)
