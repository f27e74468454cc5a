"""The field's fourth catalogue (issue 68; docs/audit.md "Catalogue 4"): every report of ../shared/FIELD.md
"Catalogue 4" marked C is caught by a code that names it. Each case is a real public config with the setting
changed as the report describes, and the unchanged config (or setting) as the control: the test fails on the
branch point. Per-release outcomes are data read from the wheels (surgery/data/catalogue4.yaml, file:line)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from testpaths import CONFIGS, ROOT, VLLM_WHEELS_WHERE, vllm_wheels

VERDICTS = ROOT / "tests" / "verdicts" / "configs"
C4 = ROOT / "tests" / "data" / "catalogue4"
QWEN3 = CONFIGS / "Qwen3-8B.json"
DSPARK = VERDICTS / "specforge-qwen3-8b-dspark.json"  # SpecForge configs/qwen3-8b-dspark.json, verbatim
DFLASH = VERDICTS / "specforge-qwen3-8b-dflash.json"  # SpecForge configs/qwen3-8b-dflash.json, verbatim
TORCHSPEC_DFLASH = VERDICTS / "torchspec-qwen3_8b_dflash.json"  # TorchSpec's DFlash template, verbatim
EAGLE3_HEAD = VERDICTS / "specforge-llama3-8B-eagle3.json"  # SpecForge configs/llama3-8B-eagle3.json
MINIMAX = C4 / "MiniMax-M2.5.config.json"
NEMOTRON_MTP = CONFIGS / "nemotron_h" / "Nemotron-H-MTP.json"
DEEPSEEK = CONFIGS / "DeepSeek-V3.json"  # deepseek-ai/DeepSeek-V3 config.json (its _source says how it was read)
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}


def load(path: Path) -> dict:
    return {k: v for k, v in json.loads(path.read_text()).items() if not k.startswith("_")}


def write(tmp_path: Path, name: str, cfg: dict) -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(cfg))
    return p


def found(out: str, code: str) -> list[dict]:
    return [d for d in json.loads(out)["diagnostics"] if d["code"] == code]


def validate(run_cli, recipe, target, draft, *args):
    rc, out, err = run_cli("validate", recipe, "--target", target, "--draft", draft, "--json", *args)
    assert out.strip(), err
    return rc, out


def dspark(tmp_path, block: int) -> Path:
    """SpecForge's DSpark with its markov_rank moved where vLLM reads it (SRG681's fix) and the block it
    was trained with set to `block`."""
    cfg = load(DSPARK)
    cfg["markov_rank"] = cfg["dflash_config"].pop("markov_rank")
    cfg["block_size"] = block
    return write(tmp_path, f"dspark-b{block}.json", cfg)


# ---------------------------------------------------------------- SRG800: vllm#41834, DSpark k past the block

@pytest.mark.parametrize("release", ["0.26.0", "0.34.0"])
def test_dspark_k_past_its_block_size_is_a_warning_naming_vllm_41834(run_cli, tmp_path, release):
    draft = dspark(tmp_path, 5)
    _, out = validate(run_cli, "dspark", QWEN3, draft, "--num-speculative-tokens", "7", "--engine-version", release)
    f = found(out, "SRG800")
    assert len(f) == 1 and f[0]["severity"] == "warning", out
    assert "vllm#41834" in f[0]["message"] and "block_size 5" in f[0]["message"] and release in f[0]["message"]
    # the branch point: k equal to the block it was trained for
    _, out = validate(run_cli, "dspark", QWEN3, draft, "--num-speculative-tokens", "5", "--engine-version", release)
    assert not found(out, "SRG800"), out


def test_dspark_k_below_dspark_block_size_is_refused_by_0_26(run_cli, tmp_path):
    cfg = load(dspark(tmp_path, 5))
    cfg["dspark_block_size"] = cfg.pop("block_size")  # the key 0.26's SpeculativeConfig reads
    draft = write(tmp_path, "dspark-key.json", cfg)
    rc, out = validate(run_cli, "dspark", QWEN3, draft, "--num-speculative-tokens", "3", "--engine-version", "0.26.0")
    f = found(out, "SRG800")
    assert f and f[0]["severity"] == "error" and rc == 1 and "speculative.py:1004" in f[0]["message"], out


# ------------------------------------------------------------------- SRG801: Automodel#3235, causal dropped

def test_dflash_export_without_causal_is_a_warning_naming_automodel_3235(run_cli, tmp_path):
    cfg = load(TORCHSPEC_DFLASH)
    cfg["dflash_config"]["target_layer_ids"] = [1, 9, 17, 25, 33]
    stated = dict(cfg, dflash_config=dict(cfg["dflash_config"], causal=True))
    _, out = validate(run_cli, "dflash", QWEN3, write(tmp_path, "causal.json", stated), "--engine-version", "0.34.0")
    assert not found(out, "SRG801"), out  # the branch point: the key is there
    _, out = validate(run_cli, "dflash", QWEN3, write(tmp_path, "dropped.json", cfg), "--engine-version", "0.34.0")
    f = found(out, "SRG801")
    assert f and f[0]["severity"] == "warning", out
    assert "Automodel#3235" in f[0]["message"] and "qwen3_dflash.py:86-97" in f[0]["message"]
    assert "[0, 1, 2, 3, 4] run non-causal" in f[0]["message"]


def test_specforge_dflash_without_causal_is_its_trainers_default_a_note(run_cli):
    _, out = validate(run_cli, "dflash", QWEN3, DFLASH, "--engine-version", "0.26.0")
    f = found(out, "SRG801")
    assert f and f[0]["severity"] == "info" and "SpecForge" in f[0]["message"] and "0.26.0" in f[0]["message"], out
    _, out = validate(run_cli, "dspark", QWEN3, DSPARK, "--engine-version", "0.34.0")  # DSpark: the same rule
    f = found(out, "SRG801")
    assert f and f[0]["severity"] == "info" and "dspark.DSparkDraftModel" in f[0]["message"], out


# ------------------------------------------------------------- SRG802: vllm#51581, quantised DFlash per release

@pytest.mark.parametrize("scheme", [{"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]},
                                    {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}])
def test_quantised_dflash_drafter_is_an_error_on_0_26_only(run_cli, tmp_path, scheme):
    draft = write(tmp_path, "q.json", dict(load(DFLASH), quantization_config=scheme))
    rc, out = validate(run_cli, "dflash", QWEN3, draft, "--engine-version", "0.26.0")
    f = found(out, "SRG802")
    assert f and f[0]["severity"] == "error" and rc == 1, out
    assert "vllm#51581" in f[0]["message"] and scheme["quant_method"] in f[0]["message"]
    _, out = validate(run_cli, "dflash", QWEN3, draft, "--engine-version", "0.34.0")
    assert not found(out, "SRG802"), out  # 0.34 runs quantised projections through their quant method
    _, out = validate(run_cli, "dflash", QWEN3, DFLASH, "--engine-version", "0.26.0")
    assert not found(out, "SRG802"), out  # the branch point: the unquantised drafter


# --------------------------------------------- SRG622: vllm-ascend#9795 / #11374 / #9946, the head kept per release

@pytest.mark.parametrize("release", ["0.26.0", "0.34.0"])
def test_dflash_own_32000_row_head_is_said_for_both_releases(run_cli, tmp_path, release):
    draft = write(tmp_path, "dv.json", dict(load(DFLASH), draft_vocab_size=32000))
    _, out = validate(run_cli, "dflash", QWEN3, draft, "--engine-version", release)
    f = found(out, "SRG622")
    assert f, out
    msg = f[0]["message"]
    assert "32000-row" in msg and "keeps the draft's own lm_head" in msg and "not known" not in msg
    assert all(r in msg for r in ("vllm-ascend#9795", "vllm-ascend#11374", "vllm-ascend#9946"))
    _, out = validate(run_cli, "dflash", QWEN3, DFLASH, "--engine-version", release)
    assert not found(out, "SRG622")  # the full-vocabulary head: nothing to keep


# ------------------------------------------------------------------------- RoPE facts that arrive another way

def test_target_yarn_given_through_hf_overrides_reaches_the_rope_comparison(run_cli):
    _, out = validate(run_cli, "dflash", QWEN3, DFLASH, "--engine-version", "0.34.0")
    assert not found(out, "SRG618"), out  # the branch point: no overrides, same RoPE
    _, out = validate(run_cli, "dflash", QWEN3, DFLASH, "--engine-version", "0.34.0",
                      "--hf-overrides", json.dumps({"rope_scaling": YARN}))
    f = found(out, "SRG618")
    assert f and f[0]["severity"] == "warning", out
    assert "--hf-overrides" in f[0]["message"] and "'yarn'" in f[0]["message"] and "SpecForge#742" in f[0]["message"]


def test_draft_without_rope_theta_is_compared_as_the_theta_transformers_fills(run_cli, tmp_path):
    """Automodel#3267: a DSpark draft whose export dropped rope_theta loads 10000 against the target's 1e6."""
    cfg = load(dspark(tmp_path, 7))
    _, out = validate(run_cli, "dspark", QWEN3, write(tmp_path, "theta.json", cfg), "--engine-version", "0.34.0")
    assert not found(out, "SRG618"), out
    cfg.pop("rope_theta")
    _, out = validate(run_cli, "dspark", QWEN3, write(tmp_path, "notheta.json", cfg), "--engine-version", "0.34.0")
    f = found(out, "SRG618")
    assert f and f[0]["severity"] == "warning", out
    assert "Automodel#3267" in f[0]["message"] and "10000.0" in f[0]["message"] and "1000000.0" in f[0]["message"]


