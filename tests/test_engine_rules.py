"""Second catalogue of field checks (SRG645-649, SRG670-671): each fires on the input that shows the
field's failure and stays silent on a correct pair; the engine rules (surgery/data/engine_rules.yaml)
are checked against vLLM's own code where it is installed."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from testpaths import CONFIGS, ROOT

LLAMA = CONFIGS / "Llama-3.1-8B-Instruct.json"
EAGLE3 = CONFIGS / "EAGLE3-LLaMA3.1-Instruct-8B.json"
DSV3 = CONFIGS / "DeepSeek-V3.json"
MIMO3 = CONFIGS / "mimo" / "MiMo-7B-MTP-3.json"
QWEN35 = CONFIGS / "qwen3_5" / "Qwen3.5.json"
TINY = ROOT / "surgery" / "data" / "tiny" / "weights"


def codes(run_cli, *args) -> list[dict]:
    rc, out, err = run_cli("validate", *map(str, args), "--json")
    assert "Traceback" not in err
    return json.loads(out)["diagnostics"]


def found(diags, code):
    return [d for d in diags if d["code"] == code]


def write(tmp_path, name, cfg) -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(cfg))
    return p


def head(max_pos=131072, **keys) -> dict:
    cfg = json.loads(EAGLE3.read_text())
    cfg.update({"max_position_embeddings": max_pos, "eagle_aux_hidden_state_layer_ids": [1, 15, 28], **keys})
    return cfg


# ------------------------------------------------------------------ SRG645 context (vllm#58080)

def test_dict_overrides_do_not_reach_the_mtp_draft(run_cli):
    diags = codes(run_cli, "deepseek-mtp", "--target", DSV3, "--draft", DSV3,
                  "--hf-overrides", '{"max_position_embeddings": 655360}')
    hit = found(diags, "SRG645")
    assert [d["severity"] for d in hit] == ["error"]
    assert "163840 < serving length 655360" in hit[0]["message"] and "token 0" in hit[0]["message"]
    # negative: no overrides, or a serving length within the draft's
    assert not found(codes(run_cli, "deepseek-mtp", "--target", DSV3, "--draft", DSV3), "SRG645")
    assert not found(codes(run_cli, "deepseek-mtp", "--target", DSV3, "--draft", DSV3, "--hf-overrides",
                           '{"max_position_embeddings": 655360}', "--max-model-len", "100000"), "SRG645")


def test_eagle_head_shorter_than_the_target(run_cli, tmp_path):
    short = write(tmp_path, "h.json", head(max_pos=2048))
    # 0.26: no position override, the legacy runner's gate: a warning; 0.32's V2 runner (the GPU default)
    # raises the draft's positions and drafts to the end: a note that names the legacy runner's gate
    hit = found(codes(run_cli, "eagle3", "--target", LLAMA, "--draft", short, "--engine-version", "0.26.0"), "SRG645")
    assert [x["severity"] for x in hit] == ["warning"] and "2048 < serving length 131072" in hit[0]["message"]
    hit = found(codes(run_cli, "eagle3", "--target", LLAMA, "--draft", short, "--engine-version", "0.32.0"), "SRG645")
    assert [x["severity"] for x in hit] == ["info"] and "token 0" in hit[0]["message"]
    assert not found(codes(run_cli, "eagle3", "--target", LLAMA, "--draft", write(tmp_path, "g.json", head())), "SRG645")


def test_bad_overrides_are_a_usage_error(run_cli):
    rc, out, err = run_cli("validate", "deepseek-mtp", "--target", str(DSV3), "--draft", str(DSV3),
                           "--hf-overrides", "[1]")
    assert rc == 2 and "JSON object" in err and "Traceback" not in err


def test_derived_length_and_gate_are_vllms(tmp_path):
    """Oracle: vLLM's SpeculativeConfig gives the draft min(its own length, the target's) and drops dict
    hf_overrides; our derived length equals vLLM's for the configs the check reads."""
    pytest.importorskip("vllm")
    from vllm.config import SpeculativeConfig

    from surgery.checks.inherit import derived_max_len, engine_rules

    assert SpeculativeConfig.compose_draft_hf_overrides({"rope_scaling": {"rope_type": "yarn"}}) \
        is SpeculativeConfig.hf_config_override
    assert engine_rules()["context"]["dict_overrides_reach_draft"] is False
    assert SpeculativeConfig._maybe_override_draft_max_model_len(None, 2048, 131072) == 2048
    assert SpeculativeConfig._maybe_override_draft_max_model_len(None, 163840, 4096) == 4096
    import vllm.config.model as vm
    src = Path(vm.__file__).read_text()
    for rope in engine_rules()["context"]["factor_not_applied"]:
        assert f'"{rope}"' in src  # the rope types whose factor vLLM does not apply again
    assert derived_max_len(json.loads(DSV3.read_text())) == 163840
    assert derived_max_len({"max_position_embeddings": 4096, "rope_scaling": {"rope_type": "linear", "factor": 4}}) == 16384
    for model_type in engine_rules()["context"]["factor_not_applied_model_types"]:
        assert f'"{model_type}" not in hf_config.model_type' in src  # Gemma 3's length is already scaled
    gemma3 = {"model_type": "gemma3", "text_config": {"max_position_embeddings": 131072,
                                                      "rope_scaling": {"rope_type": "linear", "factor": 8.0}}}
    assert derived_max_len(gemma3) == 131072  # google/gemma-3-27b-it: vLLM serves 131072, not 8x
    nested = {"max_position_embeddings": 4096, "rope_parameters": {
        "full_attention": {"rope_type": "linear", "factor": 2.0}, "sliding_attention": {"rope_type": "default"}}}
    assert derived_max_len(nested) == 8192  # per layer type (iter_rope_parameters)
    assert derived_max_len({"max_position_embeddings": 8192, "model_max_length": 131072}) == 131072  # Command-R
    import vllm.transformers_utils.model_arch_config_convertor as conv
    keys = re.search(r"possible_keys = \[(.*?)\]", Path(conv.__file__).read_text(), re.S).group(1)
    assert set(re.findall(r'"(\w+)"', keys)) == set(engine_rules()["context"]["max_len_keys"]) | {"model_max_length"}


