"""Issue 53: every rule is the judged release's own. One test per class of the outside check's misses,
each on real public configs, judged for the releases whose own code the oracle grid
(tests/release_oracle/) holds these checks to. These run without the oracle venvs."""
from __future__ import annotations

import json

import pytest

from testpaths import CONFIGS, ROOT

VERDICTS = ROOT / "tests" / "verdicts" / "configs"
LLAMA = CONFIGS / "Llama-3.1-8B-Instruct.json"
EAGLE3 = CONFIGS / "EAGLE3-LLaMA3.1-Instruct-8B.json"
EAGLE1 = CONFIGS / "EAGLE-LLaMA3.1-Instruct-8B.json"
GPT_OSS = VERDICTS / "gpt-oss-20b.json"
GPT_OSS_HEAD = VERDICTS / "specforge-gpt-oss-20B-eagle3.json"
QWEN3 = CONFIGS / "Qwen3-8B.json"
DFLASH = VERDICTS / "specforge-qwen3-8b-dflash.json"
GLM = CONFIGS / "GLM-4.5-Air.json"
KIMI_K3 = CONFIGS / "kimi_k3" / "Kimi-K3.json"


def findings(run_cli, *args):
    code, out, err = run_cli("validate", *args, "--engine", "vllm", "--json")
    assert code in (0, 1), err[-2000:]
    data = json.loads(out)
    return code, {d["code"]: d for d in data["diagnostics"]}, data


# -- class 1: load-time refusals ------------------------------------------------------------------------

@pytest.mark.parametrize("release,refused", [("0.34.0", True), ("0.32.0", True), ("0.29.0", False), ("0.26.0", False)])
def test_aux_hidden_states_over_pp_is_the_releases_load_refusal(run_cli, release, refused):
    """0.30+ verify at load that the target relays aux hidden states over pp (gpt-oss does not)."""
    code, found, _ = findings(run_cli, "eagle3", "--target", GPT_OSS, "--draft", GPT_OSS_HEAD, "--pp", "2",
                              "--engine-version", release)
    assert ("SRG345" in found) == refused, sorted(found)
    if refused:
        assert found["SRG345"]["severity"] == "error"
        assert "GptOssForCausalLM does not support eagle3 with pipeline parallelism" in found["SRG345"]["message"]


def test_a_target_that_relays_passes_and_block_drafters_are_checked_too(run_cli):
    _, found, _ = findings(run_cli, "eagle3", "--target", LLAMA, "--draft", EAGLE3, "--pp", "2", "--engine-version", "0.34.0")
    assert "SRG345" not in found  # LlamaModel sets supports_aux_hidden_states_over_pp
    _, found, _ = findings(run_cli, "dflash", "--target", QWEN3, "--draft", DFLASH, "--pp", "2", "--engine-version", "0.34.0")
    assert "SRG345" not in found  # Qwen3Model inherits it from Qwen2Model
    _, found, _ = findings(run_cli, "eagle3", "--target", GPT_OSS, "--draft", GPT_OSS_HEAD, "--pp", "1",
                           "--engine-version", "0.34.0")
    assert "SRG345" not in found


# -- class 2: lists pinned to one release ---------------------------------------------------------------

@pytest.mark.parametrize("dtype,release,refused", [("octave_k3v4", "0.34.0", False), ("octave_k3v4", "0.32.0", True),
                                                   ("octave_k3v4", "0.26.0", True), ("nvfp4_4over6", "0.26.0", True),
                                                   ("nvfp4_4over6", "0.32.0", False), ("fp9", "0.34.0", True)])
def test_cache_dtypes_are_the_judged_releases(run_cli, dtype, release, refused):
    _, found, _ = findings(run_cli, "eagle3", "--target", LLAMA, "--draft", EAGLE3, "--kv-cache-dtype", dtype,
                           "--engine-version", release)
    assert ("SRG343" in found) == refused, sorted(found)
    if refused:
        assert f"vllm {release}'s CacheDType values" in found["SRG343"]["message"]


# -- class 3: a class the judged release does not have ---------------------------------------------------