def test_eagle3_head_stating_no_rope_key_keeps_its_class_default_silently(run_cli):
    """The published EAGLE-3 Llama 3.1 head states no RoPE key: trained with the class default, not compared."""
    _, out = validate(run_cli, "eagle3", CONFIGS / "Llama-3.1-8B-Instruct.json", CONFIGS / "EAGLE3-LLaMA3.1-Instruct-8B.json",
                      "--engine-version", "0.34.0")
    assert not [d for d in found(out, "SRG618") if "Automodel#3267" in d["message"]], out


def test_rope_parameters_only_export_is_named_against_a_yarn_target(run_cli, tmp_path):
    """SpecForge#742: transformers 5 save_pretrained keeps rope_parameters, drops rope_scaling."""
    target = write(tmp_path, "qwen3-yarn.json", dict(load(QWEN3), rope_scaling=YARN))
    cfg = load(DFLASH)
    with_yarn = dict(cfg, rope_scaling=dict(YARN))
    _, out = validate(run_cli, "dflash", target, write(tmp_path, "yarn.json", with_yarn), "--engine-version", "0.34.0")
    assert not found(out, "SRG618"), out
    cfg.pop("rope_scaling")
    cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": cfg.pop("rope_theta")}
    _, out = validate(run_cli, "dflash", target, write(tmp_path, "rp.json", cfg), "--engine-version", "0.34.0")
    f = found(out, "SRG618")
    assert f and f[0]["severity"] == "warning" and "SpecForge#742" in f[0]["message"], out


