"""Tensor-parallel scale copy with simulated shards (no second GPU here): each rank's draft layer
must receive that rank's shard of a per-head target scale, and the plan's tp rule must match."""
import copy

import pytest

torch = pytest.importorskip("torch")

from testpaths import E2B, E2B_ASSISTANT, GEMMA_RECIPE  # noqa: E402
from surgery import Runtime, facts_from_config, load_recipe, resolve  # noqa: E402
from surgery.apply import apply_plan, verify_plan  # noqa: E402
from surgery.facts import read_config  # noqa: E402
from surgery.vllm.adapter import VLLMAdapter  # noqa: E402


class FakeAttention(torch.nn.Module):
    """The attributes of vLLM's Attention that the adapter touches, per rank."""

    def __init__(self, name, kv_heads, head_size, sliding, k_scale):
        super().__init__()
        self.layer_name, self.num_kv_heads, self.head_size, self.sliding_window = name, kv_heads, head_size, sliding
        self.attn_type, self.kv_cache_dtype, self.kv_sharing_target_layer_name = "decoder", "fp8", None
        self.register_buffer("_k_scale", k_scale.clone())
        self.register_buffer("_v_scale", k_scale.clone() * 2)
        self._k_scale_float = float(k_scale.flatten()[0])
        self._v_scale_float = 2 * self._k_scale_float


def _model(prefix, types, kv_heads, scales):
    layers = torch.nn.ModuleList()
    for i, t in enumerate(types):
        layer = torch.nn.Module()
        layer.self_attn = torch.nn.Module()
        sliding = 512 if t == "sliding_attention" else None
        head = 256 if sliding else 512
        layer.self_attn.attn = FakeAttention(f"{prefix}.layers.{i}.self_attn.attn", kv_heads, head, sliding, scales(i))
        layers.append(layer)
    root = torch.nn.Module()
    root.model = torch.nn.Module()
    root.model.layers = layers
    root.model.embed_tokens = torch.nn.Embedding(4, 4)
    root.lm_head = torch.nn.Linear(4, 4)
    return root


@pytest.mark.parametrize("tp", [2, 4])
def test_each_rank_gets_its_shard_of_per_head_scales(tp):
    t_cfg, d_cfg = (copy.deepcopy(read_config(p)[0]) for p in (E2B, E2B_ASSISTANT))
    for cfg in (t_cfg["text_config"], d_cfg["text_config"]):
        cfg["num_key_value_heads"] = 4
    plan = resolve(load_recipe(GEMMA_RECIPE), facts_from_config(d_cfg), facts_from_config(t_cfg),
                   Runtime(engine="vllm", tp_size=tp))
    assert plan.ok, [d.render() for d in plan.errors]
    plan = type(plan)(**{**plan.__dict__, "operations": tuple(o for o in plan.operations
                                                              if o.op in ("share_kv", "copy_attr"))})
    full = torch.arange(1, 5, dtype=torch.float32) / 100  # per-head scales of the whole model, 4 heads
    t_types = plan.target["layer_types"]
    d_types = plan.draft["layer_types"]
    for rank in range(tp):
        shard = full.view(tp, -1)[rank]  # what vLLM holds on this rank for a per-head scale
        target = _model("model", t_types, 4 // tp, lambda i: shard * (i + 1))
        draft = _model("draft_model", d_types, 4 // tp, lambda i: torch.tensor(1.0))
        report = apply_plan(plan, draft, target, VLLMAdapter(is_attention=lambda m: isinstance(m, FakeAttention)))
        assert verify_plan(plan, draft, target, VLLMAdapter(is_attention=lambda m: isinstance(m, FakeAttention)), report=report).ok
        for d_idx, t_idx in plan.pairs("kv_source"):
            got = draft.model.layers[d_idx].self_attn.attn._k_scale
            assert torch.equal(got, shard * (t_idx + 1))  # this rank's shard, shape follows the target
            assert got.shape == (4 // tp,)
            assert "_k_scale" in draft.model.layers[d_idx].self_attn.attn._buffers  # registration kept


def test_tp_rule_matches_vllm_kv_head_partitioning():
    """vLLM shards KV heads when tp <= heads (heads % tp == 0) and replicates them when tp > heads
    (tp % heads == 0); the plan refuses anything else with SRG310."""
    t_cfg, d_cfg = (copy.deepcopy(read_config(p)[0]) for p in (E2B, E2B_ASSISTANT))
    for tp, ok in ((1, True), (2, True), (4, True), (3, False)):  # E2B: 1 KV head -> any tp replicates
        plan = resolve(load_recipe(GEMMA_RECIPE), facts_from_config(d_cfg), facts_from_config(t_cfg),
                       Runtime(tp_size=tp))
        assert plan.ok or tp == 3 and not ok
    for cfg in (t_cfg["text_config"], d_cfg["text_config"]):
        cfg["num_key_value_heads"] = 6
    codes = lambda tp: {d.code for d in resolve(load_recipe(GEMMA_RECIPE), facts_from_config(d_cfg),  # noqa: E731
                                                facts_from_config(t_cfg), Runtime(tp_size=tp)).errors}
    assert "SRG310" not in codes(2) and "SRG310" not in codes(3) and "SRG310" not in codes(12)
    assert "SRG310" in codes(4)
