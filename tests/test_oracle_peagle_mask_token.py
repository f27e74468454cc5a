"""Issue 35: a P-EAGLE head's mask token in SpecForge's nested spelling, read where vLLM 0.32 reads it.

SpecForge's P-EAGLE trainer takes the mask token from the draft config's `dflash_config.mask_token_id`
(sgl-project/SpecForge@a6b6b023 specforge/training/model_utils.py `resolve_mask_token_id`; its DFlash family
writes the same key, algorithms/model_providers.py). The fixture
tests/data/block_drafts/specforge-qwen3-8b-peagle.json is SpecForge's `configs/qwen3-8b-peagle.json`
verbatim plus that key, holding 151669: the id SpecForge resolves for Qwen3-8B when nothing else is given
(the first unused embedding slot, the tokenizer's 151669 entries < vocab 151936).

Oracle: vLLM's own readers on the config vLLM builds (`EAGLEConfig(model=..., method="eagle3")`, which keeps
the nested dict): v1/worker/gpu/spec_decode/utils.py `get_parallel_drafting_token_id` and the legacy runner's
llm_base_proposer.py `_init_parallel_drafting_params`. Both agree with the facts on every spelling below,
including a present null (vLLM reads it and fails; the facts give no token, SRG673). A mask-token key nested
where no release reads it (`eagle_config.mask_token_id`, ...) is refused by vLLM at start; the recipes say
so with SRG682, naming the key, instead of SRG673.
"""
from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from testpaths import CONFIGS, ROOT  # noqa: E402

from surgery import Runtime, facts_from_config, load_recipe, resolve  # noqa: E402
from surgery.resources import load_data  # noqa: E402

pytest.importorskip("torch")
pytest.importorskip("vllm")

SPECFORGE = json.loads((ROOT / "tests" / "data" / "block_drafts" / "specforge-qwen3-8b-peagle.json").read_text())
QWEN3_8B = json.loads((CONFIGS / "Qwen3-8B.json").read_text())
PAIRS = ROOT / "surgery" / "data" / "pairs"
PEAGLE = json.loads((PAIRS / "peagle" / "draft" / "config.json").read_text())
TARGET = json.loads((PAIRS / "llama-target" / "config.json").read_text())


def _served(cfg: dict):
    """The draft config vLLM builds for method eagle3 (P-EAGLE is served as eagle3 + parallel drafting)."""
    from vllm.transformers_utils.configs.eagle import EAGLEConfig

    return EAGLEConfig(model=copy.deepcopy({k: v for k, v in cfg.items() if k != "_source"}), method="eagle3")


def _vllm_v2(cfg: dict):
    """get_parallel_drafting_token_id, or None where vLLM refuses (no key / a null it cannot read)."""
    from vllm.v1.worker.gpu.spec_decode.utils import get_parallel_drafting_token_id

    try:
        return get_parallel_drafting_token_id(_served(cfg))
    except (ValueError, TypeError):
        return None


def _vllm_legacy(cfg: dict):
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

    fake = SimpleNamespace(draft_model_config=SimpleNamespace(hf_config=_served(cfg)), pass_hidden_states_to_model=False)
    try:
        SpecDecodeBaseProposer._init_parallel_drafting_params(fake)
    except ValueError:
        return None
    token = fake.parallel_drafting_token_id
    return token if isinstance(token, int) else None


def _without_mask(cfg: dict) -> dict:
    out = copy.deepcopy(cfg)
    for key in ("mask_token_id", "pard_token", "ptd_token_id", "dspark_noise_token_id", "dflash_config"):
        out.pop(key, None)
    return out


def _plan(recipe: str, draft: dict, target: dict = TARGET):
    return resolve(load_recipe(recipe), facts_from_config(draft, "draft"), facts_from_config(target, "target"),
                   Runtime(device="cuda"))


def test_specforge_peagle_spelling_is_read_where_vllm_reads_it():
    assert _vllm_v2(SPECFORGE) == _vllm_legacy(SPECFORGE) == 151669
    facts = facts_from_config(SPECFORGE, "specforge")
    assert facts["parallel_drafting_token_id"] == 151669 and facts["nested_mask_token"] is None
    codes = {d.code for d in _plan("peagle", SPECFORGE, QWEN3_8B).errors}
    assert not codes & {"SRG673", "SRG682"}, codes


