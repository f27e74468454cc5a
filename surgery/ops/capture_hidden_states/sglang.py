"""capture_hidden_states inside an SGLang speculative worker: the target's text model captures the
planned layers through `layers_to_capture`, the list its `set_eagle3_layers_to_capture` fills.

The recipe's ids are vLLM's (id i = the input of layer i), and SGLang's `layers_to_capture` means
the same thing (models/llama.py LlamaModel.forward appends `hidden_states + residual` before layer
i), so the planned ids are set as they are. What SGLang itself would have set differs: it reads the
ids from the draft's nested eagle_config only and adds 1 (surgery/sglang/rules.py, checked against
SGLang's code). No release captures id L (past the last layer); up to 0.5.21 none captures id 0 (the
residual is None there; from 0.5.22 the attention boundary captures the embedding output): the running
release's range (the engine card's `capturable_ids`, surgery/engine/capture.py) decides, and ids
outside it are refused (SRG362), never set for SGLang to fail on mid-forward."""
from __future__ import annotations

from typing import Any

from ...text.diagnostics import SurgeryError, diag
from ...engine.capture import judged, sglang_final_boundary
from ...live.mutations import Mutation
from ...live.prepared import Check, NotApplicable, Prepared
from ...live.sglang import capture_holder, num_layers


class SetLayersToCapture(Mutation):
    """Set the target's capture list (and its capture flag, as set_eagle3_layers_to_capture does);
    undo restores both."""

    def __init__(self, label: str, target: Any, holder: Any, layers: tuple[int, ...]):
        super().__init__(label)
        self.target, self.holder, self.layers = target, holder, layers
        self.previous: list | None = None
        self.previous_flag: Any = None

    def apply(self) -> None:
        self.previous = list(self.holder.layers_to_capture)
        self.previous_flag = getattr(self.target, "capture_aux_hidden_states", None)
        self.holder.layers_to_capture = list(self.layers)
        self.target.capture_aux_hidden_states = True

    def undo(self) -> None:
        if self.previous is None:
            return
        self.holder.layers_to_capture = self.previous
        if self.previous_flag is None:
            self.target.__dict__.pop("capture_aux_hidden_states", None)
        else:
            self.target.capture_aux_hidden_states = self.previous_flag


def prepare(op: Any, draft: Any, target: Any, ctx: Any) -> Prepared:
    holder = capture_holder(target)
    if holder is None:
        raise NotApplicable(f"the target {type(target).__name__} has no text model with layers_to_capture: SGLang "
                            "cannot return auxiliary hidden states from it")
    layers = tuple(op.layers)
    n = num_layers(target)
    # the SGLang in this process (ctx.engine_version, else its installed metadata); a release older than
    # every one the card read: 1 (the loop's residual is None before layer 0 in all of those)
    judgement = judged("sglang", getattr(ctx, "engine_version", None))
    known = judgement is not None and judgement.span is not None
    first = judgement.ids(0).start if known else 1
    outside = [i for i in layers if i < first or (n is not None and i >= n)]
    if outside == [n] and max(layers) == n and sglang_final_boundary(
            judgement.release if known else None, getattr(getattr(target, "config", None), "model_type", None)):
        outside = []  # ids as boundaries: this class captures L after its last layer (sglang#32334)
    if outside:
        who = judgement.label() if judgement is not None else "SGLang"
        why = f": {judgement.source}" if known else ""
        raise SurgeryError(diag("SRG362", f"{op.id}: aux ids {outside} cannot be captured by {who}'s "
                                f"{type(holder).__name__} (it captures ids {first}..{(n or 0) - 1}{why}; id L is "
                                "past the last layer)"))

    def captured() -> Check:
        now = tuple(getattr(holder, "layers_to_capture", ()))
        return Check(op.id, "the target captures the planned layers (layers_to_capture)", now == layers
                     and getattr(target, "capture_aux_hidden_states", False) is True,
                     f"layers_to_capture={now} planned={layers}")

    return Prepared(op, [SetLayersToCapture(op.id, target, holder, layers)], [captured])
