"""Tensor-parallel scale copy with simulated shards (no second GPU here): each rank's draft layer
must receive that rank's shard of a per-head target scale, and the plan's tp rule must match."""
import copy

import pytest

torch = pytest.importorskip("torch")

from testpaths import E2B, E2B_ASSISTANT, GEMMA_RECIPE  # noqa: E402
from surgery import Runtime, facts_from_config, load_recipe, resolve  # noqa: E402
from surgery.applier import apply_plan, verify_plan  # noqa: E402
from surgery.facts import read_config  # noqa: E402
from surgery.live.vllm import VLLMContext  # noqa: E402


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
                                                              if o.op in ("share_kv", "copy_attrs"))})
    full = torch.arange(1, 5, dtype=torch.float32) / 100  # per-head scales of the whole model, 4 heads
    t_types = plan.target["layer_types"]
    d_types = plan.draft["layer_types"]
    for rank in range(tp):
        shard = full.view(tp, -1)[rank]  # what vLLM holds on this rank for a per-head scale
        target = _model("model", t_types, 4 // tp, lambda i: shard * (i + 1))
        draft = _model("draft_model", d_types, 4 // tp, lambda i: torch.tensor(1.0))
        report = apply_plan(plan, draft, target, VLLMContext(is_attention=lambda m: isinstance(m, FakeAttention)))
        assert verify_plan(plan, draft, target, VLLMContext(is_attention=lambda m: isinstance(m, FakeAttention)), report=report).ok
        for d_idx, t_idx in plan.pairs("kv_source"):
            got = draft.model.layers[d_idx].self_attn.attn._k_scale
            assert torch.equal(got, shard * (t_idx + 1))  # this rank's shard, shape follows the target
            assert got.shape == (4 // tp,) == (vllm_kv_heads_per_rank(4, tp),)  # vLLM's heads per rank
            assert "_k_scale" in draft.model.layers[d_idx].self_attn.attn._buffers  # registration kept


def vllm_kv_heads_per_rank(total_kv_heads: int, tp: int) -> int | None:
    """vLLM's own partitioning: `QKVParallelLinear.__init__` (shard when tp <= heads, replicate when
    tp > heads, `divide` refusing anything else), run with the tensor-parallel world size patched in
    and the parent constructor (which needs a process group) skipped. None: vLLM refuses."""
    pytest.importorskip("vllm")
    import vllm.model_executor.layers.linear as lin

    saved = lin.ColumnParallelLinear.__init__, lin.get_tensor_model_parallel_world_size
    lin.ColumnParallelLinear.__init__ = lambda self, *a, **k: torch.nn.Module.__init__(self)
    lin.get_tensor_model_parallel_world_size = lambda: tp
    try:
        layer = lin.QKVParallelLinear(hidden_size=64, head_size=8, total_num_heads=24, total_num_kv_heads=total_kv_heads)
        return layer.num_kv_heads
    except AssertionError:  # vllm.distributed.utils.divide: not evenly divisible
        return None
    finally:
        lin.ColumnParallelLinear.__init__, lin.get_tensor_model_parallel_world_size = saved


@pytest.mark.parametrize("kv_heads", [1, 2, 4, 6])
def test_tp_rule_matches_vllm_kv_head_partitioning(kv_heads):
    """The plan refuses (SRG310) exactly the tensor-parallel sizes vLLM's QKVParallelLinear refuses
    for the target's KV heads, and accepts every one it accepts (sharded or replicated)."""
    t_cfg, d_cfg = (copy.deepcopy(read_config(p)[0]) for p in (E2B, E2B_ASSISTANT))
    for cfg in (t_cfg["text_config"], d_cfg["text_config"]):
        cfg["num_key_value_heads"] = kv_heads
        cfg["num_attention_heads"] = 24  # divisible by every tp below: only the KV heads decide
    for tp in (1, 2, 3, 4, 6, 8, 12):
        plan = resolve(load_recipe(GEMMA_RECIPE), facts_from_config(d_cfg), facts_from_config(t_cfg),
                       Runtime(tp_size=tp))
        ours = "SRG310" not in {d.code for d in plan.errors}
        theirs = vllm_kv_heads_per_rank(kv_heads, tp) is not None
        assert ours == theirs, f"kv_heads={kv_heads} tp={tp}: plan accepts={ours}, vLLM accepts={theirs}"