BASE = _without_mask(PEAGLE)
SPELLINGS = {
    "specforge-nested": {"dflash_config": {"mask_token_id": 5}},
    "top-level": {"mask_token_id": 5},
    "pard_token": {"pard_token": 5},
    "ptd_token_id": {"ptd_token_id": 5},
    "dspark_noise": {"dspark_noise_token_id": 5},
    "nested-wins": {"dflash_config": {"mask_token_id": 5}, "mask_token_id": 6, "pard_token": 7},
    "top-null-falls-through": {"mask_token_id": None, "pard_token": 5},
    # a present null: vLLM reads it and fails, it does not read on
    "nested-null": {"dflash_config": {"mask_token_id": None}, "mask_token_id": 5},
    "pard-null": {"pard_token": None, "ptd_token_id": 5},
    "empty-dflash-config": {"dflash_config": {}, "mask_token_id": 5},
    "none": {},
}


@pytest.mark.parametrize("name", sorted(SPELLINGS))
def test_facts_equal_both_vllm_readers(name):
    cfg = {**BASE, **SPELLINGS[name]}
    want = _vllm_v2(cfg)
    assert _vllm_legacy(cfg) == want
    assert facts_from_config(cfg, "d")["parallel_drafting_token_id"] == want
    codes = {d.code for d in _plan("peagle", cfg).errors}
    assert ("SRG673" in codes) == (want is None), codes


def _unread_nested() -> list[str]:
    rules = load_data("data/vllm_config_spelling.yaml")
    read = {k for e in rules["releases"] for k in (e.get("mask_token") or {}).get("reads", ())}
    spec = rules["nested_mask_token"]
    return [f"{c}.{n}" for c in spec["containers"] for n in spec["names"] if f"{c}.{n}" not in read]


def test_the_nested_keys_checked_include_the_layouts_heads_use():
    keys = _unread_nested()
    assert "eagle_config.mask_token_id" in keys and "eagle_config.pard_token" in keys
    assert "dflash_config.pard_token" in keys and "dflash_config.mask_token_id" not in keys


@pytest.mark.parametrize("key", _unread_nested())
@pytest.mark.parametrize("recipe", ["peagle", "dflash", "dspark"])
def test_a_key_vllm_does_not_read_is_srg682_naming_it(recipe, key):
    base = {"peagle": BASE, "dflash": _without_mask(json.loads((PAIRS / "dflash" / "draft" / "config.json").read_text())),
            "dspark": _without_mask(json.loads((ROOT / "tests" / "data" / "block_drafts" / "dspark-qwen3.json").read_text()))}
    container, name = key.split(".")
    cfg = copy.deepcopy(base[recipe])
    cfg[container] = {**(cfg.get(container) or {}), name: 3}
    if recipe != "peagle" and container == "dflash_config":  # keep the draft's own ids where they were
        orig = base[recipe].get("dflash_config") or {}
        cfg[container] = {**orig, name: 3}
    assert _vllm_v2(cfg) is None and _vllm_legacy(cfg) is None  # vLLM reads no token: it refuses to start
    assert facts_from_config(cfg, "d")["nested_mask_token"] == key
    errors = _plan(recipe, cfg).errors
    codes = {d.code for d in errors}
    assert "SRG682" in codes and "SRG673" not in codes, codes
    found = next(d for d in errors if d.code == "SRG682")
    assert f"draft.nested_mask_token='{key}'" in found.message and "pard_token" in found.message
    assert "pard_token" in found.hint and "eagle_config.mask_token_id" in found.hint


def test_a_nested_key_beside_a_read_token_is_not_refused():
    """vLLM reads the top-level token; the stray nested copy changes nothing (SRG673 still checks the id)."""
    cfg = {**BASE, "mask_token_id": 3, "eagle_config": {"mask_token_id": 4}}
    assert _vllm_v2(cfg) == 3
    codes = {d.code for d in _plan("peagle", cfg).errors}
    assert not codes & {"SRG673", "SRG682"}
    too_big = {**BASE, "mask_token_id": 10_000, "eagle_config": {"mask_token_id": 4}}
    assert "SRG673" in {d.code for d in _plan("peagle", too_big).errors}
