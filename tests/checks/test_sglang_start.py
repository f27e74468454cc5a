"""SGLang's own refusals and wiring, one test per class of issue 65, on real public configs (no SGLang needed:
the rules are data read from its wheels; tests/sglang_oracle holds them to SGLang 0.5.23's own code).

Each class was a confident miss before: "valid" with vLLM's findings where SGLang refuses, or a vLLM
finding where SGLang serves."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from testpaths import ROOT

CONFIGS = ROOT / "tests" / "data" / "configs"
VERDICTS = ROOT / "tests" / "verdicts" / "configs"
LLAMA, EAGLE3 = CONFIGS / "Llama-3.1-8B-Instruct.json", CONFIGS / "EAGLE3-LLaMA3.1-Instruct-8B.json"
RELEASE = "0.5.23"


@pytest.fixture(autouse=True)
def no_longer_context_env(monkeypatch):
    monkeypatch.delenv("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", raising=False)


def verdict(run_cli, recipe, target, draft, *args, version=RELEASE):
    code, out, err = run_cli("validate", recipe, "--target", target, "--draft", draft, "--engine", "sglang",
                             "--engine-version", version, *args, "--json")
    assert code in (0, 1), err[-2000:]
    diags = json.loads(out)["diagnostics"]
    return code, {d["code"]: d for d in diags}


def edited(src: Path, tmp_path: Path, **edits) -> Path:
    cfg = {k: v for k, v in json.loads(src.read_text(encoding="utf-8")).items() if not k.startswith("_")}
    for key, value in edits.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    out = tmp_path / f"{src.stem}-{len(list(tmp_path.iterdir()))}.json"
    out.write_text(json.dumps(cfg), encoding="utf-8")
    return out


# ---- start-up refusals


def test_a_draft_shorter_than_the_target_is_refused_unless_the_variable_is_set(run_cli, monkeypatch):
    code, found = verdict(run_cli, "eagle3", LLAMA, EAGLE3, "--method", "EAGLE3")
    assert code == 1 and found["SRG772"]["severity"] == "error"
    assert "131072" in found["SRG772"]["message"] and "2048" in found["SRG772"]["message"]
    assert "SRG641" not in found  # one fact, one line: SGLang's own refusal says the length
    monkeypatch.setenv("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "1")
    code, found = verdict(run_cli, "eagle3", LLAMA, EAGLE3, "--method", "EAGLE3")
    assert code == 0 and found["SRG772"]["severity"] == "warning"


def test_a_draft_at_the_serving_length_is_not_refused(run_cli, tmp_path):
    long_head = edited(EAGLE3, tmp_path, max_position_embeddings=131072)
    code, found = verdict(run_cli, "eagle3", LLAMA, long_head, "--method", "EAGLE3")
    assert code == 0 and "SRG772" not in found


def test_dflash_under_pipeline_parallelism_is_refused(run_cli):
    code, found = verdict(run_cli, "dflash", CONFIGS / "Qwen3-8B.json", VERDICTS / "specforge-qwen3-8b-dflash.json",
                          "--method", "DFLASH", "--pp", "2")
    assert code == 1 and "pp_size == 1" in found["SRG773"]["message"]
    code, found = verdict(run_cli, "dflash", CONFIGS / "Qwen3-8B.json", VERDICTS / "specforge-qwen3-8b-dflash.json",
                          "--method", "DFLASH")
    assert "SRG773" not in found


def test_flex_attention_with_speculative_decoding_is_refused(run_cli, tmp_path):
    long_head = edited(EAGLE3, tmp_path, max_position_embeddings=131072)
    code, found = verdict(run_cli, "eagle3", LLAMA, long_head, "--method", "EAGLE3", "--attention-backend",
                          "flex_attention")
    assert code == 1 and "Flex Attention" in found["SRG771"]["message"]


def test_fp8_is_vllms_cache_dtype_name_not_sglangs(run_cli, tmp_path):
    long_head = edited(EAGLE3, tmp_path, max_position_embeddings=131072)
    code, found = verdict(run_cli, "eagle3", LLAMA, long_head, "--method", "EAGLE3", "--kv-cache-dtype", "fp8")
    assert code == 1 and "fp8_e4m3" in found["SRG770"]["message"]
    code, found = verdict(run_cli, "eagle3", LLAMA, long_head, "--method", "EAGLE3", "--kv-cache-dtype", "fp8_e4m3")
    assert code == 0 and "SRG770" not in found and "SRG343" not in found


# ---- load-time refusals


def test_heads_that_tp_does_not_divide_are_refused_at_model_build(run_cli, tmp_path):
    long_head = edited(EAGLE3, tmp_path, max_position_embeddings=131072)
    code, found = verdict(run_cli, "eagle3", LLAMA, long_head, "--method", "EAGLE3", "--tp", "3")
    assert code == 1 and "total_num_heads % tp_size" in found["SRG775"]["message"]
    assert "SRG340" not in found  # vLLM's code for vLLM's message, not on an SGLang verdict


def test_the_nextn_fused_norm_takes_only_its_hidden_sizes(run_cli, tmp_path):
    small = edited(CONFIGS / "DeepSeek-V3.json", tmp_path, hidden_size=128)
    code, found = verdict(run_cli, "deepseek-mtp", small, small, "--method", "EAGLE")
    assert code == 1 and "(256, 8192]" in found["SRG777"]["message"]
    code, found = verdict(run_cli, "deepseek-mtp", CONFIGS / "DeepSeek-V3.json", CONFIGS / "DeepSeek-V3.json",
                          "--method", "EAGLE")
    assert "SRG777" not in found


def test_a_deepseek_config_without_moe_layer_freq_is_refused(run_cli, tmp_path):
    bare = edited(CONFIGS / "DeepSeek-V3.json", tmp_path, moe_layer_freq=None)
    code, found = verdict(run_cli, "deepseek-mtp", bare, bare, "--method", "EAGLE")
    assert code == 1 and "moe_layer_freq" in found["SRG777"]["message"]


def test_a_glm_nextn_draft_loads_exactly_one_layer(run_cli, tmp_path):
    two = edited(CONFIGS / "GLM-4.5-Air.json", tmp_path, num_nextn_predict_layers=2)
    code, found = verdict(run_cli, "mtp", two, two, "--method", "EAGLE")
    assert code == 1 and "Only 1 nextn layer" in found["SRG777"]["message"]


def test_p_eagle_has_no_sglang_class(run_cli):
    code, found = verdict(run_cli, "peagle", CONFIGS / "Qwen3-8B.json", VERDICTS / "specforge-qwen3-8b-peagle.json",
                          "--method", "EAGLE3")
    assert code == 1 and "PEagleDraftModel" in found["SRG774"]["message"]


def test_an_eagle1_head_written_as_llama_is_a_named_silent_failure(run_cli, tmp_path):
    head = edited(CONFIGS / "EAGLE-LLaMA3.1-Instruct-8B.json", tmp_path)
    code, found = verdict(run_cli, "eagle", LLAMA, head, "--method", "EAGLE")
    assert code == 1 and "LlamaForCausalLMEagle" in found["SRG778"]["hint"]
    renamed = edited(CONFIGS / "EAGLE-LLaMA3.1-Instruct-8B.json", tmp_path, architectures=["LlamaForCausalLMEagle"])
    code, found = verdict(run_cli, "eagle", LLAMA, renamed, "--method", "EAGLE")
    assert "SRG778" not in found


# ---- vLLM's findings on SGLang verdicts


def test_specforge_heads_sglang_captures_right_get_no_vllm_runner_finding(run_cli):
    """SpecForge's gpt-oss head nests ids [1, 11, 21]: SGLang reads the nested ids and captures [2, 12, 22],
    the layers it was trained on; vLLM's runner reading (SRG656) does not speak for SGLang."""
    code, found = verdict(run_cli, "eagle3", VERDICTS / "gpt-oss-20b.json",
                          VERDICTS / "specforge-gpt-oss-20B-eagle3.json", "--method", "EAGLE3")
    assert "SRG656" not in found and "SRG779" not in found


