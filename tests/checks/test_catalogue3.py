"""The field's third catalogue (issue 45; docs/field-catalogue-3.md): each check fires on a fixture built
from a real public config (tests/data/catalogue3/SOURCES.md) and stays silent on the correct pair.

- SRG616 / 617: a quantised target's own MTP block vs its quantization_config, from sparse real-size
  headers (DeepSeek-V3 native FP8, DeepSeek-V4-Flash NVFP4 as NVIDIA exports it, GLM-4.5-Air AWQ);
- SRG618 / 619: RoPE compared whole, and the rotary layout;
- SRG620: the draft length per runner and release;
- SRG621: DFlash 2 with a remapped vocabulary; SRG622: a block drafter's lm_head under the release's rule;
- d2t on a DSpark head with draft_vocab_size (the EAGLE-3 d2t checks run for every capture recipe).
Several cases are of the catalogue's classes without being its reports (GLM AWQ, a YaRN Qwen3 target,
DeepSeek-V3 FP8): the outside check the issue asks for.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import catalogue3_fixtures as fx
from testpaths import CONFIGS, ROOT

C3 = ROOT / "tests" / "data" / "catalogue3"
LLAMA = CONFIGS / "Llama-3.1-8B-Instruct.json"
EAGLE3 = CONFIGS / "EAGLE3-LLaMA3.1-Instruct-8B.json"
QWEN3 = CONFIGS / "Qwen3-8B.json"
DSPARK32K = C3 / "specforge-qwen3-8b-dspark-draftvocab32k.json"
DFLASH2 = C3 / "specforge-qwen3.6-27b-dflash2.json"


def found(out: str, code: str) -> list[dict]:
    return [d for d in json.loads(out)["diagnostics"] if d["code"] == code]


def write(tmp_path: Path, name: str, cfg: dict) -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(cfg))
    return p


# --------------------------------------------------------------------- SRG616 / 617: the MTP block

@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    r = tmp_path_factory.mktemp("catalogue3")
    return {
        "v3": fx.folder(r / "v3", "deepseek-v3-fp8.config.json", fx.deepseek_v3()),
        "v3_bf16_mtp": fx.folder(r / "v3b", "deepseek-v3-fp8.config.json", fx.deepseek_v3(mtp_plain=True)),
        "v4_nvidia": fx.folder(r / "v4", "deepseek-v4-flash-nvfp4.config.json", fx.deepseek_v4("mxfp4")),
        "v4_bf16_mtp": fx.folder(r / "v4b", "deepseek-v4-flash-nvfp4.config.json", fx.deepseek_v4("bf16")),
        "v4_like_main": fx.folder(r / "v4n", "deepseek-v4-flash-nvfp4.config.json", fx.deepseek_v4("nvfp4")),
        "glm": fx.folder(r / "glm", "glm-4.5-air-awq.config.json", fx.glm()),
        "glm_bf16_experts": fx.folder(r / "glmb", "glm-4.5-air-awq.config.json", fx.glm(mtp_experts_plain=True)),
    }


def own_mtp(run_cli, recipe, folder):
    return run_cli("validate", recipe, "--target", folder, "--draft", folder, "--weights", "--json")


def test_native_deepseek_v3_mtp_block_passes(run_cli, ckpts):
    rc, out, err = own_mtp(run_cli, "deepseek-mtp", ckpts["v3"])
    assert not found(out, "SRG616"), out
    summary = found(out, "SRG617")[0]["message"]
    assert "stored as the config implies" in summary and "MTP-only" in summary  # eh_proj, shared_head: not judged
    assert rc == 0, out + err


def test_deepseek_v3_mtp_block_stored_bf16_is_an_error_naming_the_tensors(run_cli, ckpts):
    rc, out, _ = own_mtp(run_cli, "deepseek-mtp", ckpts["v3_bf16_mtp"])
    f = found(out, "SRG616")
    assert rc == 1 and f and f[0]["severity"] == "error"
    msg = f[0]["message"]
    assert "model.layers.61." in msg and "BF16, no scale sidecars" in msg
    assert "model.layers.60." in msg and "weight_scale_inv" in msg  # the counterpart and its sidecar
    assert "quant_method 'fp8'" in msg and "model.layers.61." in f[0]["location"]


def test_deepseek_v4_nvfp4_export_names_the_ignore_key_vllm_does_not_read(run_cli, ckpts):
    """nvidia/DeepSeek-V4.1-Flash-NVFP4's config excludes `mtp.*` under `ignore`, but quant_method fp8 ->
    DeepseekV4FP8Config reads ignored_layers / modules_to_not_convert: the MTP experts (native MXFP4) are
    built NVFP4 like the main layers' (vllm#43455: the MoE reads the main quant_config)."""
    _, out, _ = own_mtp(run_cli, "deepseek-mtp", ckpts["v4_nvidia"])
    f = found(out, "SRG616")
    assert f, out
    msg = f[0]["message"]
    assert "'ignore' is present but vLLM's deepseek_v4_fp8 config does not read it" in msg
    assert "mtp.0.ffn.experts.0.w1.weight I8 + scale" in msg and "layers.42.ffn.experts.0.w1.weight U8" in msg