# ------------------------------------------------------------ SRG803: vllm#43671, capture per target class

def minimax_head(tmp_path, ids=None) -> Path:
    """SpecForge's Llama EAGLE-3 head config at MiniMax-M2.5's widths, as the MiniMax heads are published: no ids."""
    cfg = load(EAGLE3_HEAD)
    cfg.update(hidden_size=3072, num_attention_heads=48, head_dim=128, vocab_size=200064, rope_theta=5000000,
               max_position_embeddings=196608)
    for k in ("bos_token_id", "eos_token_id", "pad_token_id"):
        cfg.pop(k)
    if ids is not None:
        cfg["eagle_aux_hidden_state_layer_ids"] = ids
    return write(tmp_path, f"minimax-eagle3-{bool(ids)}.json", cfg)


@pytest.mark.parametrize("release", ["0.26.0", "0.34.0"])
def test_minimax_eagle3_head_without_ids_is_off_by_one_a_warning(run_cli, tmp_path, release):
    _, out = validate(run_cli, "eagle3", MINIMAX, minimax_head(tmp_path), "--engine-version", release)
    f = found(out, "SRG803")
    assert f and f[0]["severity"] == "warning", out
    msg = f[0]["message"]
    assert "vllm#43671" in msg and "(2, 31, 59)" in msg and "(3, 32, 60)" in msg and "minimax_m2.py" in msg
    assert not found(out, "SRG640"), out  # one fact, one line
    _, out = validate(run_cli, "eagle3", MINIMAX, minimax_head(tmp_path, [3, 32, 60]), "--engine-version", release)
    assert not found(out, "SRG803"), out  # the branch point: ids stated


