"""Issue 42's examples, one test each: the limits vLLM enforces at start (SRG340-SRG343, class 5), recipe
applicability by the architecture vLLM resolves (SRG690 / SRG204's hint, class 4) and the MTP
embedding under pipeline parallelism (class 9). tests/release_oracle/ (vLLM 0.26.0, 0.32.0 and 0.34.0, each its own) holds the start
limits to vLLM's own engine config over 150 cases; these pin the named examples without vLLM."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

C = Path(__file__).resolve().parents[1] / "data" / "configs"
LLAMA, EAGLE3 = C / "Llama-3.1-8B-Instruct.json", C / "EAGLE3-LLaMA3.1-Instruct-8B.json"
E2B, E2B_A = C / "gemma-4-E2B-it.json", C / "gemma-4-E2B-it-assistant.json"
DSV3, QNEXT, GLM = C / "DeepSeek-V3.json", C / "Qwen3-Next-80B-A3B-Instruct.json", C / "GLM-4.5-Air.json"
KIMI, KIMI_HEAD = C / "Kimi-K2-Instruct.json", C / "kimi-k2-eagle3-specforge.json"
PHI4, PHI4_HEAD = C / "Phi-4-mini-instruct.json", C / "phi4-mini-eagle3-specforge.json"


def validate(run_cli, recipe, target, draft, *flags):
    code, out, err = run_cli("validate", recipe, "--target", target, "--draft", draft, "--json", *flags)
    data = json.loads(out)
    return code, {d["code"]: d for d in data["diagnostics"]}, data


@pytest.mark.parametrize("recipe,target,draft,tp,heads,side", [
    ("gemma4-mtp", E2B, E2B_A, 3, 8, "target"),       # 8 heads
    ("gemma4-mtp", E2B, E2B_A, 8, 4, "draft"),        # the assistant's 4 heads; the target's 8 divide
    ("eagle3", LLAMA, EAGLE3, 3, 32, "target"),
    ("deepseek-mtp", DSV3, DSV3, 3, 128, "target"),
    ("mtp", QNEXT, QNEXT, 32, 16, "target"),
])
def test_tp_not_dividing_the_heads_is_refused(run_cli, recipe, target, draft, tp, heads, side):
    code, diags, data = validate(run_cli, recipe, target, draft, "--tp", tp)
    assert code == 1 and "SRG340" in diags
    (d,) = [d for d in data["diagnostics"] if d["code"] in ("SRG340", "SRG341")]  # one line for every tp failure
    assert d["code"] == "SRG340" and f"the {side}'s {heads} attention heads" in d["message"]
    assert d["severity"] == "error"
    assert f"Total number of attention heads ({heads}) must be divisible by tensor parallel size ({tp})" in d["message"]
    assert "tensor-parallel sizes both models accept" in d["hint"]


def test_tp_that_divides_is_silent(run_cli):
    for recipe, target, draft, tp in (("eagle3", LLAMA, EAGLE3, 8), ("gemma4-mtp", E2B, E2B_A, 4), ("mtp", QNEXT, QNEXT, 16)):
        _, diags, _ = validate(run_cli, recipe, target, draft, "--tp", tp)
        assert not {"SRG340", "SRG341", "SRG342", "SRG343"} & set(diags), (recipe, tp, sorted(diags))


def test_kv_heads_not_split_by_tp_is_refused(run_cli):
    """GLM-4.5-Air: 96 heads divide by 3, its 8 KV heads do not (QKVParallelLinear, in vLLM's worker)."""
    code, diags, _ = validate(run_cli, "mtp", GLM, GLM, "--tp", 3)
    assert code == 1 and "SRG341" in diags and "SRG340" not in diags
    assert '"8 is not divisible by 3"' in diags["SRG341"]["message"]
    _, diags, _ = validate(run_cli, "deepseek-mtp", DSV3, DSV3, "--tp", 32)  # MLA: no per-head K/V split
    assert "SRG341" not in diags


def test_max_model_len_above_the_derived_length(run_cli, monkeypatch):
    code, diags, _ = validate(run_cli, "eagle3", LLAMA, EAGLE3, "--max-model-len", 1000000)
    assert code == 1 and diags["SRG342"]["severity"] == "error"
    assert "User-specified max_model_len (1000000) is greater than the derived max_model_len " \
           "(max_position_embeddings=131072.0" in diags["SRG342"]["message"]
    _, diags, _ = validate(run_cli, "eagle3", LLAMA, EAGLE3, "--max-model-len", 131072)
    assert "SRG342" not in diags
    monkeypatch.setenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")  # vLLM then warns and starts
    _, diags, _ = validate(run_cli, "eagle3", LLAMA, EAGLE3, "--max-model-len", 1000000)
    assert diags["SRG342"]["severity"] == "warning"


def test_unknown_kv_cache_dtype(run_cli):
    code, diags, _ = validate(run_cli, "eagle3", LLAMA, EAGLE3, "--kv-cache-dtype", "fp9")
    assert code == 1 and diags["SRG343"]["hint"].startswith("did you mean fp8?")
    code, diags, _ = validate(run_cli, "eagle3", LLAMA, EAGLE3, "--kv-cache-dtype", "fp8_e5m2")
    assert "SRG343" not in diags


def test_pp_on_a_target_without_supports_pp(run_cli):
    omni = C / "nemotron_h" / "Nemotron-H-Omni-MTP.json"
    code, diags, _ = validate(run_cli, "mtp", omni, omni, "--pp", 2)
    assert code == 1 and "Pipeline parallelism is not supported for this model" in diags["SRG344"]["message"]
    _, diags, _ = validate(run_cli, "mtp", omni, omni)
    assert "SRG344" not in diags
    _, diags, _ = validate(run_cli, "mtp", QNEXT, QNEXT, "--pp", 2)
    assert "SRG344" not in diags


def test_start_limits_are_vllms_only(run_cli):
    """SGLang's limits are not vLLM's: nothing from this check under --engine sglang."""
    code, out, _ = run_cli("plan", "eagle3", "--target", LLAMA, "--draft", EAGLE3, "--engine", "sglang", "--tp", 3,
                           "--json")
    assert "SRG340" not in {d["code"] for d in json.loads(out)["diagnostics"]}


# ------------------------------------------------------------------------ class 4
def test_kimi_k2_is_an_eagle3_target_by_its_architecture(run_cli):
    code, diags, data = validate(run_cli, "eagle3", KIMI, KIMI_HEAD)
    assert code == 0 and "SRG204" not in diags, sorted(diags)
    assert "DeepseekV3ForCausalLM" in diags["SRG690"]["message"] and diags["SRG690"]["severity"] == "info"


def test_phi4_specforge_head_applies_by_its_architecture(run_cli):
    code, diags, _ = validate(run_cli, "eagle3", PHI4, PHI4_HEAD)
    assert code == 0 and "SRG204" not in diags, sorted(diags)
    assert "SRG690" in diags and "'phi3'" in diags["SRG690"]["message"]


def test_architecture_decides_over_a_listed_model_type(tmp_path, run_cli):
    """A llama model_type whose architecture vLLM builds without EAGLE-3 capture is refused: the model_type
    list is only the fallback."""
    cfg = {k: v for k, v in json.loads(LLAMA.read_text()).items() if not k.startswith("_")}
    cfg["architectures"] = ["LlamaForSequenceClassification"]
    target = tmp_path / "config.json"
    target.write_text(json.dumps(cfg))
    code, diags, _ = validate(run_cli, "eagle3", target, EAGLE3)
    assert code == 1 and "LlamaForSequenceClassification" in diags["SRG204"]["message"]


def test_srg204_hint_names_what_vllm_builds_and_the_recipes_that_fit(run_cli):
    code, out, err = run_cli("validate", "dspark", "--target", LLAMA, "--draft", EAGLE3, "--json")
    (d,) = [d for d in json.loads(out)["diagnostics"] if d["code"] == "SRG204"]
    assert "vLLM would build Eagle3LlamaForCausalLM (model_executor/models/llama_eagle3.py)" in d["hint"]
    assert "eagle3" in d["hint"].split("fit this pair:")[1]


# ------------------------------------------------------------------------ class 9 (pp)
def test_mtp_under_pp_is_not_an_error(run_cli):
    """vLLM loads the MTP layer's embedding separately from the checkpoint under pp > 1 (DeepSeek-V3 ships
    model.layers.61.embed_tokens): not SRG311 any more, as for EAGLE heads."""
    for recipe, cfg in (("deepseek-mtp", DSV3), ("mtp", GLM)):
        code, diags, data = validate(run_cli, recipe, cfg, cfg, "--pp", 2)
        assert "SRG311" not in diags and not [d for d in diags.values() if d["severity"] == "error"], sorted(diags)
        assert [s["code"] for s in data["skipped"] if s.get("role") == "input_embeddings"] == ["SRG320"]
