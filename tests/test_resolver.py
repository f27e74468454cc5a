"""The resolver on the real Gemma 4 E2B pair and on edited variants of it."""
import copy
import json

import pytest

from testpaths import E2B, E2B_ASSISTANT, GEMMA_RECIPE
from surgery import Runtime, facts_from_config, load_recipe, parse_recipe, resolve
from surgery.facts import read_config


def _pair():
    return read_config(E2B)[0], read_config(E2B_ASSISTANT)[0]


def _plan(target_cfg=None, draft_cfg=None, recipe_text=None, **runtime):
    t, d = _pair()
    recipe = parse_recipe(recipe_text, "r.yaml") if recipe_text else load_recipe(GEMMA_RECIPE)
    return resolve(recipe, facts_from_config(draft_cfg or d, "draft.json"), facts_from_config(target_cfg or t, "target.json"),
                   Runtime(**runtime))


def codes(plan):
    return {d.code for d in plan.diagnostics if d.severity == "error"}


def test_e2b_pair_maps_sliding_to_13_and_full_to_14():
    plan = _plan()
    assert plan.ok
    assert plan.pairs("kv_source") == [(0, 13), (1, 13), (2, 13), (3, 14)]
    scale_ops = plan.ops("copy_attrs")
    assert {(o.attr, o.mode) for o in scale_ops} == {
        ("_k_scale", "clone_keep_registration"), ("_v_scale", "clone_keep_registration"),
        ("_k_scale_float", "assign"), ("_v_scale_float", "assign"),
        ("_k_scale_cpu", "copy_inplace"), ("_v_scale_cpu", "copy_inplace")}
    assert {(o.draft_layer, o.target_layer) for o in scale_ops} == {(0, 13), (1, 13), (2, 13), (3, 14)}
    assert [o.role for o in plan.ops("share_module")] == ["input_embeddings"]
    assert [o.role for o in plan.ops("keep")] == ["lm_head"]


def test_pp2_reports_embedding_share_impossible_with_reason_and_code():
    plan = _plan(pp_size=2)
    assert not plan.ok
    assert not plan.ops("share_module")
    (skip,) = plan.skipped
    assert skip.code == "SRG311" and "pp_size" in skip.reason and "pipeline stage" in skip.reason
    assert {"SRG311", "SRG316"} <= codes(plan)


def test_hf_engine_skips_scale_copies_with_reason():
    plan = _plan(engine="hf")
    assert plan.ok and not plan.ops("copy_attrs")
    (skip,) = plan.skipped
    assert skip.op == "copy_attrs" and "quantisation scales" in skip.reason and skip.severity == "info"


def test_explicit_map_changes_the_plan():
    text = GEMMA_RECIPE.read_text().replace(
        "rule: last_unshared_of_type\n    must_match: [head_dim, num_kv_heads, sliding_window, layer_type]",
        "rule: explicit\n    pairs: {0: 12, 1: 11, 2: 13, 3: 9}\n    must_match: [head_dim]")
    plan = _plan(recipe_text=text)
    assert plan.ok, [d.render() for d in plan.errors]
    assert plan.pairs("kv_source") == [(0, 12), (1, 11), (2, 13), (3, 9)]


def test_map_into_kv_shared_tail_is_refused():
    text = GEMMA_RECIPE.read_text().replace(
        "rule: last_unshared_of_type\n    must_match: [head_dim, num_kv_heads, sliding_window, layer_type]",
        "rule: explicit\n    pairs: {0: 13, 1: 13, 2: 20, 3: 14}")
    assert "SRG307" in codes(_plan(recipe_text=text))


def test_full_attention_without_producer_outside_shared_tail():
    t, _ = _pair()
    t = copy.deepcopy(t)
    # every full-attention layer before the shared tail becomes sliding: the draft's full layer has no producer
    t["text_config"]["layer_types"] = ["sliding_attention"] * 15 + t["text_config"]["layer_types"][15:]
    plan = _plan(target_cfg=t)
    assert "SRG302" in codes(plan)


