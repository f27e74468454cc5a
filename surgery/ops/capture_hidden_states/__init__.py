"""capture_hidden_states: the target returns the hidden states of a layer set (EAGLE-3 auxiliary layers)."""
from __future__ import annotations


from ...engine.capture import judged, sglang_dspark_v4_capture, sglang_final_boundary
from ...text.records import record
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
    """Plan time, a step whose `when` holds: ids the engine release's capture cannot return (the card's
    `wiring.capturable_ids` for the judged release: SGLang up to 0.5.21 1..L-1, from 0.5.22 0..L-1; never
    L, the final state), said before anything loads (SRG362), with SRG370 / SRG371 when the release is
    not one the card read or none was given. The step expands whatever it finds (the engine refuses them)."""
    runtime = resolver.runtime
    where = resolver.recipe.location(step.path + ("layers",))
    judgement = judged(runtime.engine, runtime.engine_version, where)
    if judgement is None:
        return True
    if judgement.line is not None:
        resolver.diags.append(judgement.line)
    n = resolver.target.num_layers
    ok = judgement.ids(n)
    if ok is None:
        return True
    layers = resolver.sets.get(step.args.layers, ())
    source = judgement.source
    if runtime.engine == "sglang":
        # DeepSeek-V4's own DSpark drafter: the target class captures it by itself, each listed layer's output
        # after the layer (ids 1..L here), not the generic input-of-layer capture (sglang_limits.yaml dspark_v4_capture)
        own = sglang_dspark_v4_capture(judgement.release, getattr(resolver.draft, "raw", None),
                                       (resolver.recipe.engine.get("vllm") or {}).get("method"))
        if own:
            ok, source = range(1, n + 1), (f"{own.removeprefix('sglang/srt/')} DeepseekV4ForCausalLM."
                                           "set_dspark_layers_to_capture: each listed layer's output")
    outside = [i for i in layers if i not in ok]
    if runtime.engine == "sglang" and outside == [n] and max(layers) == n \
            and sglang_final_boundary(judgement.release, resolver.target.model_type):
        outside = []  # ids as boundaries, L the final state: this class captures it (sglang#32334)
    if outside:
        resolver.add("SRG362", f"{judgement.label()} cannot capture aux ids {outside} of a {n}-layer target (it "
                     f"captures ids {ok.start}..{ok.stop - 1}: {source})", where)
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
