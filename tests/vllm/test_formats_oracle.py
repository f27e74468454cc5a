"""Oracle (issue 24): every published draft-config format read by surgery (`surgery.facts` through
`surgery.formats`) equals the draft config vLLM 0.32 builds from the same file with its own functions:

- speculators: `SpeculatorsConfig.from_pretrained` (configs/speculators/base.py + algos.py) for the
  hf_config, `maybe_override_with_speculators` (transformers_utils/config.py) for the target it
  serves, the method and k;
- ModelOpt / EAGLE / SpecForge / SGLang: `AutoConfig` wrapped in `EAGLEConfig(method="eagle3")`, as
  config/speculative.py does;
- aux ids per runner: the legacy runner's `GPUModelRunner._get_eagle3_aux_layers_from_config` and the
  v2 runner's `eagle3_utils.get_eagle3_aux_layers_from_config`, called on that hf_config.

Compared field by field: model_type, architectures, hidden / target hidden size, vocab / draft vocab,
aux ids (both runners), the four norm flags (incl. norm_before_residual absent -> True in vLLM), method,
k, verifier. Config-level: no engine starts.
"""
from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from surgery.facts import facts_from_config, read_config
from surgery.formats import format_of
from surgery.formats.conventions import runner_reads
from surgery.engine.servedarch import served_architectures

REPO = Path(__file__).resolve().parents[2]
FORMATS = REPO / "tests" / "data" / "formats"
TARGET_LAYERS = 32  # Llama 3.1 8B (tests/data/configs/Llama-3.1-8B-Instruct.json)
NORMS = ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output")


def _plain_copy(src: Path, tmp: Path) -> Path:
    """The corpus files carry `_source`-style annotations; vLLM gets the file without them."""
    cfg = {k: v for k, v in json.loads(src.read_text()).items() if not k.startswith("_")}
    folder = tmp / src.stem
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def _cases():
    out = [pytest.param(p, id=p.name) for p in sorted(FORMATS.iterdir()) if (p / "config.json").is_file()]
    out.append(pytest.param(REPO / "tests" / "data" / "configs" / "EAGLE3-LLaMA3.1-Instruct-8B.json", id="eagle-yuhuili"))
    out.append(pytest.param(REPO / "surgery" / "data" / "pairs" / "eagle3" / "draft", id="builtin-eagle3"))
    return out


def _vllm_view(folder: Path):
    """(hf_config, speculative config or None, served target or None), by vLLM's own code."""
    from vllm.transformers_utils.config import get_config, maybe_override_with_speculators
    from vllm.transformers_utils.configs.eagle import EAGLEConfig
    from vllm.transformers_utils.configs.speculators.base import SpeculatorsConfig

    served, _, spec = maybe_override_with_speculators(str(folder), None, False)
    if spec is not None:
        return SpeculatorsConfig.from_pretrained(str(folder)), spec, served
    # vLLM's own config loader (the draft ModelConfig's): it reads kimi_k2 as DeepseekV3Config
    return EAGLEConfig(get_config(str(folder), trust_remote_code=False), method="eagle3", model_type="eagle"), None, None


def _runner_ids(hf_config):
    from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import get_eagle3_aux_layers_from_config
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    spec = types.SimpleNamespace(draft_model_config=types.SimpleNamespace(hf_config=hf_config))
    legacy = GPUModelRunner._get_eagle3_aux_layers_from_config(types.SimpleNamespace(speculative_config=spec))
    return {"legacy": legacy, "v2": get_eagle3_aux_layers_from_config(spec)}