def test_head_dim_mismatch_is_caught_per_pair():
    _, d = _pair()
    d = copy.deepcopy(d)
    d["text_config"]["global_head_dim"] = 256
    plan = _plan(draft_cfg=d)
    assert "SRG303" in codes(plan)
    (msg,) = [x.message for x in plan.diagnostics if x.code == "SRG303"]
    assert "draft layer 3" in msg and "target layer 14" in msg


def test_backbone_mismatch_and_vocab_mismatch_have_their_codes():
    _, d = _pair()
    d = copy.deepcopy(d)
    d["backbone_hidden_size"] = 2048
    d["text_config"]["vocab_size"] = 32000
    assert {"SRG314", "SRG313"} <= codes(_plan(draft_cfg=d))


def test_tp_must_divide_kv_heads():
    t, _ = _pair()
    t = copy.deepcopy(t)
    t["text_config"]["num_key_value_heads"] = 4
    d = copy.deepcopy(_pair()[1])
    d["text_config"]["num_key_value_heads"] = 4
    assert _plan(target_cfg=t, draft_cfg=d, tp_size=2).ok
    assert "SRG310" in codes(_plan(target_cfg=t, draft_cfg=d, tp_size=3))


def test_defaults_are_reported():
    _, d = _pair()
    d = copy.deepcopy(d)
    del d["text_config"]["global_head_dim"]
    plan = _plan(draft_cfg=d)
    assert plan.ok
    assert any(u["key"] == "text_config.global_head_dim" and u["value"] == 512 for u in plan.defaults_used["draft"])
    # issue 42: a member-geometry default that builds the KV map is said aloud (was a silent SRG203 note)
    said = [x for x in plan.diagnostics if x.code == "SRG208"]
    assert [x.severity for x in said] == ["warning"] and "kv_source" in said[0].message
    # a family-wide default (the tokenizer's ids, tying) stays a note
    d = copy.deepcopy(_pair()[1])
    d.pop("tie_word_embeddings", None)
    d["text_config"].pop("tie_word_embeddings", None)
    plan = _plan(draft_cfg=d)
    assert any(x.code == "SRG203" and "tie_word_embeddings" in x.message for x in plan.diagnostics)
    assert not any(x.code == "SRG208" for x in plan.diagnostics)


def test_plan_json_contract(run_cli):
    code, out, _ = run_cli("plan", GEMMA_RECIPE, "--target", E2B, "--draft", E2B_ASSISTANT, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["ok"] is True
    assert data["layer_maps"] == {"kv_source": [{"draft": 0, "target": 13}, {"draft": 1, "target": 13},
                                                {"draft": 2, "target": 13}, {"draft": 3, "target": 14}]}
    for key in ("operations", "skipped", "diagnostics"):
        assert isinstance(data[key], list)


def test_plan_table_uses_compact_ranges(run_cli):
    code, out, _ = run_cli("plan", GEMMA_RECIPE, "--target", E2B, "--draft", E2B_ASSISTANT)
    assert code == 0
    assert "draft 0-2 -> target 13; draft 3 -> target 14" in out
    code, out, _ = run_cli("plan", GEMMA_RECIPE, "--target", E2B, "--draft", E2B_ASSISTANT, "--pp", "2")
    assert code == 1 and "SRG311" in out and "share_module input_embeddings" in out


def test_plan_json_matches_plan_schema(run_cli):
    jsonschema = pytest.importorskip("jsonschema")
    from surgery.resources import load_schema

    for extra in ([], ["--pp", "2"], ["--engine", "hf"]):
        _, out, _ = run_cli("plan", GEMMA_RECIPE, "--target", E2B, "--draft", E2B_ASSISTANT, "--json", *extra)
        jsonschema.validate(json.loads(out), load_schema("plan.schema.json"))


def test_plan_is_frozen():
    plan = _plan()
    with pytest.raises(Exception):
        plan.recipe = "other"  # type: ignore[misc]