def test_vllm_gates_the_drafter_on_the_drafts_own_length():
    pytest.importorskip("vllm")
    import vllm.v1.worker.gpu_model_runner as gmr

    src = Path(gmr.__file__).read_text()
    assert "self.effective_drafter_max_model_len = draft_config.max_model_len" in src
    assert "<= self.effective_drafter_max_model_len" in src


# ------------------------------------------------------------------ SRG646 quantization

def test_target_quantization_applied_to_the_draft(run_cli, tmp_path):
    t = json.loads(LLAMA.read_text())
    t["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "NVFP4"}
    tq = write(tmp_path, "t.json", t)
    # EAGLE-1 DeepSeek MTP-style head: vLLM builds it with the target's quant config
    d = head(architectures=["EagleDeepSeekMTPModel"])
    hit = found(codes(run_cli, "eagle", "--target", tq, "--draft", write(tmp_path, "d.json", d), "--method", "eagle"),
                "SRG646")
    assert [x["severity"] for x in hit] == ["error"] and "modelopt" in hit[0]["message"]
    # negative: a llama EAGLE-3 head (get_draft_quant_config: its own config) -> info only (SGLang would)
    hit = found(codes(run_cli, "eagle3", "--target", tq, "--draft", write(tmp_path, "h.json", head())), "SRG646")
    assert [x["severity"] for x in hit] == ["info"] and "sglang#28196" in hit[0]["message"]
    # negative: nothing quantized
    assert not found(codes(run_cli, "eagle3", "--target", LLAMA, "--draft", write(tmp_path, "g.json", head())), "SRG646")


def test_quantization_sources_are_vllms():
    """Oracle: a module listed as `own` calls get_draft_quant_config, one listed as `target` reads
    vllm_config.quant_config (vLLM 0.32 model_executor/models/)."""
    vllm = pytest.importorskip("vllm")
    from surgery.checks.inherit import engine_rules

    models = Path(vllm.__file__).parent / "model_executor" / "models"
    rules = engine_rules()["quantization"]["vllm"]
    for module in rules["own"]:
        if (models / f"{module}.py").exists():
            assert "get_draft_quant_config" in (models / f"{module}.py").read_text(), module
    for module in rules["target"]:
        if (models / f"{module}.py").exists():
            src = (models / f"{module}.py").read_text()
            assert "get_draft_quant_config" not in src and "vllm_config.quant_config" in src, module
    spec = (Path(vllm.__file__).parent / "config" / "speculative.py").read_text()
    assert "self.draft_model_config.quantization = (\n                        self.target_model_config.quantization" in spec


def test_module_table_is_vllms_registry():
    pytest.importorskip("vllm")
    from vllm.model_executor.models.registry import _SPECULATIVE_DECODING_MODELS as REG

    from surgery.checks.inherit import engine_rules

    for arch, module in engine_rules()["modules"].items():
        assert REG[arch][0] == module, arch


# ------------------------------------------------------------------ SRG647 drafter KV dtype

def test_global_fp8_cache_reaches_the_drafter(run_cli):
    hit = found(codes(run_cli, "deepseek-mtp", "--target", DSV3, "--draft", DSV3, "--kv-cache-dtype", "fp8"), "SRG647")
    assert [x["severity"] for x in hit] == ["warning"]
    # negative: the drafter's own dtype set, no fp8, or a KV-shared draft (Gemma 4 assistant: SRG611's case)
    assert not found(codes(run_cli, "deepseek-mtp", "--target", DSV3, "--draft", DSV3, "--kv-cache-dtype", "fp8",
                           "--draft-kv-cache-dtype", "auto"), "SRG647")
    assert not found(codes(run_cli, "deepseek-mtp", "--target", DSV3, "--draft", DSV3), "SRG647")
    assert not found(codes(run_cli, "gemma4-mtp", "--target", TINY / "target", "--draft", TINY / "draft",
                           "--kv-cache-dtype", "fp8"), "SRG647")


def test_speculative_kv_cache_dtype_overrides_the_global_one():
    pytest.importorskip("vllm")
    import vllm.config.speculative as vs

    assert ("kv_cache_dtype", "cache_config", "cache_dtype") in vs._DRAFT_VLLM_CONFIG_OVERRIDES


# ------------------------------------------------------------------ SRG648 capture reach

def test_capture_ids_per_target_class(run_cli, tmp_path):
    good = write(tmp_path, "h.json", head())
    assert not found(codes(run_cli, "eagle3", "--target", LLAMA, "--draft", good), "SRG648")
    t = json.loads(LLAMA.read_text())
    t["architectures"] = ["Ernie4_5ForCausalLM"]  # a SupportsEagle3 class whose capture loop the table lacks (Phi3ForCausalLM, the old example, is llama's: phi3.py)
    hit = found(codes(run_cli, "eagle3", "--target", write(tmp_path, "t.json", t), "--draft", good), "SRG648")
    assert [x["severity"] for x in hit] == ["info"]  # a gap in surgery's knowledge is a note (issue 53)
    # id = L on DeepSeek: reached by vLLM 0.32, not before vllm#46788 (history, info)
    from surgery.checks.head import capture_check, reach_bound
    assert reach_bound("L-1", 61) == 60 and reach_bound("L", 61) == 61 and reach_bound(0, 61) == 0


def test_capture_reach_is_vllms(tmp_path):
    """Oracle: every module listed records start_layer/0 before its loop and idx + 1 after each layer (or
    end_layer after the loop), and every vLLM module with a capture loop is listed."""
    vllm = pytest.importorskip("vllm")
    from surgery.checks.inherit import engine_rules

    models = Path(vllm.__file__).parent / "model_executor" / "models"
    listed = set(engine_rules()["capture"]["vllm"]["modules"])
    with_loop = {p.stem for p in models.glob("*.py") if p.stem != "interfaces" and
                 re.search(r"_maybe_add_hidden_state\(|in self\.aux_hidden_state_layers", p.read_text())}
    with_loop -= {"mistral_large_3_eagle"}  # a draft head, not a target
    assert with_loop == listed
    for module in listed:
        src = (models / f"{module}.py").read_text()
        assert re.search(r"(idx|i|layer_idx)( - self\.start_layer)? \+ 1|end_layer in self\.aux_hidden_state_layers", src), module


# ------------------------------------------------------------------ SRG649 norm flags

def test_norm_flag_not_read(run_cli, tmp_path):
    # deepseek_eagle3 reads no norm_before_fc (vllm#38111's flag)
    d = head(architectures=["Eagle3DeepseekV3ForCausalLM"], norm_before_fc=True)
    hit = found(codes(run_cli, "eagle3", "--target", LLAMA, "--draft", write(tmp_path, "d.json", d)), "SRG649")
    assert hit and "norm_before_fc=true" in hit[0]["message"]
    # an unknown flag on the llama head; false flags are the engine's default
    hit = found(codes(run_cli, "eagle3", "--target", LLAMA, "--draft", write(tmp_path, "e.json", head(input_norm=True))), "SRG649")
    assert hit and "input_norm" in hit[0]["message"]
    # negative: flags the llama head reads
    ok = head(norm_before_fc=True, norm_before_residual=True, fc_norm=False)
    assert not found(codes(run_cli, "eagle3", "--target", LLAMA, "--draft", write(tmp_path, "g.json", ok)), "SRG649")


def test_norm_flags_read_are_vllms():
    vllm = pytest.importorskip("vllm")
    from surgery.checks.inherit import engine_rules

    models = Path(vllm.__file__).parent / "model_executor" / "models"
    table = engine_rules()["norm_flags"]["vllm"]
    universe = {f for flags in table.values() for f in flags}
    for module, flags in table.items():
        src = (models / f"{module}.py").read_text()
        for flag in universe:
            assert (f'"{flag}"' in src) == (flag in flags), (module, flag)


def test_modelopt_norm_flags_are_compared_by_meaning(run_cli, tmp_path):
    """Issue 42: every NVIDIA `*-Eagle3` export writes `use_input_layernorm_in_first_layer: true` and
    `use_last_layernorm: true` in eagle_config; vLLM's eagle3 heads always build both norms, so true is
    what runs (no SRG649), and false names a norm the head lacks that the engine still applies (error)."""
    modelopt = ROOT / "tests" / "data" / "formats" / "modelopt-llama3.1-8b-eagle3" / "config.json"
    assert not found(codes(run_cli, "eagle3", "--target", LLAMA, "--draft", modelopt), "SRG649")
    cfg = json.loads(modelopt.read_text())
    cfg["eagle_config"]["use_last_layernorm"] = False
    hit = found(codes(run_cli, "eagle3", "--target", LLAMA, "--draft", write(tmp_path, "m.json", cfg)), "SRG649")
    assert [d["severity"] for d in hit] == ["error"] and "use_last_layernorm=false" in hit[0]["message"]
    assert "always builds" in hit[0]["message"]
    # a true flag no head class reads or always builds is still refused (ModelOpt's use_mtp_layernorm)
    cfg = json.loads(modelopt.read_text())
    cfg["eagle_config"]["use_mtp_layernorm"] = True
    hit = found(codes(run_cli, "eagle3", "--target", LLAMA, "--draft", write(tmp_path, "t.json", cfg)), "SRG649")
    assert hit and "use_mtp_layernorm=true" in hit[0]["message"]


def test_always_built_norms_are_built_in_vllms_head_classes():
    """Oracle for `always_built`: each module applies layer 0's input_layernorm to the embeddings and
    builds the final norm unconditionally (no getattr on the flag)."""
    vllm = pytest.importorskip("vllm")
    from surgery.checks.inherit import engine_rules

    models = Path(vllm.__file__).parent / "model_executor" / "models"
    for module, flags in engine_rules()["norm_flags"]["always_built"].items():
        src = (models / f"{module}.py").read_text()
        assert "embeds = self.input_layernorm(embeds)" in src and re.search(r"\n\s+self\.norm = RMSNorm\(", src), module
        assert not any(f'"{flag}"' in src for flag in flags), (module, flags)


# ------------------------------------------------------------------ SRG670 MTP step layers

def test_mtp_step_layers(run_cli, tmp_path):
    hit = found(codes(run_cli, "mtp", "--target", MIMO3, "--draft", MIMO3, "--num-speculative-tokens", "3"), "SRG670")
    assert hit and "{0: 0, 1: 0, 2: 0} on the legacy" in hit[0]["message"] and "{0: 0, 1: 1, 2: 2} on the V2" in hit[0]["message"]
    cfg = json.loads(QWEN35.read_text())
    cfg.get("text_config", cfg)["mtp_num_hidden_layers"] = 2
    q = write(tmp_path, "q.json", cfg)
    hit = found(codes(run_cli, "mtp", "--target", q, "--draft", q, "--num-speculative-tokens", "3"), "SRG670")
    assert hit and "layers [1] never run on V2" in hit[0]["message"]
    # negative: one draft step, or one MTP layer
    assert not found(codes(run_cli, "mtp", "--target", MIMO3, "--draft", MIMO3, "--num-speculative-tokens", "1"), "SRG670")
    assert not found(codes(run_cli, "mtp", "--target", QWEN35, "--draft", QWEN35, "--num-speculative-tokens", "3"), "SRG670")


def test_multi_module_mtp_condition_is_vllms(tmp_path):
    """Oracle: after vLLM's own MTP rewrite, use_multi_module_mtp's key says what our V2 column says."""
    pytest.importorskip("vllm")
    from transformers import AutoConfig, PretrainedConfig
    from vllm.config import SpeculativeConfig

    from surgery.checks.head import mtp_steps
    from surgery.facts import read_facts

    cfg = json.loads(QWEN35.read_text())
    cfg.get("text_config", cfg)["mtp_num_hidden_layers"] = 2
    q = write(tmp_path, "q.json", cfg)
    for path in (MIMO3, q):
        raw = json.loads(Path(path).read_text())
        kind = raw.pop("model_type")
        try:
            hf = AutoConfig.for_model(kind, **raw)  # nested text_config as an object (Qwen3.5)
        except ValueError:
            hf = PretrainedConfig.from_dict({**raw, "model_type": kind})  # mimo: no transformers class
        hf = SpeculativeConfig.hf_config_override(hf)
        multi = min(getattr(hf, "num_nextn_predict_layers", 1), 3) > 1
        _, v2 = mtp_steps(read_facts(path), 3)
        assert (v2 != [0, 0, 0]) == multi, path
    import vllm.v1.spec_decode.llm_base_proposer as lbp
    assert "spec_step_idx" not in Path(lbp.__file__).read_text()  # the legacy proposer never passes it


# ------------------------------------------------------------------ SRG671 tokenizer identity

def test_tokenizer_identity(run_cli, tmp_path):
    assert not found(codes(run_cli, "gemma4-mtp", "--target", TINY / "target", "--draft", TINY / "draft"), "SRG671")
    draft = tmp_path / "draft"
    shutil.copytree(TINY / "draft", draft)
    tok = json.loads((draft / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    a, b = list(vocab)[10], list(vocab)[11]
    vocab[a], vocab[b] = vocab[b], vocab[a]  # same size, two ids swapped
    (draft / "tokenizer.json").write_text(json.dumps(tok))
    hit = found(codes(run_cli, "gemma4-mtp", "--target", TINY / "target", "--draft", draft), "SRG671")
    assert [x["severity"] for x in hit] == ["error"] and "vocabularies differ" in hit[0]["message"]
    # no tokenizer.json in a folder: said, not passed
    (draft / "tokenizer.json").unlink()
    hit = found(codes(run_cli, "gemma4-mtp", "--target", TINY / "target", "--draft", draft), "SRG671")
    assert [x["severity"] for x in hit] == ["info"]


# ------------------------------------------------------------------ explain

@pytest.mark.parametrize("code, refs", [
    ("SRG645", ["vllm-project/vllm#58080"]),
    ("SRG646", ["sgl-project/sglang#28196", "sglang#34622", "vllm-project/vllm#49133", "sglang#22823"]),
    ("SRG647", ["vllm-project/vllm#48787", "vllm-project/vllm#55557"]),
    ("SRG648", ["vllm-project/vllm#46788", "sgl-project/sglang#32334"]),
    ("SRG649", ["vllm-project/vllm#38111", "sgl-project/sglang#32334"]),
    ("SRG670", ["vllm-project/vllm#35606", "#35607"]),
    ("SRG671", ["sgl-project/sglang#23838", "#24051"]),
])
def test_explain_cites(run_cli, code, refs):
    rc, out, _ = run_cli("explain", code)
    assert rc == 0 and all(r in out for r in refs)


def test_ablation_row_past_the_drafts_length_is_srg645(run_cli, tmp_path):
    """The eagle3 pair's field row for vllm#58080 (ablations.yaml): the edited draft config fires SRG645,
    and every held-out prompt runs past the draft's length while decoding."""
    from surgery.tinymodels.bytevocab import encode
    from surgery.pairs import builtin_pair

    pair = builtin_pair("eagle3")
    row = next(a for a in pair.ablations if "native length" in a.name)
    cfg = json.loads((Path(pair.draft) / "config.json").read_text())
    cfg.update(row.set_config)
    draft = write(tmp_path, "config.json", cfg)
    hit = found(codes(run_cli, "eagle3", "--target", pair.target, "--draft", draft), "SRG645")
    length = row.set_config["max_position_embeddings"]
    # the CPU engine this row runs on is the legacy runner, whose gate SRG645 names (a warning on 0.26, a
    # note on 0.32, where the GPU default is the V2 runner)
    assert hit and f"{length} < serving length 512" in hit[0]["message"] and "token 0" in hit[0]["message"]
    assert not found(codes(run_cli, "eagle3", "--target", pair.target, "--draft", pair.draft), "SRG645")
    assert all(len(encode(p)) < length < len(encode(p)) + 48 for p in pair.prompts)