def test_sglang_reading_other_layers_than_trained_is_named(run_cli, tmp_path):
    """The same head with its ids moved to the top level: SGLang reads nested ids only, so it captures its
    default (2, L // 2, L - 3) = (2, 12, 21), not the trained (2, 12, 22)."""
    cfg = json.loads((VERDICTS / "specforge-gpt-oss-20B-eagle3.json").read_text(encoding="utf-8"))
    ids = cfg["eagle_config"].pop("eagle_aux_hidden_state_layer_ids")
    cfg["eagle_aux_hidden_state_layer_ids"] = ids
    moved = tmp_path / "moved.json"
    moved.write_text(json.dumps(cfg), encoding="utf-8")
    code, found = verdict(run_cli, "eagle3", VERDICTS / "gpt-oss-20b.json", moved, "--method", "EAGLE3")
    assert "SRG779" in found and "[2, 12, 21]" in found["SRG779"]["message"], sorted(found)


def test_a_target_sglang_registers_is_not_refused_with_vllms_list(run_cli):
    code, found = verdict(run_cli, "eagle3", VERDICTS / "gemma-3-27b-it.json",
                          VERDICTS / "specforge-gemma3-27b-eagle3.json", "--method", "EAGLE3")
    assert "SRG204" not in found and "SRG872" in found