@pytest.mark.parametrize("release,refused", [("0.26.0", True), ("0.27.0", False), ("0.34.0", False)])
def test_an_mtp_class_the_release_lacks(run_cli, release, refused):
    """Kimi-K3's MTP layer is kimi_k3_mtp, which arrived in 0.27."""
    _, found, _ = findings(run_cli, "mtp", "--target", KIMI_K3, "--draft", KIMI_K3, "--engine-version", release)
    hit = [d for c, d in found.items() if c == "SRG723" and "kimi_k3_mtp" in d["message"]]
    assert bool(hit) == refused, sorted(found)


# -- class 4: behaviour described from 0.32 ---------------------------------------------------------------

def test_a_short_eagle_head_on_a_release_without_a_drafting_gate(run_cli):
    """0.34 raises a RoPE-only head's positions to the serving length and has no _input_fits_in_drafter:
    a note; 0.32's V2 runner (the GPU default) does the same, the note names the legacy runner's gate;
    0.26 has no override: the warning (and SRG620's error) stay."""
    _, found, data = findings(run_cli, "eagle3", "--target", LLAMA, "--draft", EAGLE3, "--engine-version", "0.34.0")
    assert found["SRG645"]["severity"] == "info" and "_input_fits_in_drafter" not in found["SRG645"]["message"]
    assert not {"SRG330", "SRG641"} & set(found)
    _, found, _ = findings(run_cli, "eagle3", "--target", LLAMA, "--draft", EAGLE3, "--engine-version", "0.32.0")
    assert found["SRG645"]["severity"] == "info" and "_input_fits_in_drafter" in found["SRG645"]["message"]
    _, found, _ = findings(run_cli, "eagle3", "--target", LLAMA, "--draft", EAGLE3, "--engine-version", "0.26.0")
    assert found["SRG645"]["severity"] == "warning" and found["SRG620"]["severity"] == "error"
    assert not {"SRG330", "SRG641"} & set(found)


# -- class 5: releases disagree (pp) -----------------------------------------------------------------------

@pytest.mark.parametrize("release,refused", [("0.26.0", True), ("0.29.0", True), ("0.30.0", False), ("0.34.0", False)])
def test_the_draft_gets_the_targets_pp_up_to_029(run_cli, release, refused):
    """0.25-0.29 give the draft the target's pp: an MTP class or EAGLE head that is no SupportsPP is refused."""
    _, found, _ = findings(run_cli, "mtp", "--target", GLM, "--draft", GLM, "--pp", "2", "--engine-version", release)
    assert ("SRG344" in found) == refused, sorted(found)
    _, found, _ = findings(run_cli, "eagle3", "--target", LLAMA, "--draft", EAGLE3, "--pp", "2", "--engine-version", release)
    assert ("SRG344" in found) == refused, sorted(found)


# -- class 6: arguments --------------------------------------------------------------------------------

def test_the_verdict_names_the_release_and_a_bad_one_is_refused(run_cli):
    code, out, err = run_cli("validate", "eagle3", "--target", LLAMA, "--draft", EAGLE3, "--engine-version", "0.34.0")
    assert out.startswith("valid for vLLM 0.34.0 (--engine-version): eagle3 for llama -> llama")
    code, out, err = run_cli("validate", "eagle3", "--target", LLAMA, "--draft", EAGLE3, "--engine-version", "banana")
    assert code == 2 and "SRG011" in err


# -- warnings that mean something --------------------------------------------------------------------------

def test_tp_refusals_are_one_line(run_cli):
    _, _, data = findings(run_cli, "eagle3", "--target", LLAMA, "--draft", EAGLE3, "--tp", "3")
    tp_lines = [d for d in data["diagnostics"] if d["code"] in ("SRG340", "SRG341")]
    assert len(tp_lines) == 1, tp_lines
    for part in ("the target's 32 attention heads", "the target's 8 KV heads", "the draft's 32 attention heads"):
        assert part in tp_lines[0]["message"]


def test_a_standalone_draft_longer_than_its_target_says_nothing_of_length(run_cli, tmp_path):
    cfg = json.loads((CONFIGS / "Llama-3.2-1B-Instruct.json").read_text())
    cfg["max_position_embeddings"] = 262144
    d = tmp_path / "config.json"
    d.write_text(json.dumps(cfg))
    _, found, _ = findings(run_cli, "draft-model", "--target", LLAMA, "--draft", d)
    assert not {"SRG330", "SRG641", "SRG645"} & set(found), sorted(found)