@pytest.mark.parametrize("case", ["v4_bf16_mtp", "glm_bf16_experts"])
def test_mtp_block_stored_unquantised_under_a_quantising_config(run_cli, ckpts, case):
    _, out, _ = own_mtp(run_cli, "deepseek-mtp" if case.startswith("v4") else "mtp", ckpts[case])
    f = found(out, "SRG616")
    assert f and "BF16, no scale sidecars" in f[0]["message"], out


def test_glm_awq_mtp_block_as_its_ignore_list_says_passes(run_cli, ckpts):
    """The ignore list keeps layer 46's attention BF16 while layer 45's is W4A16: stored so, no finding."""
    _, out, _ = own_mtp(run_cli, "mtp", ckpts["glm"])
    assert not found(out, "SRG616")
    assert "stored as the config implies" in found(out, "SRG617")[0]["message"]
    rc, out, _ = own_mtp(run_cli, "deepseek-mtp", ckpts["v4_like_main"])
    assert not found(out, "SRG616")
    # V4 numbers its MTP layer apart (mtp.0.*, weights_layout.yaml `{i}`): found where the plan maps layer 43
    assert not found(out, "SRG610") and rc == 0, out


def test_module_left_out_by_the_ignore_list_but_stored_quantised(run_cli, ckpts, tmp_path):
    folder = tmp_path / "glm_ignored_experts"
    cfg = json.loads((C3 / "glm-4.5-air-awq.config.json").read_text())
    cfg["quantization_config"]["ignore"].append("re:model\\.layers\\.46\\.mlp\\.experts\\..*")
    fx.folder(folder, "glm-4.5-air-awq.config.json", fx.glm(), quantization_config=cfg["quantization_config"])
    _, out, _ = own_mtp(run_cli, "mtp", folder)
    f = found(out, "SRG616")
    assert f and "left out of quantisation" in f[0]["message"] and "re:model" in f[0]["message"]