@pytest.mark.parametrize("path", _cases())
def test_facts_equal_the_config_vllm_builds(path, tmp_path):
    folder = path if path.is_dir() else _plain_copy(path, tmp_path)
    cfg, source = read_config(folder)
    facts = facts_from_config(cfg, source)
    fmt = format_of(facts)
    hf, spec, served_target = _vllm_view(folder)

    assert fmt.vllm_model_type == hf.model_type
    # a plain name (SafeAILab's LlamaForCausalLM template) is served renamed: surgery/engine/servedarch.py (SRG206)
    # (a speculators file is not wrapped: SpeculatorsConfig names the class itself)
    served = facts.architectures if spec is not None else served_architectures("eagle3", facts.architectures)
    assert list(served) == list(hf.architectures)
    assert facts["hidden_size"] == hf.hidden_size
    assert facts["vocab_size"] == hf.vocab_size
    assert facts["num_hidden_layers"] == hf.num_hidden_layers
    assert facts["draft_vocab_size"] == getattr(hf, "draft_vocab_size", None)
    assert facts["target_hidden_size"] == getattr(hf, "target_hidden_size", None)
    if getattr(hf, "kv_lora_rank", None) is None:  # MLA (the DeepSeek-style heads): see test_mla_heads below
        assert facts["head_dim"] == getattr(hf, "head_dim", hf.hidden_size // hf.num_attention_heads)
    for flag in NORMS:  # what the engine's llama_eagle3 reads: getattr(config, flag, False)
        assert bool(facts.raw.get(flag, False)) == bool(getattr(hf, flag, False)), flag
    reads = runner_reads(fmt, TARGET_LAYERS)
    vllm_reads = _runner_ids(hf)
    for runner, (ids, _why) in reads.items():
        # vLLM returns None where it falls back to the model's default (2, L // 2, L - 3)
        assert tuple(ids) == (vllm_reads[runner] or (2, TARGET_LAYERS // 2, TARGET_LAYERS - 3)), runner
    assert (facts["eagle_aux_hidden_state_layer_ids"] or None) == (
        list(vllm_reads["legacy"]) if vllm_reads["legacy"] else None)
    if spec is None:
        assert fmt.name != "speculators" and fmt.speculators is None
    else:
        s = fmt.speculators
        assert fmt.name == "speculators"
        assert (s.method, s.num_speculative_tokens) == (spec["method"], spec["num_speculative_tokens"])
        assert s.verifier == served_target
        assert s.norm_vllm == {k: getattr(hf, k) for k in s.norm_vllm}


def test_the_norm_before_residual_split_is_real():
    """The same file, two models: vLLM builds True where the key is absent, speculators' class False."""
    folder = FORMATS / "speculators-llama3.1-8b-eagle3-nbr-absent"
    hf, _, _ = _vllm_view(folder)
    cfg, source = read_config(folder)
    fmt = format_of(facts_from_config(cfg, source))
    assert "norm_before_residual" not in json.loads((folder / "config.json").read_text())
    assert hf.norm_before_residual is True and fmt.speculators.norm_vllm["norm_before_residual"] is True
    assert fmt.speculators.norm_speculators["norm_before_residual"] is False
    assert hf.norm_before_fc is True  # vllm#38111: kept


def test_nested_ids_are_read_by_the_legacy_runner_only():
    hf, _, _ = _vllm_view(FORMATS / "modelopt-llama3.1-8b-eagle3")
    ids = _runner_ids(hf)
    assert ids == {"legacy": (1, 15, 28), "v2": None}


def test_the_speculators_algorithms_surgery_reads_are_vllms_and_eagle1_is_not_one():
    """SRG663's premise: vLLM 0.32 reads no speculators EAGLE-1 (`eagle`) file, so an EAGLE-1 head
    has no speculators form; every algorithm formats.yaml reads is one vLLM registers."""
    from vllm.transformers_utils.configs.speculators.algos import SUPPORTED_SPECULATORS_TYPES

    from surgery.formats.table import formats_data

    assert "eagle" not in SUPPORTED_SPECULATORS_TYPES
    assert set(formats_data()["speculators_algorithms"]) <= set(SUPPORTED_SPECULATORS_TYPES)


BLOCK = ("speculators-miniature-dflash", "speculators-miniature-dspark", "speculators-miniature-dflash-unshifted")


@pytest.mark.parametrize("name", BLOCK)
def test_block_drafter_files_read_as_vllm_builds_them(name):
    """Speculators dflash / dspark: the normalised config is vLLM's own `extract_transformers_pre_trained_config`
    dict key for key; the facts' capture ids are what both runners capture, the facts' own-numbering ids
    are the ids vLLM gives the draft model (aux ids - 1), the mask token is the one vLLM's
    `get_parallel_drafting_token_id` finds, and method / k are `build_vllm_speculative_config`'s."""
    from vllm.transformers_utils.configs.speculators.base import SpeculatorsConfig
    from vllm.v1.worker.gpu.spec_decode.utils import get_parallel_drafting_token_id

    from surgery.formats import SOURCE_KEY, normalise_config

    folder = FORMATS / name
    raw = json.loads((folder / "config.json").read_text())
    vllm_dict = SpeculatorsConfig.extract_transformers_pre_trained_config(json.loads(json.dumps(raw)))
    ours = normalise_config(json.loads(json.dumps(raw)), str(folder))
    assert ours.pop(SOURCE_KEY) == raw
    assert ours == vllm_dict
    cfg, source = read_config(folder)
    facts = facts_from_config(cfg, source)
    hf, spec, served = _vllm_view(folder)
    ids = _runner_ids(hf)
    assert tuple(facts["eagle_aux_hidden_state_layer_ids"]) == tuple(ids["legacy"]) == tuple(ids["v2"])
    native = hf.dflash_config["target_layer_ids"] if raw["speculators_model_type"] == "dflash" else hf.target_layer_ids
    assert facts["block_draft_target_layer_ids"] == native == [i - 1 for i in raw["aux_hidden_state_layer_ids"]]
    assert facts["parallel_drafting_token_id"] == get_parallel_drafting_token_id(hf)
    s = format_of(facts).speculators
    assert (s.method, s.num_speculative_tokens, s.verifier) == (spec["method"], spec["num_speculative_tokens"], served)


def test_dflash2_is_registered_by_vllm_and_refused_by_surgery():
    """vLLM reads dflash2 (DFlash2DraftModel); surgery refuses it with a code naming why (no recipe)."""
    from vllm.transformers_utils.configs.speculators.algos import SUPPORTED_SPECULATORS_TYPES

    from surgery.text.diagnostics import SurgeryError

    assert "dflash2" in SUPPORTED_SPECULATORS_TYPES
    raw = json.loads((FORMATS / "speculators-miniature-dflash" / "config.json").read_text())
    raw["speculators_model_type"] = "dflash2"
    with pytest.raises(SurgeryError) as exc:
        facts_from_config(raw, "x/config.json")
    assert exc.value.diagnostics[0].code == "SRG664" and "DFlash2DraftModel" in exc.value.diagnostics[0].message
