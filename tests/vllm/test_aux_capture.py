"""EAGLE-3 aux layer 0 (the embeddings) on vLLM: captured by reference by vLLM's own
`EagleModelMixin._maybe_add_hidden_state`; the capture_hidden_states applier makes it a copy.

Oracle: vLLM's real mixin. Stock, the captured "layer 0" IS the tensor the first decoder layer keeps
as its residual, so an in-place add-RMSNorm (vLLM's fused GPU kernel) changes what the head reads;
with the mutation applied the head keeps the embeddings; undo restores vLLM's behaviour; the
verification check fails on the untouched model."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("vllm")

from vllm.model_executor.models.interfaces import EagleModelMixin  # noqa: E402

from surgery.live.vllm import embedding_capture_is_copied  # noqa: E402
from surgery.ops.capture_hidden_states.vllm import CopyEmbeddingCapture  # noqa: E402


class Inner(torch.nn.Module, EagleModelMixin):
    def __init__(self, layers):
        super().__init__()
        self.aux_hidden_state_layers = tuple(layers)


def forward_like_vllm(model, embeddings):
    """llama.py's capture order: id 0 before the first layer (residual None), then the first
    layer's residual IS the embeddings tensor, and the next add-RMSNorm adds into it in place."""
    aux = model._maybe_add_hidden_state([], 0, embeddings, None)
    residual = embeddings
    residual.add_(torch.ones_like(residual))  # fused_add_rms_norm: residual += hidden, in place
    return aux


def test_stock_vllm_captures_layer_0_by_reference():
    model = Inner((0, 7, 8))
    emb = torch.zeros(2, 4)
    (captured,) = forward_like_vllm(model, emb)
    assert captured is emb and torch.equal(captured, torch.ones(2, 4))  # the head reads the residual stream
    assert not embedding_capture_is_copied(model)


def test_copy_keeps_the_embeddings_and_undo_restores_vllm():
    model = Inner((0, 7, 8))
    mut = CopyEmbeddingCapture("capture:copy-layer-0", model)
    mut.apply()
    (captured,) = forward_like_vllm(model, torch.zeros(2, 4))
    assert torch.equal(captured, torch.zeros(2, 4))
    assert embedding_capture_is_copied(model)
    # other layers keep vLLM's own rule (hidden + residual)
    (later,) = model._maybe_add_hidden_state([], 7, torch.ones(1, 4), torch.ones(1, 4))
    assert torch.equal(later, torch.full((1, 4), 2.0))
    mut.undo()
    assert "_maybe_add_hidden_state" not in vars(model) and not embedding_capture_is_copied(model)


def test_applier_adds_the_copy_only_when_layer_0_is_captured():
    from surgery.live.vllm import VLLMContext
    from surgery.ops.registry import performer

    class Target(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = Inner(())

    class Op:
        id, op, layers = "capture_hidden_states:aux_layers", "capture_hidden_states", (0, 7, 8)

    prepared = performer("capture_hidden_states", "vllm").prepare(Op, None, Target(), VLLMContext())
    assert any(isinstance(m, CopyEmbeddingCapture) for m in prepared.mutations)
    Op.layers = (2, 4, 5)
    prepared = performer("capture_hidden_states", "vllm").prepare(Op, None, Target(), VLLMContext())
    assert not any(isinstance(m, CopyEmbeddingCapture) for m in prepared.mutations)