def test_the_matching_follows_each_quantiser():
    from surgery.checks.mtp_quant import ignore_list, matching_pattern, quantiser, rules

    modes = lambda q: rules()["quantisers"][q]["match"]  # noqa: E731
    assert matching_pattern(["mtp.0.ffn.experts.0.w1"], ["mtp.*"], modes("modelopt")) == "mtp.*"
    assert matching_pattern(["mtp.0.ffn.experts.0.w1"], ["mtp.*"], modes("fp8")) is None  # exact only
    assert matching_pattern(["model.layers.61.mlp.experts.0.up_proj"], ["re:.*layers\\.61\\..*"],
                            modes("compressed-tensors"))
    assert matching_pattern(["model.layers.61.mlp.experts.0.up_proj"], ["layers.61"], modes("awq")) == "layers.61"
    assert quantiser({"quant_method": "fp8"}, "deepseek_v4") == "deepseek_v4_fp8"
    assert quantiser({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "llama") == "modelopt_fp4"
    assert ignore_list({"ignore": ["x"], "modules_to_not_convert": ["y"]}, "fp8") == ("modules_to_not_convert", ["y"])
    assert ignore_list({"dynamic": {"-:.*mtp.*": {}, "+:x": {}}}, "gptq") == ("dynamic", ["-:.*mtp.*"])


def test_quantisers_data_matches_vllm_readers():
    """Oracle: the keys each quantiser reads its ignore list from are the ones vLLM's config classes read."""
    pytest.importorskip("vllm")
    import inspect

    from vllm.model_executor.layers.quantization import fp8, modelopt

    fp8_src = inspect.getsource(fp8.Fp8Config.from_config)
    assert '["ignored_layers"]' in fp8_src and '["modules_to_not_convert"]' in fp8_src
    assert '"ignore"' not in fp8_src
    mo_src = inspect.getsource(modelopt)
    assert 'config.get("ignore", [])' in mo_src and 'get("exclude_modules", [])' in mo_src


# ------------------------------------------------------------------------------ SRG618 / 619: RoPE

def test_head_without_the_targets_rope_scaling(run_cli, tmp_path):
    """speculators#574: the head runs plain RoPE under a llama3 target. The published head that states no
    scaling at all (trained that way, 2048 positions) is a note; a speculators file that lost it in a
    conversion, or a head stating another scaling, is a warning."""
    _, out, _ = run_cli("plan", "eagle3", "--target", LLAMA, "--draft", EAGLE3, "--json")
    f = found(out, "SRG618")
    assert f and f[0]["severity"] == "info"
    assert "rope_type: draft 'default', target 'llama3'" in f[0]["message"] and "factor" in f[0]["message"]
    head = json.loads(EAGLE3.read_text())
    head["rope_scaling"] = {"rope_type": "linear", "factor": 2.0}
    _, out, _ = run_cli("plan", "eagle3", "--target", LLAMA, "--draft", write(tmp_path, "h.json", head), "--json")
    assert found(out, "SRG618")[0]["severity"] == "warning"


def test_head_with_the_targets_rope_is_silent(run_cli, tmp_path):
    head = json.loads(EAGLE3.read_text())
    target = json.loads(LLAMA.read_text())
    head["rope_scaling"], head["rope_theta"] = target["rope_scaling"], target["rope_theta"]
    _, out, _ = run_cli("plan", "eagle3", "--target", LLAMA, "--draft", write(tmp_path, "h.json", head), "--json")
    assert not found(out, "SRG618")


def test_yarn_target_and_a_block_drafter_without_it(run_cli, tmp_path):
    """Same class, not a catalogue report: Qwen3-8B served with YaRN (its model card's rope_scaling), a
    DSpark head trained for it written without."""
    target = json.loads(QWEN3.read_text())
    target["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    draft = json.loads(DSPARK32K.read_text())
    draft["markov_rank"] = draft["dflash_config"]["markov_rank"]
    _, out, _ = run_cli("plan", "dspark", "--target", write(tmp_path, "t.json", target),
                        "--draft", write(tmp_path, "d.json", draft), "--json")
    f = found(out, "SRG618")
    assert f and "'yarn'" in f[0]["message"] and "original_max_position_embeddings" in f[0]["message"]


def test_layout_and_the_heads_own_partial_rotary_factor(run_cli, tmp_path):
    head = json.loads(EAGLE3.read_text())
    target = json.loads(LLAMA.read_text())
    head["rope_scaling"], head["rope_theta"] = target["rope_scaling"], target["rope_theta"]
    head["partial_rotary_factor"] = 0.5  # an EAGLE-3 head's own attention: its architecture, not compared
    head["rope_interleave"], target["rope_interleave"] = True, False
    _, out, _ = run_cli("plan", "eagle3", "--target", write(tmp_path, "t.json", target),
                        "--draft", write(tmp_path, "h.json", head), "--json")
    assert not found(out, "SRG618")
    lay = found(out, "SRG619")
    assert lay and lay[0]["severity"] == "warning" and "interleaved" in lay[0]["message"]


def test_kv_sharing_assistant_must_rotate_as_the_target(run_cli, tmp_path):
    """Gemma 4 E2B + its assistant (real configs): the assistant reads the target's rotated keys, so the
    partial rotary factor of its full-attention layers must be the target's."""
    from testpaths import E2B, E2B_ASSISTANT

    _, out, _ = run_cli("plan", "gemma4-mtp", "--target", E2B, "--draft", E2B_ASSISTANT, "--json")
    assert not found(out, "SRG618")
    assistant = json.loads(E2B_ASSISTANT.read_text())
    text = assistant.get("text_config", assistant)
    rp = text["rope_parameters"]["full_attention"]
    rp["partial_rotary_factor"] = 1.0 if rp.get("partial_rotary_factor", 1.0) != 1.0 else 0.5
    _, out, _ = run_cli("plan", "gemma4-mtp", "--target", E2B, "--draft", write(tmp_path, "a.json", assistant), "--json")
    f = found(out, "SRG618")
    assert f and "partial_rotary_factor (full_attention)" in f[0]["message"], out


def test_standalone_draft_model_keeps_its_own_rope():
    from surgery.checks.catalogue3 import rope_check
    from surgery.facts.fromconfig import facts_from_config

    d = facts_from_config(json.loads(EAGLE3.read_text()), "d")
    t = facts_from_config(json.loads(LLAMA.read_text()), "t")
    assert rope_check(d, t, method="eagle3") and not rope_check(d, t, method="draft_model")


def test_nested_rope_parameters_compared_per_layer_kind():
    from surgery.checks.catalogue3 import rope_differences

    a = {"rope_parameters": {"full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                "rope_theta": 1e6}, "sliding_attention": {"rope_theta": 1e4}}}
    b = json.loads(json.dumps(a))
    assert rope_differences(a, b) == []
    b["rope_parameters"]["full_attention"]["partial_rotary_factor"] = 1.0
    assert rope_differences(a, b) == [("full_attention", "partial_rotary_factor", 0.25, 1.0)]


# --------------------------------------------------------------------- SRG620: length per release

@pytest.mark.parametrize("version, severity, words", [
    ("0.26.0", "error", "no override"),
    ("0.32.0", "info", "raised to the target's max_model_len"),
    ("0.30.0", "info", "raised to the target's max_model_len"),
    ("0.20.0", "info", "not known here"),
])
def test_eagle_draft_length_per_release(run_cli, version, severity, words):
    _, out, _ = run_cli("validate", "eagle3", "--target", LLAMA, "--draft", EAGLE3, "--engine-version", version, "--json")
    f = found(out, "SRG620")
    assert f and f[0]["severity"] == severity and words in f[0]["message"], out


@pytest.mark.parametrize("version, rope, severity, words", [
    ("0.32.0", None, "error", "illegal memory access"),
    # issue 53: 0.33+ raise a draft whose RoPE only sizes its cache, and lower the target's length only for
    # a scaled RoPE (config/speculative.py _rope_only_sizes_cache; the release oracle observes both on 0.34)
    ("0.34.0", None, "info", "raised to the target's max_model_len"),
    ("0.34.0", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}, "warning",
     "lowers the target's max_model_len"),
])
def test_block_drafter_length_per_runner_and_release(run_cli, tmp_path, version, rope, severity, words):
    draft = json.loads(DSPARK32K.read_text())
    draft["markov_rank"] = draft["dflash_config"]["markov_rank"]
    draft["max_position_embeddings"] = 4096
    if rope:
        draft["rope_scaling"] = rope
    _, out, _ = run_cli("validate", "dspark", "--target", QWEN3, "--draft", write(tmp_path, "d.json", draft),
                        "--engine-version", version, "--json")
    f = found(out, "SRG620")
    assert f and f[0]["severity"] == severity and words in f[0]["message"]
    assert "TensorRT-LLM#16813" in f[0]["message"]  # the other engine's rule for DSpark, said beside


def test_draft_length_rows_follow_vllms_code():
    """Oracle on the installed 0.32: the override exists for eagle / eagle3 only, and the V2 speculator
    takes the target's max_model_len."""
    pytest.importorskip("vllm")
    import inspect

    from vllm.config import speculative
    from vllm.v1.worker.gpu.spec_decode import speculator

    src = inspect.getsource(speculative.SpeculativeConfig)
    assert "_maybe_override_draft_max_position_embeddings" in src
    assert 'if self.method in ("eagle", "eagle3"):' in src
    assert "self.max_model_len = vllm_config.model_config.max_model_len" in inspect.getsource(speculator)


# ------------------------------------------------------------- SRG621 / 622 and d2t: vocabularies

def test_dflash2_with_a_reduced_vocabulary_is_refused():
    from surgery.checks.catalogue3 import dflash2_check
    from surgery.facts.fromconfig import facts_from_config

    cfg = json.loads(DFLASH2.read_text())
    assert dflash2_check(facts_from_config(cfg, "d")) == []  # SpecForge's template: full vocabulary
    assert dflash2_check(facts_from_config(cfg, "d"), has_d2t=True)[0].code == "SRG621"
    cfg["draft_vocab_size"] = 32000
    f = dflash2_check(facts_from_config(cfg, "d"))
    assert f and f[0].severity == "error" and "32000" in f[0].message and "codebooks" in f[0].message
    assert "vllm: loads it and scores silently wrong" in f[0].message and "tensorrt-llm: refused" in f[0].message


def test_block_drafter_lm_head_rule_per_engine():
    from surgery.checks.catalogue3 import lm_head_rule_check
    from surgery.facts.fromconfig import facts_from_config

    d = facts_from_config(json.loads(DSPARK32K.read_text()), "d")
    t = facts_from_config(json.loads(QWEN3.read_text()), "t")
    keep = lm_head_rule_check(d, t, method="dspark", engine="vllm", version="0.32.0")
    assert keep[0].code == "SRG622" and keep[0].severity == "info" and "keeps" in keep[0].message
    ascend = lm_head_rule_check(d, t, method="dspark", engine="vllm-ascend", version=None)
    assert ascend[0].severity == "error" and "vllm-ascend#11374" in ascend[0].message
    full = facts_from_config(json.loads(QWEN3.read_text()) | {"architectures": ["DSparkDraftModel"]}, "d")
    assert lm_head_rule_check(full, t, method="dspark", engine="vllm", version="0.32.0") == []


def test_dspark_head_with_draft_vocab_and_no_d2t(run_cli, tmp_path):
    """The d2t checks (SRG606-608) run for DFlash / DSpark heads too: a SpecForge draftvocab32k head shape."""
    import tiny_checkpoints as tc

    draft = {"architectures": ["DSparkDraftModel"], "model_type": "qwen3", "hidden_size": tc.HIDDEN,
             "intermediate_size": 32, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
             "num_hidden_layers": 1, "vocab_size": tc.VOCAB, "draft_vocab_size": tc.DRAFT_VOCAB,
             "max_position_embeddings": 256, "rope_theta": 10000.0, "markov_rank": 4,
             "dflash_config": {"mask_token_id": 5, "target_layer_ids": [0, 3, 5]}, "tie_word_embeddings": False}
    tensors = tc.eagle3_tensors(d2t=None)
    tc.write_folder(tmp_path / "target", tc.llama_config(), tc.target_tensors())
    tc.write_folder(tmp_path / "head", draft, tensors)
    rc, out, err = run_cli("validate", "dspark", "--target", tmp_path / "target", "--draft", tmp_path / "head",
                           "--weights", "--json")
    assert found(out, "SRG606"), out + err


def test_explain_cites_every_report_a_check_covers(run_cli):
    from surgery.checks.catalogue3 import data

    pairs = [(c["code"], r) for c in data()["checks"].values() for r in c["reports"]]
    pairs += [(code, r) for code, reports in data()["cited"].items() for r in reports]
    for code, report in pairs:
        rc, out, _ = run_cli("explain", code)
        repo, _, number = report.partition("#")
        # cited in full, or as `#N` after the project's full name (vllm-project/vllm#43455, #43472)
        assert rc == 0 and (report in out or (f"#{number}" in out and repo in out)), (code, report)


def test_dspark_conditioned_on_the_targets_kv_is_refused(run_cli, tmp_path):
    """SpecForge's configs/qwen3.5-4b-dspark-kv.json: no vLLM reader for conditioning_source / target_kv_*."""
    _, out, _ = run_cli("plan", "dspark", "--target", QWEN3, "--draft", C3 / "specforge-qwen3.5-4b-dspark-kv.json",
                        "--json")
    f = found(out, "SRG623")
    assert f and f[0]["severity"] == "error" and "target_kv_head_dim" in f[0]["message"]
    assert f[0]["location"].endswith("dflash_config.conditioning_source")
    plain = json.loads((C3 / "specforge-qwen3.5-4b-dspark-kv.json").read_text())
    plain["dflash_config"] = {k: v for k, v in plain["dflash_config"].items()
                              if k != "conditioning_source" and not k.startswith("target_kv_")}
    _, out, _ = run_cli("plan", "dspark", "--target", QWEN3, "--draft", write(tmp_path, "d.json", plain), "--json")
    assert not found(out, "SRG623")


def test_no_vllm_reader_for_target_kv_conditioning():
    """Oracle: the installed vLLM's source never names the keys SRG623 says it does not read."""
    pytest.importorskip("vllm")
    import vllm

    root = Path(vllm.__file__).parent
    for path in root.rglob("*.py"):
        text = path.read_text(encoding="utf-8", errors="replace")
        assert "conditioning_source" not in text and "target_kv_position_mode" not in text, path


def test_audit_runs_the_catalogue_with_the_serving_release(monkeypatch):
    """`surgery audit` (surgery/vllm/audit_config.py config_findings): the third catalogue's config checks run with
    the method the engine really runs and the installed vLLM's release (stand-in proposer)."""
    pytest.importorskip("vllm")
    from types import SimpleNamespace

    from surgery.facts import read_facts
    from surgery.plan import Runtime
    from surgery.recipe import load_recipe
    from surgery.resolver import resolve
    from surgery.vllm import audit as vaudit, audit_config, config_check, hooks

    draft, target = read_facts(EAGLE3), read_facts(LLAMA)
    recipe = load_recipe("eagle3")
    plan = resolve(recipe, draft, target, Runtime(engine="vllm"))
    monkeypatch.setattr(config_check, "draft_ids_misread", lambda *a: [])
    monkeypatch.setattr(audit_config, "drafter_length", lambda *a: None)
    proposer = SimpleNamespace(
        speculative_config=SimpleNamespace(method="eagle3", num_speculative_tokens=3, kv_cache_dtype=None,
                                           parallel_drafting=False),
        vllm_config=SimpleNamespace(model_config=SimpleNamespace(max_model_len=131072, hf_overrides=None)))
    selection = SimpleNamespace(recipe=recipe, draft=draft, target=target)
    for version, severity in (("0.26.0", "error"), ("0.32.0+cpu", "info")):
        monkeypatch.setattr(hooks, "engine_version", lambda v=version: v)
        a = vaudit.Audit(plan)
        audit_config.config_findings(a, proposer, selection)
        codes = {d.code: d for _, d in a.findings}
        assert "SRG618" in codes and codes["SRG620"].severity == severity, version


def test_dflash2_rule_follows_vllms_code():
    """Oracle on the installed 0.32: DFlash 2's selector codebooks have the target vocabulary's rows and its
    candidates come from the draft head with no d2t remap (the TRT-LLM#19159 flaw, unrefused)."""
    pytest.importorskip("vllm")
    import inspect

    from vllm.model_executor.models import qwen3_dflash2

    model_src = inspect.getsource(qwen3_dflash2.DFlash2Qwen3Model)
    assert "vocab_size=self.config.vocab_size" in model_src
    cand = inspect.getsource(qwen3_dflash2.DFlash2Qwen3ForCausalLM.compute_candidates)
    assert "self.lm_head" in cand and "d2t" not in cand and "draft_id_to_target_id" not in cand


def test_legacy_modelopt_hf_quant_config_is_read(run_cli, tmp_path):
    """ModelOpt 0.29 and before write the quant config to hf_quant_config.json, which vLLM reads when
    config.json has none: its exclude_modules decide the MTP layer (here a DeepSeek-V3 layout, layer 61 BF16)."""
    cfg = json.loads((C3 / "deepseek-v3-fp8.config.json").read_text())
    cfg.pop("quantization_config")
    tensors = fx.deepseek_v3(mtp_plain=True)
    for exclude, flagged in ((["lm_head"], True), (["lm_head", "model.layers.61*"], False)):
        folder = tmp_path / ("flagged" if flagged else "excluded")
        fx.folder(folder, "deepseek-v3-fp8.config.json", tensors)
        (folder / "config.json").write_text(json.dumps(cfg))
        (folder / "hf_quant_config.json").write_text(json.dumps(
            {"producer": {"name": "modelopt", "version": "0.23.0"},
             "quantization": {"quant_algo": "FP8_BLOCK", "exclude_modules": exclude}}))
        _, out, _ = own_mtp(run_cli, "deepseek-mtp", folder)
        assert bool(found(out, "SRG616")) is flagged, out


@pytest.mark.parametrize("version, severity", [("0.26.0", "error"), ("0.32.0", "info")])
def test_peagle_draft_length_per_release(run_cli, tmp_path, version, severity):
    """P-EAGLE is served as eagle3 with parallel drafting: the EAGLE rows apply, named as P-EAGLE."""
    draft = json.loads((ROOT / "tests" / "data" / "block_drafts" / "specforge-qwen3-8b-peagle.json").read_text())
    draft["max_position_embeddings"] = 2048
    _, out, _ = run_cli("plan", "peagle", "--target", QWEN3, "--draft", write(tmp_path, "p.json", draft),
                        "--engine-version", version, "--json")
    f = found(out, "SRG620")
    assert f and f[0]["severity"] == severity and f[0]["message"].startswith("P-EAGLE draft"), out


def test_mtp_layer_names_follow_vllms_loaders():
    """Oracle: where vLLM 0.32's MTP loaders find the MTP layers in a checkpoint (surgery/data/mtp_quant.yaml)."""
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        pytest.skip("vLLM is not installed")
    from surgery.checks.mtp_quant import rules

    layers = rules()["mtp_layers"]
    root = Path(spec.origin).parent  # read as text: importing qwen3_5_mtp needs torchvision

    def src(mod: str) -> str:
        return (root / Path(*mod.split(".")[1:])).with_suffix(".py").read_text(encoding="utf-8")
    for mod in ("deepseek_mtp", "glm4_moe_mtp", "mimo_mtp"):
        assert "self.mtp_start_layer_idx = config.num_hidden_layers" in src(f"vllm.model_executor.models.{mod}")
    assert layers["deepseek_v3"]["checkpoint"] == layers["glm4_moe"]["checkpoint"] == "model.layers.{L+i}."
    assert 'f"mtp.{mtp_layer_idx}."' in src("vllm.models.deepseek_v4.nvidia.mtp") and layers["deepseek_v4"]["checkpoint"] == "mtp.{i}."
    assert 'f"model.mtp_layers.{i}.": f"model.mtp_layers.{i + start}."' in src("vllm.model_executor.models.mimo_mtp")
    for mod in ("qwen3_next_mtp", "qwen3_5_mtp"):
        assert 'name = name.replace("mtp.", "model.")' in src(f"vllm.model_executor.models.{mod}")
    assert 'getattr(config, "mtp_num_hidden_layers", 1)' in src("vllm.model_executor.models.qwen3_5_mtp")
    assert layers["qwen3_5_moe"]["count_key"] == "mtp_num_hidden_layers"


@pytest.mark.parametrize("given, release", [("0.32.0+cpu", "0.32.0"), ("0.32.0rc1", "0.32.0"), ("0.34", "0.34.0"),
                                            ("0.33.0.dev12+g1a2b", "0.33.0"), ("0.31.0", "0.31.0"),
                                            ("0.24.0", None), ("0.35.0", None), ("nonsense", None)])
def test_release_of_a_version_string(given, release):
    from surgery.checks.catalogue3 import release_of

    assert release_of(given) == release


def test_mtp_block_checked_by_hub_id_from_headers_only(run_cli, tmp_path, monkeypatch):
    """`validate --weights` by hub id (local hub, tests/hub/hubserver.py): the DeepSeek-V3 layout with a BF16
    MTP layer is caught from the header alone; the bulk (8 GB declared) is never fetched."""
    import hashlib

    from hub.hubserver import HubServer, Repo, RepoFile, safetensors_file

    repo_id = "example/DeepSeek-V3-bf16-mtp"
    cfg = (C3 / "deepseek-v3-fp8.config.json").read_bytes()
    weights = safetensors_file(sorted(fx.deepseek_v3(mtp_plain=True)), metadata={"format": "pt"})
    repo = Repo(repo_id, {"config.json": RepoFile(cfg), "model.safetensors": RepoFile(weights, lfs=True)},
                revisions={"main": hashlib.sha1(repo_id.encode()).hexdigest()})
    with HubServer([repo], token=None) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
        for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "SURGERY_HUB_CACHE", "HF_HUB_OFFLINE", "HF_TOKEN",
                    "TRANSFORMERS_OFFLINE"):
            monkeypatch.delenv(var, raising=False)
        rc, out, err = run_cli("validate", "deepseek-mtp", "--target", repo_id, "--draft", repo_id, "--weights", "--json")
        data = json.loads(out)
        assert rc == 1, err
        assert [d for d in data["weights"]["findings"] if d["code"] == "SRG616"]
        assert weights.size > 8e9 and hub.served_bytes() < 1 << 20