def test_llama_head_without_ids_stays_the_srg640_note(run_cli):
    _, out = validate(run_cli, "eagle3", CONFIGS / "Llama-3.1-8B-Instruct.json", EAGLE3_HEAD, "--engine-version", "0.34.0")
    assert not found(out, "SRG803") and found(out, "SRG640"), out


# ------------------------------------------------------------------------- SRG804: vllm#48381, DCP per release

def test_dflash_under_decode_context_parallelism_per_release(run_cli):
    rc, out = validate(run_cli, "dflash", QWEN3, DFLASH, "--engine-version", "0.26.0", "--tp", "16", "--dcp", "2")
    f = found(out, "SRG804")
    assert f and f[0]["severity"] == "error" and rc == 1 and "vllm#48381" in f[0]["message"], out
    _, out = validate(run_cli, "dflash", QWEN3, DFLASH, "--engine-version", "0.34.0", "--tp", "16",
                      "--decode-context-parallel-size", "2")
    f = found(out, "SRG804")
    assert f and f[0]["severity"] == "info" and "dflash/config.py:33-47" in f[0]["message"], out
    _, out = validate(run_cli, "dflash", QWEN3, DFLASH, "--engine-version", "0.26.0", "--tp", "16")
    assert not found(out, "SRG804"), out  # the branch point: no DCP


def test_dcp_on_a_gqa_target_below_its_kv_heads_is_refused_at_start(run_cli):
    rc, out = validate(run_cli, "dspark", QWEN3, DSPARK, "--engine-version", "0.34.0", "--dcp", "2")
    f = found(out, "SRG804")
    assert f and f[0]["severity"] == "error" and "8 KV heads" in f[0]["message"] and "model.py:1599" in f[0]["message"], out


# ---------------------------------------------------------- SRG805: vllm#44697 / #44698 / #52295 / #46994, MTP and PP

def test_mtp_under_pp_per_release(run_cli):
    rc, out = validate(run_cli, "mtp", NEMOTRON_MTP, NEMOTRON_MTP, "--pp", "2", "--engine-version", "0.26.0")
    f = found(out, "SRG805")
    assert f and f[0]["severity"] == "error" and rc == 1, out
    assert all(r in f[0]["message"] for r in ("vllm#44697", "vllm#44698", "vllm#52295", "vllm#46994"))
    assert "NemotronHMTPModel" in f[0]["message"]
    _, out = validate(run_cli, "mtp", NEMOTRON_MTP, NEMOTRON_MTP, "--pp", "2", "--engine-version", "0.34.0")
    f = found(out, "SRG805")
    assert f and f[0]["severity"] == "info" and "pipeline size 1" in f[0]["message"], out
    _, out = validate(run_cli, "mtp", NEMOTRON_MTP, NEMOTRON_MTP, "--engine-version", "0.26.0")
    assert not found(out, "SRG805"), out  # the branch point: pp 1


def test_mtp_class_without_supports_pp_is_srg344_not_srg805_on_0_26(run_cli):
    """The refusal is the first thing an MTP draft under --pp meets on 0.26 (vllm#46994's first point): SRG344 names
    the reports, as SRG805 does where the class starts."""
    rc, out = validate(run_cli, "deepseek-mtp", DEEPSEEK, DEEPSEEK, "--pp", "2", "--engine-version", "0.26.0")
    assert found(out, "SRG344") and not found(out, "SRG805") and rc == 1, out
    assert all(r in found(out, "SRG344")[0]["message"] for r in ("vllm#44697", "vllm#52295", "vllm#46994")), out


# ------------------------------------------------ SRG806: vllm#46488 / #38111, norm flags the speculators reader drops

SPECULATORS_EAGLE3 = ROOT / "tests" / "data" / "formats" / "speculators-llama3.1-8b-eagle3" / "config.json"


