"""Oracle: the aux ids each SGLang release can capture (engine card `wiring.capturable_ids`, read by SRG362
through surgery/engine/capture.py) are what that release's own code captures.

For every release the card lists whose wheel is here (the pinned one always: CI fetches it; others from
.cache/sglang/ or SURGERY_SGLANG_WHEELS, else skipped), the capture is run with SGLang's own code, cut
unchanged from the wheel (tests/sglang_source.py), on stand-in layers that each add 1 to the residual
stream, so the input of layer i is i. Which ids come back as the input of their layer decides the range;
the card's answer is never read by the oracle. Two shapes exist:

- up to 0.5.21, LlamaModel.forward's loop appends `hidden_states + residual` before layer i;
- from 0.5.22, the loop hands layer i a `capture_output=` callback and LlamaDecoderLayer.forward's
  attention boundary captures (StageBoundary._prepare_attention on SGLang's ResidualStream, started by
  residual_batch.start): stand-ins replace only the fused add+norm kernel (which returns the norm of the
  sum scaled by 100, so a captured normed value would show), attention (+1), the stage plan and the MLP.
"""
from __future__ import annotations

import types
from typing import Callable, Optional, Union

import pytest

torch = pytest.importorskip("torch")

import sglang_source as sgl  # noqa: E402

from surgery.engine.capture import spans  # noqa: E402
from surgery.sglang import rules  # noqa: E402

LLAMA = "models/llama.py"
BOUNDARY = "layers/layer_boundary/"


def _class(relpath: str, name: str, version: str, namespace: dict):
    """A class cut from the wheel; names its body needs only at definition (annotations of methods this
    oracle never calls) get an inert stand-in, one at a time, as the definition asks for them."""
    ns = dict(namespace)
    for _ in range(40):
        try:
            return sgl.function(relpath, name, ns, version=version)
        except NameError as exc:
            ns[exc.name] = type(exc.name, (), {})
    raise AssertionError(f"{relpath} {name}: too many undefined names")


def _loop_oracle(version: str, num_layers: int):
    """<= 0.5.21: LlamaModel.forward's own loop over layers that add 1."""
    loop = sgl.find_in_function(LLAMA, "LlamaModel.forward", "for i in range(self.start_layer", version=version)

    def run(ids):
        layers = [lambda pos, h, fb, r: (h + 1, torch.zeros(1) if r is None else r) for _ in range(num_layers)]
        me = types.SimpleNamespace(start_layer=0, end_layer=num_layers, layers_to_capture=list(ids), layers=layers)
        ns = {"self": me, "hidden_states": torch.zeros(1), "residual": None, "aux_hidden_states": [],
              "positions": None, "forward_batch": None}
        exec(loop, ns)  # noqa: S102 - SGLang's own loop
        return [float(t) for t in ns["aux_hidden_states"]]
    return run


