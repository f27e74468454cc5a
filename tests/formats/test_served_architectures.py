"""Heads whose config.json names another architecture than the one vLLM serves (issue 35), config-only:
the MLA EAGLE-3 head (TorchSpec, Eagle3DeepseekV2ForCausalLM) against Qwen3-8B, SafeAILab's
`traineagle3` template (plain LlamaForCausalLM + draft_vocab_size) against Llama 3.1 8B, and a plain
Llama config with no EAGLE-3 marker. The renaming rule itself is checked against vLLM's EAGLEConfig in
tests/test_oracle_draft_architectures.py."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

from surgery import Runtime, load_recipe, read_facts, resolve
from surgery.facts import facts_from_config, read_config
from surgery.formats import format_of
from surgery.formats.conventions import trained_on
from surgery.formats.findings import format_findings
from surgery.engine.servedarch import eagle3_markers, served_architecture

ROOT = Path(__file__).resolve().parents[2]
FORMATS = ROOT / "tests" / "data" / "formats"
CONFIGS = ROOT / "tests" / "data" / "configs"
QWEN3_8B = CONFIGS / "Qwen3-8B.json"
LLAMA_8B = CONFIGS / "Llama-3.1-8B-Instruct.json"


def _plan(recipe, draft, target):
    return resolve(load_recipe(recipe), read_facts(draft), read_facts(target), Runtime())


def _codes(plan, severity=None):
    return [d.code for d in plan.diagnostics if severity is None or d.severity == severity]


@pytest.mark.parametrize("head", ["torchspec-qwen3-8b-eagle3-mla", "torchspec-qwen3-8b-eagle3-mla-export"])
def test_the_mla_eagle3_head_plans_against_qwen3_8b(head):
    plan = _plan("eagle3", FORMATS / head, QWEN3_8B)
    assert "SRG204" not in _codes(plan)
    assert _codes(plan, "error") == []
    # no ids written: vLLM's default (2, L // 2, L - 3), = TorchSpec's default (1, L//2-1, L-4) + 1
    assert plan.layer_sets["aux_layers"] == (2, 18, 33)


def test_the_torchspec_export_is_recognised_by_its_mark():
    fmt = format_of(read_facts(FORMATS / "torchspec-qwen3-8b-eagle3-mla-export"))
    assert (fmt.name, fmt.producer, fmt.producer_from) == ("eagle", "torchspec", "format markers")
    assert format_of(read_facts(FORMATS / "torchspec-qwen3-8b-eagle3-mla")).producer is None


def test_torchspec_ids_are_layer_outputs_except_where_its_export_may_have_shifted_them():
    """TorchSpec numbers layer outputs (+1 to vLLM); its kimi_k2 export for vLLM adds the 1 itself and
    does not say so: there the convention is unknown (SRG659), never guessed."""
    raw = read_config(FORMATS / "torchspec-kimi-k3-eagle3-mla-export")[0]
    kimi = facts_from_config(copy.deepcopy(raw), "kimi/config.json")
    fmt = format_of(kimi)
    assert fmt.name == "nested" and fmt.producer is None and "torchspec" in fmt.producer_from
    assert fmt.writers == ("torchspec", "vllm")  # its own convention, or already shifted for vLLM
    assert trained_on(fmt, 92) is None
    target = read_facts(CONFIGS / "DeepSeek-V3.json")
    found = format_findings(kimi, target, method="eagle3")
    assert "SRG659" in [d.code for d in found]
    raw["model_type"] = "deepseek_v3"
    fmt = format_of(facts_from_config(raw, "ds/config.json"))
    assert fmt.producer == "torchspec"
    assert trained_on(fmt, 92)[0] == (2, 46, 90)


def test_the_nested_layout_without_a_mark_has_no_producer():
    fmt = format_of(read_facts(FORMATS / "nested-kimi-k3-eagle3-mla"))
    assert fmt.name == "nested" and fmt.producer is None and fmt.producer_from == "unknown"
    found = format_findings(read_facts(FORMATS / "nested-kimi-k3-eagle3-mla"), read_facts(CONFIGS / "DeepSeek-V3.json"))
    srg659 = [d for d in found if d.code == "SRG659"]
    assert srg659 and "without a producer's marker" in srg659[0].message and "--producer" in srg659[0].hint
    assert format_of(read_facts(FORMATS / "modelopt-llama3.1-8b-eagle3")).producer == "modelopt"


def test_the_safeailab_template_plans_against_llama_8b_with_an_info_line():
    plan = _plan("eagle3", FORMATS / "safeailab-traineagle3", LLAMA_8B)
    assert _codes(plan, "error") == []
    info = [d for d in plan.diagnostics if d.code == "SRG206"]
    assert len(info) == 1 and info[0].severity == "info"
    assert "LlamaForCausalLM -> Eagle3LlamaForCausalLM" in info[0].message and "draft_vocab_size" in info[0].message


def test_a_plain_llama_config_with_no_eagle3_marker_is_refused_under_eagle3():
    plan = _plan("eagle3", CONFIGS / "Llama-3.2-1B-Instruct.json", LLAMA_8B)
    assert "SRG207" in _codes(plan, "error") and "SRG204" not in _codes(plan)


@pytest.mark.parametrize("marker", [{"eagle_aux_hidden_state_layer_ids": [2, 16, 29]},
                                    {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28]}}])
def test_aux_ids_alone_mark_a_plain_config_as_eagle3(marker):
    raw = read_config(CONFIGS / "Llama-3.2-1B-Instruct.json")[0]
    assert eagle3_markers(raw) == []
    assert eagle3_markers({**raw, **marker}) != []


def test_an_eagle1_head_is_read_as_vllm_renames_it_under_eagle():
    plan = _plan("eagle", CONFIGS / "EAGLE-LLaMA3.1-Instruct-8B.json", LLAMA_8B)
    assert "SRG204" not in _codes(plan)
    assert any(d.code == "SRG206" and "EagleLlamaForCausalLM" in d.message for d in plan.diagnostics)


def test_the_rewrite_rule_is_the_cards():
    assert served_architecture("eagle3", "LlamaForCausalLM") == "Eagle3LlamaForCausalLM"
    assert served_architecture("eagle3", "LlamaForCausalLMEagle3") == "LlamaForCausalLMEagle3"
    assert served_architecture("dflash", "LiLiCorrDraftModel") == "LiLiCorrDraftModel"
    assert served_architecture("draft_model", "LlamaForCausalLM") == "LlamaForCausalLM"


def test_surgery_new_picks_eagle3_for_the_plain_template_and_eagle_for_an_eagle1_head():
    """`surgery new` matches the draft as vLLM renames it; a plain name does not pin a recipe (an EAGLE-1
    head and a standalone draft both say LlamaForCausalLM: their formats and the fit decide)."""
    from surgery.new import choose

    assert choose(read_facts(LLAMA_8B), read_facts(FORMATS / "safeailab-traineagle3")).chosen.name == "eagle3"
    assert choose(read_facts(LLAMA_8B), read_facts(CONFIGS / "EAGLE-LLaMA3.1-Instruct-8B.json")).chosen.name == "eagle"