def test_sglang_performs_gemma4_kv_sharing_itself(run_cli):
    code, found = verdict(run_cli, "gemma4-mtp", CONFIGS / "gemma-4-E2B-it.json",
                          CONFIGS / "gemma-4-E2B-it-assistant.json")
    assert code == 0 and "SRG325" not in found and found["SRG870"]["severity"] == "info"


def test_every_finding_on_an_sglang_verdict_speaks_for_sglang(run_cli, tmp_path):
    """No vLLM-only code (codes.yaml `engines: [vllm]`) on SGLang verdicts across the classes above."""
    from surgery.text.diagnostics import catalogue

    vllm_only = {c for c, row in catalogue().items() if row.get("engines") == ["vllm"]}
    seen = set()
    for recipe, target, draft, args in [
            ("eagle3", LLAMA, EAGLE3, ("--tp", "3", "--pp", "2", "--kv-cache-dtype", "fp8")),
            ("dspark", CONFIGS / "Qwen3-8B.json", VERDICTS / "specforge-qwen3-8b-dspark.json", ("--pp", "2")),
            ("gemma4-mtp", CONFIGS / "gemma-4-E2B-it.json", CONFIGS / "gemma-4-E2B-it-assistant.json", ("--pp", "2")),
            ("eagle3", VERDICTS / "gpt-oss-20b.json", VERDICTS / "specforge-gpt-oss-20B-eagle3.json", ())]:
        _, found = verdict(run_cli, recipe, target, draft, *args)
        seen |= set(found)
    assert seen and not (seen & vllm_only), sorted(seen & vllm_only)


def test_each_rule_applies_only_where_the_releases_wheel_holds_it():
    """The rules are keyed by release: the DSpark pipeline refusal first appears in 0.5.21's wheel."""
    from surgery.engine.releases import release_data

    releases = release_data("sglang")["releases"]
    assert releases["0.5.20"]["start"]["limits"]["dspark_pipeline"] is None
    assert releases["0.5.21"]["start"]["limits"]["dspark_pipeline"].startswith("sglang/srt/arg_groups/speculative_hook.py")
    assert "fp8" not in releases[RELEASE]["start"]["kv_cache_dtypes"]


@pytest.mark.parametrize("version", ["0.5.16", "0.5.23"])
def test_the_release_asked_is_the_release_judged(run_cli, version):
    """--engine-version reaches the SGLang checks: each line names the release asked and cites its own file:line
    (validate carried it for vLLM only, and every SGLang verdict judged the newest release)."""
    code, out, _ = run_cli("validate", "eagle3", "--engine", "sglang", "--engine-version", version,
                           "--target", LLAMA, "--draft", EAGLE3, "--json")
    said = [d for d in json.loads(out)["diagnostics"] if d["code"] == "SRG772"]
    assert code == 1 and said and f"SGLang {version}:" in said[0]["message"], said


def test_an_sglang_version_with_no_release_number_is_a_usage_error(run_cli):
    code, _, err = run_cli("validate", "eagle3", "--engine", "sglang", "--engine-version", "latest",
                           "--target", LLAMA, "--draft", EAGLE3)
    assert code == 2 and "SRG011" in err
