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


class Target(torch.nn.Module):
    """Stand-in for the module vLLM's runner calls (LlamaForCausalLM): its inner model holds the aux
    layers. ``through_instance``: the forward looks the capture up on the instance, as vLLM 0.34's
    LlamaModel.forward does (llama.py:429, eager path of support_torch_compile: decorators.py:537);
    otherwise it calls the class's method, as a graph traced before the override would."""

    def __init__(self, through_instance: bool = True):
        super().__init__()
        self.model, self.through_instance = Inner((0, 7, 8)), through_instance

    def forward(self, embeddings):
        inner = self.model
        if self.through_instance:
            aux = inner._maybe_add_hidden_state([], 0, embeddings, None)
        else:
            aux = EagleModelMixin._maybe_add_hidden_state(inner, [], 0, embeddings, None)
        embeddings.add_(1.0)  # the first layer's in-place fused add-RMSNorm
        return aux


def _prepared(target):
    from surgery.live.vllm import VLLMContext
    from surgery.ops.registry import performer

    class Op:
        id, op, layers = "capture_hidden_states:aux_layers", "capture_hidden_states", (0, 7, 8)

    prepared = performer("capture_hidden_states", "vllm").prepare(Op, None, target, VLLMContext())
    for m in prepared.mutations:
        m.apply()
    return prepared


def _check(prepared, name):
    (check,) = [c() for c in prepared.checks if name in c().name]
    return check


def test_the_live_forward_goes_through_the_copy():
    target = Target()
    prepared = _prepared(target)
    before = _check(prepared, "live forwards")
    assert before.ok and "no forward yet" in before.detail  # load time: nothing to judge yet
    (captured,) = target(torch.zeros(2, 4))
    (captured2,) = target(torch.zeros(2, 4))
    assert torch.equal(captured, torch.zeros(2, 4)) and torch.equal(captured2, torch.zeros(2, 4))
    after = _check(prepared, "live forwards")
    assert after.ok and "forwards seen=2 id-0 copies made=2" in after.detail


def test_a_forward_that_bypasses_the_copy_fails_the_live_check_but_not_the_static_one():
    """The static probe calls the override itself, so it holds; the target's own forward never used it
    (the head is fed the overwritten tensor), which only the counted check sees."""
    target = Target(through_instance=False)
    prepared = _prepared(target)
    (captured,) = target(torch.zeros(2, 4))
    assert torch.equal(captured, torch.ones(2, 4))  # overwritten: the by-reference capture ran
    assert _check(prepared, "captured as a copy").ok
    live = _check(prepared, "live forwards")
    assert not live.ok and "forwards seen=1 id-0 copies made=0" in live.detail


def test_compiled_holder_is_not_judged_and_undo_removes_the_counter():
    from surgery.live.vllm import embedding_copy_exercised

    target = Target(through_instance=False)
    target.model.do_not_compile = False  # support_torch_compile's flag on a compiled model
    prepared = _prepared(target)
    target(torch.zeros(1, 4))
    ok, detail = embedding_copy_exercised(target.model)
    assert ok and "compiled forward" in detail
    for m in reversed(prepared.mutations):
        m.undo()
    assert not target._forward_pre_hooks and "_maybe_add_hidden_state" not in vars(target.model)
    assert embedding_copy_exercised(target.model) == (False, "no copy installed on the aux holder")
