"""Issue 65, the vLLM side: the rewrites and refusals each vLLM release makes of a draft config, as release
facts read from the wheels (surgery/data/releases/vllm.json, tools/releasefacts.py), and the overrides and
types every config value passes. One test per class; each fails when its rule is removed. The releases'
own answers on the same inputs are held by tests/release_oracle/ (grid.REWRITES, runner.py's load stage).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from testpaths import CONFIGS, ROOT

OWN = ROOT / "tests" / "release_oracle" / "configs"
VERDICTS = ROOT / "tests" / "verdicts" / "configs"
LLAMA = CONFIGS / "Llama-3.1-8B-Instruct.json"
EAGLE3 = CONFIGS / "EAGLE3-LLaMA3.1-Instruct-8B.json"
QWEN3 = CONFIGS / "Qwen3-8B.json"
DSV3_MTP2 = OWN / "DeepSeek-V3-mtp2.json"
GDN = OWN / "Qwen3-Next-qwen36-widths.json"
QWEN35 = VERDICTS / "Qwen3.5-27B.json"


def validate(run_cli, *args) -> tuple[int, list[dict]]:
    rc, out, err = run_cli("validate", *map(str, args), "--engine", "vllm", "--json")
    assert "Traceback" not in err and rc in (0, 1), err[-2000:]
    return rc, json.loads(out)["diagnostics"]


def errors(diags, code) -> list[dict]:
    return [d for d in diags if d["code"] == code and d["severity"] == "error"]


def facts(version: str) -> dict:
    from surgery.engine.releases import release_data

    return release_data("vllm")["releases"][version]


# ---------------------------------------------------------------- the facts, read from every wheel

def test_release_facts_hold_the_rewrite_rules():
    """The generator read each rule from each release: where it appears and where it does not."""
    from surgery.engine.releases import known

    for v in known("vllm"):
        rules = facts(v)["rules"]
        assert rules["mtp_k_multiple_of_n_predict"], v  # every release refuses it
        assert rules["gdn_state_shape_divides"], v
        # Qwen3.5's MTP classes are named in an IfExp in hf_config_override (`"Qwen3_5MoeMTP" if is_moe else ...`)
        assert {"Qwen3_5MTP", "Qwen3_5MoeMTP"} <= set(facts(v)["classes"]["mtp_architectures"]), v
    assert not facts("0.32.0")["rules"]["fly_needs_two_tokens"] and facts("0.34.0")["rules"]["fly_needs_two_tokens"]
    assert not facts("0.26.0")["rules"]["dflash_sample_from_anchor_refused"]
    assert facts("0.27.0")["rules"]["dflash_sample_from_anchor_refused"]
    assert facts("0.26.0")["dspark_kept_architectures"] == ["Gemma4DSparkModel", "Qwen3DSparkModel"]
    assert not facts("0.28.0")["dspark_qwen3_renamed"] and facts("0.29.0")["dspark_qwen3_renamed"]


# ---------------------------------------------------------------- SRG750 MTP k and n_predict

@pytest.mark.parametrize("version", ["0.26.0", "0.32.0", "0.34.0"])
def test_mtp_k_not_a_multiple_of_the_layer_count(run_cli, version):
    args = ("deepseek-mtp", "--target", DSV3_MTP2, "--draft", DSV3_MTP2, "--engine-version", version)
    _, diags = validate(run_cli, *args, "--num-speculative-tokens", 3)
    hit = errors(diags, "SRG750")
    assert len(hit) == 1 and "n_predict=2" in hit[0]["message"]
    for k in (1, 2, 4):  # within the layers, or a multiple of them
        assert not errors(validate(run_cli, *args, "--num-speculative-tokens", k)[1], "SRG750")


# ---------------------------------------------------------------- SRG751 FLy with k < 2

def test_fly_needs_two_draft_tokens(run_cli):
    args = ("eagle3", "--target", LLAMA, "--draft", EAGLE3, "--rejection-sample-method", "fly")
    _, diags = validate(run_cli, *args, "--engine-version", "0.34.0", "--num-speculative-tokens", 1)
    assert errors(diags, "SRG751")
    _, diags = validate(run_cli, *args, "--engine-version", "0.34.0", "--num-speculative-tokens", 2)
    assert not errors(diags, "SRG751")
    _, diags = validate(run_cli, *args, "--engine-version", "0.32.0", "--num-speculative-tokens", 1)
    assert not errors(diags, "SRG751") and errors(diags, "SRG724")  # no "fly" in 0.32 at all


# ---------------------------------------------------------------- SRG752 DFlash sample_from_anchor

def test_dflash_sample_from_anchor(run_cli):
    args = ("dflash", "--target", QWEN3, "--draft", OWN / "specforge-qwen3-8b-dflash-sample-from-anchor.json")
    _, diags = validate(run_cli, *args, "--engine-version", "0.32.0")
    hit = [d for d in diags if d["code"] == "SRG752"]
    assert [d["severity"] for d in hit] == ["error"] and hit[0]["location"].endswith(" dflash_config.sample_from_anchor")
    _, diags = validate(run_cli, *args, "--engine-version", "0.26.0")  # ignored there: it serves 1 + N
    assert [d["severity"] for d in diags if d["code"] == "SRG752"] == ["warning"]
    _, diags = validate(run_cli, "dflash", "--target", QWEN3, "--draft", VERDICTS / "specforge-qwen3-8b-dflash.json",
                        "--engine-version", "0.32.0")
    assert not [d for d in diags if d["code"] == "SRG752"]


# ---------------------------------------------------------------- SRG753 class renames

def test_eagle_config_renames_peagle_classes(run_cli):
    args = ("peagle", "--target", LLAMA, "--draft", OWN / "peagle-llama31-native.json", "--num-speculative-tokens", 4)
    for version in ("0.26.0", "0.32.0"):
        hit = errors(validate(run_cli, *args, "--engine-version", version)[1], "SRG753")
        assert len(hit) == 1 and "Eagle3PeagleLlamaForCausalLM" in hit[0]["message"]
    # 0.34 does not register the name at all: SRG723 says that, not a rename
    _, diags = validate(run_cli, *args, "--engine-version", "0.34.0")
    assert errors(diags, "SRG723") and not errors(diags, "SRG753")


def test_dspark_classes_rewritten_to_deepseek_v4(run_cli):
    args = ("dspark", "--target", QWEN3, "--draft", OWN / "specforge-qwen3-8b-dspark-top-markov.json",
            "--num-speculative-tokens", 7)
    hit = errors(validate(run_cli, *args, "--engine-version", "0.26.0")[1], "SRG753")
    assert len(hit) == 1 and "DSparkDraftModel" in hit[0]["message"] and "deepseek_v4" in hit[0]["message"]
    for version in ("0.29.0", "0.32.0", "0.34.0"):  # renamed Qwen3DSparkModel there (0.34: hf_config_override)
        assert not errors(validate(run_cli, *args, "--engine-version", version)[1], "SRG753"), version
    # the built-in pair's Qwen3DSparkModel is kept by every release
    pair = ROOT / "surgery" / "data" / "pairs" / "dspark" / "draft" / "config.json"
    assert not errors(validate(run_cli, "dspark", "--target", QWEN3, "--draft", pair, "--engine-version", "0.26.0")[1],
                      "SRG753")


# ---------------------------------------------------------------- SRG344 Qwen3_5MTP under pp

def test_qwen35_mtp_draft_under_pp(run_cli):
    args = ("mtp", "--target", QWEN35, "--draft", QWEN35, "--pp", 2)
    hit = errors(validate(run_cli, *args, "--engine-version", "0.26.0")[1], "SRG344")
    assert len(hit) == 1 and "Qwen3_5MTP" in hit[0]["message"]
    assert not errors(validate(run_cli, *args, "--engine-version", "0.34.0")[1], "SRG344")  # draft at pp 1 there


# ---------------------------------------------------------------- SRG754 Gated DeltaNet widths

@pytest.mark.parametrize("target", [GDN, QWEN35])
def test_tp_that_divides_heads_but_not_the_gdn_conv(run_cli, target):
    args = ("mtp", "--target", target, "--draft", target, "--engine-version", "0.34.0")
    _, diags = validate(run_cli, *args, "--tp", 12)
    hit = errors(diags, "SRG754")
    assert len(hit) == 1 and "10240 is not divisible by 12" in hit[0]["message"]
    assert not errors(diags, "SRG340")  # 24 heads: tp 12 divides them
    for tp in (4, 8):
        assert not errors(validate(run_cli, *args, "--tp", tp)[1], "SRG754"), tp


# ---------------------------------------------------------------- overrides and types, one path

def _variant(tmp_path: Path, **keys) -> Path:
    cfg = {k: v for k, v in json.loads(LLAMA.read_text()).items() if not k.startswith("_")}
    cfg.update(keys)
    p = tmp_path / f"llama-{len(list(tmp_path.iterdir()))}.json"
    p.write_text(json.dumps(cfg))
    return p


@pytest.mark.parametrize("keys, code, key_path", [
    ({"num_attention_heads": 0}, "SRG205", "num_attention_heads"),
    ({"rope_scaling": "yarn"}, "SRG755", "rope_scaling"),
    ({"max_position_embeddings": "131072"}, "SRG755", "max_position_embeddings"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": "4"}}, "SRG755", "rope_scaling.factor"),
])
def test_overrides_are_checked_like_the_file(run_cli, tmp_path, keys, code, key_path):
    """The same value refused the same way from config.json and from --hf-overrides, at its key path."""
    base = ("eagle3", "--draft", EAGLE3, "--engine-version", "0.34.0")
    rc_file, in_file = validate(run_cli, *base, "--target", _variant(tmp_path, **keys))
    rc_over, in_over = validate(run_cli, *base, "--target", LLAMA, "--hf-overrides", json.dumps(keys))
    assert rc_file == rc_over == 1
    for diags, where in ((in_file, None), (in_over, "--hf-overrides")):
        hit = errors(diags, code)  # the JSON location: "<file> <key path>"
        assert len(hit) == 1 and hit[0]["location"].endswith(f" {key_path}"), diags
        if where:
            assert hit[0]["location"] == f"{where} {key_path}"


def test_overridden_values_reach_the_start_limits(run_cli):
    """An override the engine serves with is what the start limits judge (heads by tp)."""
    args = ("eagle3", "--target", LLAMA, "--draft", EAGLE3, "--engine-version", "0.34.0", "--tp", 4)
    assert not errors(validate(run_cli, *args)[1], "SRG340")
    assert errors(validate(run_cli, *args, "--hf-overrides", '{"num_attention_heads": 30}')[1], "SRG340")


# ---------------------------------------------------------------- SRG756 the padded vocabulary by tp

def test_tp_that_does_not_divide_the_padded_vocabulary(run_cli):
    """Found by the construct oracle: at tp 12 Qwen's 151936 tokens (a multiple of 64) stop the embedding's
    split before any linear-attention layer is built."""
    args = ("mtp", "--target", GDN, "--draft", GDN, "--engine-version", "0.34.0")
    hit = errors(validate(run_cli, *args, "--tp", 12)[1], "SRG756")
    assert len(hit) == 1 and "151936 is not divisible by 12" in hit[0]["message"]
    assert not errors(validate(run_cli, *args, "--tp", 8)[1], "SRG756")
    # Llama's 128256 is a multiple of 3 (its tp-3 refusal is the heads', SRG340, not the vocabulary's)
    _, diags = validate(run_cli, "eagle3", "--target", LLAMA, "--draft", EAGLE3, "--engine-version", "0.34.0", "--tp", 3)
    assert errors(diags, "SRG340") and not [d for d in errors(diags, "SRG756") if "target" in d["message"]]