def _boundary_oracle(version: str, num_layers: int):
    """>= 0.5.22: the loop, the decoder layer's forward, the attention boundary and the residual stream,
    all SGLang's."""
    import msgspec

    stubs = {"torch": torch, "msgspec": msgspec, "Optional": Optional, "Union": Union, "Callable": Callable}
    # what stream.py imports from SGLang: types its isinstance checks compare against (none of ours is one)
    stream_ns = {**stubs, **{n: type(n, (), {}) for n in ("UnreducedOutput", "DeferredFinalize", "ResidualUpdate",
                                                          "SumGroup")}}
    for name in ("DeclaredSum", "Contribution", "OwedOutput", "ResidualStream"):
        stream_ns[name] = _class(BOUNDARY + "residual/stream.py", name, version, stream_ns)
    residual_stream = stream_ns["ResidualStream"]
    start = sgl.function(BOUNDARY + "residual/batch.py", "start", {"ResidualStream": residual_stream}, version)
    stream_of = sgl.function(BOUNDARY + "residual/batch.py", "stream_of", {}, version)
    kind = types.SimpleNamespace(ATTENTION="attention", FFN="ffn")
    boundary_cls = _class(BOUNDARY + "stage.py", "StageBoundary", version, {
        **stubs, "ResidualStream": residual_stream, "StageKind": kind, "stream_of": stream_of,
        "publish_attn_lora_rows": lambda layout: None, "BatchVariant": types.SimpleNamespace(SEQUENCE_PARALLEL="sp"),
        "PLAIN_ADD": types.SimpleNamespace(bind=None, is_plain_add=True)})
    aux_list = _class("layers/aux_hidden_states.py", "AuxHiddenStateList", version, stubs)
    layer_forward = sgl.function(LLAMA, "LlamaDecoderLayer.forward", {**stubs, "ForwardBatch": object}, version)

    def add_norm(hidden, residual, forward_batch, norm, **call):  # the fused add + RMSNorm kernel
        total = hidden if residual is None else hidden + residual
        return total * 100, total

    entry = types.SimpleNamespace(declared_sum=None, prepare=add_norm, input_move=None, attn_input_adapter=None,
                                  capture_move=None, capture_preserves_residual=None, capture_move_allocates=False,
                                  input_retainable=False)
    plan = types.SimpleNamespace(paths={}, path_for=lambda fb: types.SimpleNamespace(entry=entry), norm=None,
                                 _publish_lora_layout=None)
    update = types.SimpleNamespace(bind=None, is_plain_add=True)

    class Passthrough:
        def prepare(self, h, fb, **kw):
            return h

        def finish(self, h, fb, **kw):
            return h

    class AttentionExit:  # the attention's output recorded as the stream's pending contribution
        def __init__(self, boundary):
            self.boundary = boundary

        def prepare(self, h, fb, **kw):
            return self.boundary.prepare(h, fb, **kw)

        def finish(self, h, fb, **kw):
            return stream_of(fb).record(h, update)

    class Layer:
        __call__ = layer_forward

        def __init__(self):
            boundary = boundary_cls(plan, declaration=types.SimpleNamespace(kind=kind.ATTENTION, row_transport=None))
            self.attn_boundary, self.ffn_boundary = AttentionExit(boundary), Passthrough()
            self.self_attn = lambda positions, hidden_states, forward_batch: torch.ones(1)  # +1 to the stream
            self.mlp = lambda h, **kw: h

    loop = sgl.find_in_function(LLAMA, "LlamaModel.forward", "for i in range(self.start_layer", version=version)

    def run(ids):
        fb = types.SimpleNamespace(residual_stream=None)
        start(fb)  # residual_batch.start(forward_batch), as LlamaModel.forward on the first rank
        me = types.SimpleNamespace(start_layer=0, end_layer=num_layers, layers_to_capture=list(ids),
                                   layers=[Layer() for _ in range(num_layers)])
        ns = {"self": me, "hidden_states": torch.zeros(1), "aux_hidden_states": aux_list(), "positions": None,
              "forward_batch": fb}
        exec(loop, ns)  # noqa: S102 - SGLang's own loop
        return [float(t) for t in ns["aux_hidden_states"]]
    return run


def _captured(version: str, num_layers: int) -> tuple[list[int], Callable]:
    """The ids whose capture returns the input of their layer, decided by running the release's code."""
    forward = sgl.source(LLAMA, version)
    run = (_boundary_oracle if "capture_output=" in forward else _loop_oracle)(version, num_layers)
    out = []
    for i in range(num_layers + 2):
        try:
            got = run([i])
        except TypeError:  # <= 0.5.21, id 0: None + tensor
            continue
        assert got in ([], [float(i)]), (version, i, got)
        if got:
            out.append(i)
    return out, run


@pytest.mark.parametrize("version", sorted(spans("sglang")))
@pytest.mark.parametrize("num_layers", [4, 8])
def test_card_capture_range_is_the_releases_own(version, num_layers):
    captured, run = _captured(version, num_layers)
    assert captured == list(rules.capturable(num_layers, version)), version
    assert run(captured) == [float(i) for i in captured]  # all at once, in order
    assert num_layers not in captured  # id L, the final state, is past every release's loop


def test_the_pinned_release_and_0523_differ_at_id_0():
    """The card is not one rule for all releases: 0.5.21 refuses id 0 (the residual is None there),
    0.5.23 captures the embedding output."""
    assert list(rules.capturable(8, "0.5.21")) == list(range(1, 8))
    assert list(rules.capturable(8, "0.5.23")) == list(range(0, 8))