def test_norm_flags_the_release_reader_drops_are_an_error_naming_the_reports(run_cli, tmp_path):
    """RedHatAI's speculators EAGLE-3 file as a P-EAGLE file with fc_norm / norm_output set: 0.26's peagle reader
    carries norm_before_residual and norm_before_fc only (algos.py:74-77)."""
    llama = CONFIGS / "Llama-3.1-8B-Instruct.json"
    cfg = json.loads(SPECULATORS_EAGLE3.read_text())
    cfg.update(fc_norm=True, norm_output=True)
    _, out = validate(run_cli, "eagle3", llama, write(tmp_path, "e3.json", cfg), "--engine-version", "0.26.0")
    assert not found(out, "SRG806"), out  # the eagle3 reader carries all four flags
    cfg["speculators_model_type"] = cfg["speculators_config"]["algorithm"] = "peagle"
    cfg["mask_token_id"] = 128002
    rc, out = validate(run_cli, "peagle", llama, write(tmp_path, "pe.json", cfg), "--engine-version", "0.26.0")
    f = found(out, "SRG806")
    assert f and f[0]["severity"] == "error" and rc == 1, out
    assert "vllm#46488" in f[0]["message"] and "vllm#38111" in f[0]["message"] and "fc_norm=true" in f[0]["message"]


# Found by the outside check (bench/catalogue4_outside.py): the rows of 0.26 / 0.34 alone left every other release
# silent (SRG806) or a note (SRG802) where its wheel has the same code as 0.26. Rows now for every wheel read.
REALSIZE_SPECULATORS = ROOT / "tests" / "data" / "realsize" / "speculators" / "llama-3.1-8b-eagle3.json"
HUB_LLAMA = ROOT / "tests" / "data" / "hub" / "meta-llama__Llama-3.1-8B-Instruct" / "config.json"


def peagle_file(tmp_path, **flags) -> Path:
    cfg = load(REALSIZE_SPECULATORS)
    cfg.update(speculators_model_type="peagle", mask_token_id=128002, **flags)
    cfg["speculators_config"] = dict(cfg["speculators_config"], algorithm="peagle")
    return write(tmp_path, f"peagle-{len(flags)}.json", cfg)


@pytest.mark.parametrize("release", ["0.25.0", "0.30.0", "0.32.0", "0.33.0"])
def test_peagle_reader_drops_fc_norm_and_norm_output_up_to_0_33(run_cli, tmp_path, release):
    """Every peagle reader 0.25.0-0.33.0 carries norm_before_residual / norm_before_fc only (0.34 refuses P-EAGLE):
    the speculators Llama-3.1-8B EAGLE-3 file as a P-EAGLE file with fc_norm / norm_output set."""
    rc, out = validate(run_cli, "peagle", HUB_LLAMA, peagle_file(tmp_path, fc_norm=True, norm_output=True),
                       "--engine-version", release)
    f = found(out, "SRG806")
    assert f and f[0]["severity"] == "error" and rc == 1, out
    assert "vllm#46488" in f[0]["message"] and release in f[0]["message"] and "algos.py:" in f[0]["message"]
    _, out = validate(run_cli, "peagle", HUB_LLAMA, peagle_file(tmp_path), "--engine-version", release)
    assert not found(out, "SRG806"), out  # the branch point: no flag the reader drops


@pytest.mark.parametrize("release,severity", [("0.25.0", "error"), ("0.30.0", "error"), ("0.31.0", None),
                                              ("0.33.0", None)])
