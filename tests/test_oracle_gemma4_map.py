"""Oracle: our `kv_source` map for the shipped gemma4-mtp recipe vs the maps that transformers'
and vLLM's own code compute for the same Gemma 4 configs.

- transformers: `Gemma4TextAttention(config, i)` modules of the target and the assistant; a
  KV-shared draft layer of type T reads `shared_kv_states[T]`, written by the target layer with
  `store_full_length_kv` and `layer_type == T`.
- vLLM legacy runner: `Gemma4Proposer._setup_gemma4_kv_sharing`, called unbound on a stand-in.
- vLLM v2 runner: `Gemma4Speculator._setup_gemma4_kv_sharing`, same (plus its KV-scale copy).

vLLM gets its `hf_config` from transformers, so the hf_config objects handed to vLLM are the real
transformers config objects built from the same dicts our facts read.
"""
from __future__ import annotations

import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("vllm")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import oracle_helpers as h  # noqa: E402
from oracle_helpers import FULL, SLIDING  # noqa: E402

transformers.logging.set_verbosity_error()  # "Forcing last layer to full_attention" on every example


def _all_maps(draft: dict, target: dict):
    draft_hf, target_hf = h.hf_draft_config(draft), h.hf_target_config(target)
    plan = h.our_plan(draft, target)
    return {
        "ours": h.our_kv_map(plan),
        "transformers": h.hf_kv_map(draft_hf, target_hf),
        "vllm_legacy": h.vllm_legacy_kv_map(draft_hf, target_hf),
        "vllm_v2": h.vllm_v2_kv_map(draft_hf, target_hf),
    }, plan, draft_hf, target_hf


def check_layout(target_types: list[str], num_kv_shared: int, draft_types: list[str]) -> dict:
    draft = h.assistant_config(draft_types)
    target = h.target_text_config(target_types, num_kv_shared)
    maps, plan, draft_hf, target_hf = _all_maps(draft, target)
    ours = maps["ours"]
    for engine in ("transformers", "vllm_legacy", "vllm_v2"):
        assert maps[engine] == ours, (
            f"{engine} disagrees with our plan\n  target layer_types={target_types} num_kv_shared={num_kv_shared}\n"
            f"  draft layer_types={draft_types}\n  maps={maps}")
    n_draft = len(draft_types)
    no_producer = set(range(n_draft)) - set(ours)
    # SRG302 exactly for the draft layers without a producer; transformers would raise KeyError on
    # shared_kv_states[type] for those (no target layer stores that type), vLLM leaves them unnamed
    assert h.srg302_draft_layers(plan) == no_producer, (plan.diagnostics, maps)
    stored = {a.layer_type for a in h.hf_attention_modules(target_hf.get_text_config()) if a.store_full_length_kv}
    draft_attn = h.hf_attention_modules(draft_hf.get_text_config())
    for d in no_producer:
        assert draft_attn[d].layer_type not in stored
    for d in set(range(n_draft)) - no_producer:
        assert draft_attn[d].layer_type in stored
    return maps


# ------------------------------------------------------------------------------ strategies
@st.composite
def layouts(draw):
    n = draw(st.integers(2, 40))
    style = draw(st.sampled_from(["random", "periodic", "all_sliding_but_last", "all_full"]))
    if style == "random":
        types = draw(st.lists(st.sampled_from([SLIDING, FULL]), min_size=n, max_size=n))
    elif style == "periodic":
        k = draw(st.integers(2, 7))
        types = [SLIDING if (i + 1) % k else FULL for i in range(n)]
    elif style == "all_sliding_but_last":
        types = [SLIDING] * n
    else:
        types = [FULL] * n
    # transformers forces the last layer to full; mostly give it full, sometimes leave it sliding to
    # check every side applies the same forcing
    if draw(st.integers(0, 4)):
        types[-1] = FULL
    shared = draw(st.one_of(st.integers(0, n - 1), st.sampled_from([0, n - 1, max(n - 2, 0)])))
    draft = draw(st.lists(st.sampled_from([SLIDING, FULL]), min_size=1, max_size=6))
    return types, shared, draft


S, F = SLIDING, FULL


@settings(max_examples=200, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(layouts())
@example(([S, S, S, S, F] * 7, 20, [S, S, S, F]))  # E2B-shaped: sliding -> 13, full -> 14
@example(([S, S, S, F], 1, [S, F]))  # the only full layer is in the shared tail: full has no producer
@example(([F, F], 1, [S, F]))  # the target has no sliding layer at all
@example(([S, F, S, F, S, F], 0, [S, S, S, S, S, S]))  # draft's last layer forced full
@example(([F] * 40, 39, [F] * 6))
def test_kv_map_agrees_with_transformers_and_vllm(layout):
    check_layout(*layout)


@pytest.mark.parametrize("target_types, shared, draft_types, missing", [
    ([S, S, S, F], 1, [S, F], {1}),
    ([F, F, F], 0, [S, F], {0}),
    ([S, S, F], 1, [S, S, F], {2}),
])
def test_no_producer_is_srg302_everywhere(target_types, shared, draft_types, missing):
    maps = check_layout(target_types, shared, draft_types)
    assert set(range(len(draft_types))) - set(maps["ours"]) == missing


def test_real_e2b_pair():
    draft, target = h.e2b_configs()
    maps, plan, _, _ = _all_maps(draft, target)
    assert maps["ours"] == {0: 13, 1: 13, 2: 13, 3: 14}
    for engine in ("transformers", "vllm_legacy", "vllm_v2"):
        assert maps[engine] == maps["ours"], maps
    assert not h.srg302_draft_layers(plan)
    assert plan.ok, [d.to_dict() for d in plan.diagnostics]


def test_real_e2b_pair_text_only_target():
    """The same target given as its bare text config (model_type gemma4_text)."""
    draft, target = h.e2b_configs()
    text = {**target["text_config"], "model_type": "gemma4_text"}
    maps, _, _, _ = _all_maps(draft, text)
    assert len({tuple(sorted(m.items())) for m in maps.values()}) == 1, maps