def test_quantised_dflash_per_release_read_from_each_wheel(run_cli, tmp_path, release, severity):
    """SpecForge's Qwen3.6-27B DFlash with an fp8 quantization_config on Qwen3.5-27B: 0.25.0-0.30.0 slice qkv_proj
    into one F.linear weight as 0.26 does; 0.31.0 keeps it only for unquantised projections."""
    target = VERDICTS / "Qwen3.5-27B.json"
    plain = VERDICTS / "specforge-qwen3.6-27b-dflash.json"
    draft = write(tmp_path, "q.json", dict(load(plain), quantization_config={
        "quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}))
    _, out = validate(run_cli, "dflash", target, draft, "--engine-version", release)
    f = found(out, "SRG802")
    assert [d["severity"] for d in f] == ([severity] if severity else []), out
    if severity:
        assert "vllm#51581" in f[0]["message"] and f"vLLM {release} builds one fused K/V" in f[0]["message"]
    _, out = validate(run_cli, "dflash", target, plain, "--engine-version", release)
    assert not found(out, "SRG802"), out  # the branch point: the unquantised drafter


def _wheel_file(release: str, member: str) -> list[str] | None:
    import zipfile

    wheels = vllm_wheels(release)
    if not wheels:
        return None
    with zipfile.ZipFile(wheels[0]) as z:
        return z.read(member).decode().splitlines()


def test_norm_flag_and_quantised_dflash_rows_are_the_wheels():
    """Each row of speculators_norm_flags / quantised_dflash derived again from its wheel where it is on disk: the
    flags each reader writes into the config (and the lines), and whether the fused K/V weight is guarded."""
    import re

    from surgery.checks.catalogue4 import data

    checked = 0
    for release, row in data()["speculators_norm_flags"]["releases"].items():
        lines = _wheel_file(release, "vllm/transformers_utils/configs/speculators/algos.py")
        if lines is None:
            continue
        checked += 1
        for algo, spec in row.items():
            start = lines.index(next(l for l in lines if l.startswith(f"def update_{algo}(")))
            end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith(("def ", "@"))), len(lines))
            body = range(start, end)
            if any('raise ValueError("P-EAGLE' in lines[i] for i in body):
                assert "refused" in spec, (release, algo)
                continue
            hits = [(i + 1, m.group(1)) for i in body
                    if (m := re.search(r'pre_trained_config\["(norm_before_residual|norm_before_fc|fc_norm|norm_output)"\]', lines[i]))]
            assert [f for _, f in hits] == spec["carries"], (release, algo)
            assert spec["at"].endswith(f"algos.py:{hits[0][0]}-{hits[-1][0]}"), (release, algo, hits)
    for release, row in data()["quantised_dflash"]["releases"].items():
        lines = _wheel_file(release, "vllm/model_executor/models/qwen3_dflash.py")
        if lines is None:
            continue
        checked += 1
        guarded = any("UnquantizedLinearMethod" in l and "import" not in l for l in lines)
        assert (row["severity"] is None) == guarded, release
        if not guarded:
            kv = next(i + 1 for i, l in enumerate(lines) if "kv_weights = [a.qkv_proj.weight[a.q_size :]" in l)
            linear = next(i + 1 for i, l in enumerate(lines) if "all_kv_flat = F.linear(" in l)
            assert row["at"].endswith(f"qwen3_dflash.py:{kv}-{kv + 1}, {linear}-{linear + 2}"), release
    if not checked:
        pytest.skip(f"no vLLM wheel in {VLLM_WHEELS_WHERE}")


# ----------------------------------------------- SRG647: tokenspeed#1012, a block drafter following an FP8 cache

def test_dspark_following_the_targets_fp8_cache_without_scales_names_tokenspeed_1012(run_cli, tmp_path):
    draft = dspark(tmp_path, 7)
    _, out = validate(run_cli, "dspark", QWEN3, draft, "--kv-cache-dtype", "fp8", "--engine-version", "0.34.0")
    f = found(out, "SRG647")
    assert f and f[0]["severity"] == "warning" and "tokenspeed#1012" in f[0]["message"], out
    _, out = validate(run_cli, "dspark", QWEN3, draft, "--kv-cache-dtype", "fp8", "--draft-kv-cache-dtype", "auto",
                      "--engine-version", "0.34.0")
    assert not found(out, "SRG647"), out  # the branch point: the drafter's cache kept unquantised


# --------------------------------------------------------------------------------------- engines and data

def test_catalogue4_findings_are_vllm_findings(run_cli, tmp_path):
    _, out = validate(run_cli, "dspark", QWEN3, dspark(tmp_path, 5), "--engine", "sglang", "--num-speculative-tokens", "7")
    assert not [d for d in json.loads(out)["diagnostics"] if d["code"].startswith("SRG80")], out


def test_every_catalogue4_code_is_catalogued_with_its_reports():
    from surgery.checks.catalogue4 import data
    from surgery.text.diagnostics import catalogue

    for name, row in data()["checks"].items():
        entry = catalogue()[row["code"]]
        assert entry.get("title") and entry.get("explain") and row["reports"], name
