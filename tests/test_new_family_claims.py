"""Issue 42 class 2: `new` and the draft-model recipe accept heads of other families.

- The draft-model recipe refuses a config vLLM's speculative registry assigns to another family (its
  architecture is a key of `_SPECULATIVE_DECODING_MODELS`, surgery/data/vllm_methods.yaml) or that carries
  EAGLE-3 markers: SRG683. A plain small model still validates.
- A SpecForge Domino head (`dflash_config.projector_type: domino`) is no DFlash draft vLLM 0.32 builds: SRG684.
- `new` never falls back to draft-model: it fails (exit 1) naming the closest family recipe and the one
  thing blocking it, with at most 3 candidates and no long model-type lists; fitting family heads get no
  "also fits: draft-model".
The heads are SpecForge's own templates (tests/data/block_drafts/README.md has their commits).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from testpaths import CONFIGS, ROOT  # noqa: E402

BLOCK = ROOT / "tests" / "data" / "block_drafts"
PAIRS = ROOT / "surgery" / "data" / "pairs"
QWEN3_8B = CONFIGS / "Qwen3-8B.json"


def _peagle_without_mask(tmp_path) -> Path:
    cfg = json.loads((BLOCK / "specforge-qwen3-8b-peagle.json").read_text())
    cfg.pop("dflash_config")  # SpecForge's template as published: no mask token
    p = tmp_path / "peagle.json"
    p.write_text(json.dumps(cfg))
    return p


def _heads(tmp_path) -> dict[str, Path]:
    return {"dspark": BLOCK / "specforge-qwen3-8b-dspark.json", "domino": BLOCK / "specforge-qwen3-8b-domino.json",
            "dflash": BLOCK / "specforge-qwen3-8b-dflash.json", "peagle": _peagle_without_mask(tmp_path)}


# head -> (closest family recipe, the code blocking it when it is the only thing)
CLOSEST = {"dspark": ("dspark", "SRG681"), "domino": ("dflash", "SRG684"), "dflash": ("dflash", None),
           "peagle": ("peagle", "SRG673")}


@pytest.mark.parametrize("head", sorted(CLOSEST))
def test_draft_model_refuses_a_head_of_another_family(run_cli, tmp_path, head):
    rc, out, err = run_cli("validate", "draft-model", "--target", QWEN3_8B, "--draft", _heads(tmp_path)[head], "--json")
    found = [d for d in json.loads(out)["diagnostics"] if d["code"] == "SRG683"]
    assert rc == 1 and [d["severity"] for d in found] == ["error"]


def test_draft_model_still_serves_a_standalone_small_model(run_cli):
    rc, out, _ = run_cli("validate", "draft-model", "--target", CONFIGS / "Llama-3.1-8B-Instruct.json",
                         "--draft", CONFIGS / "Llama-3.2-1B-Instruct.json", "--json")
    assert rc == 0 and "SRG683" not in [d["code"] for d in json.loads(out)["diagnostics"]]


def test_eagle3_markers_are_another_family_too(run_cli):
    rc, out, _ = run_cli("validate", "draft-model", "--target", CONFIGS / "Llama-3.1-8B-Instruct.json",
                         "--draft", CONFIGS / "EAGLE3-LLaMA3.1-Instruct-8B.json", "--json")
    assert rc == 1 and "SRG683" in [d["code"] for d in json.loads(out)["diagnostics"]]


def test_a_domino_head_is_not_a_dflash_draft(run_cli):
    rc, out, _ = run_cli("validate", "dflash", "--target", QWEN3_8B, "--draft", BLOCK / "specforge-qwen3-8b-domino.json",
                         "--json")
    found = [d for d in json.loads(out)["diagnostics"] if d["code"] == "SRG684"]
    assert rc == 1 and found and "'domino'" in found[0]["message"]


@pytest.mark.parametrize("head", sorted(CLOSEST))
def test_new_reports_the_closest_family_recipe_and_exits_1(run_cli, tmp_path, head):
    rc, out, err = run_cli("new", "--target", QWEN3_8B, "--draft", _heads(tmp_path)[head])
    assert rc == 1 and "Started by" not in out
    text = out + err
    recipe, code = CLOSEST[head]
    assert f"closest: {recipe}" in text
    if code:
        assert f"blocked by one thing: {code}" in text
    listed = [line for line in text.splitlines() if line.startswith("      ")]
    assert 1 <= len(listed) <= 3 and listed[0].strip().startswith(f"{recipe}:")
    assert "qwen3_next, qwen2" not in text  # no recipe's ~60 model types
    rc, out, _ = run_cli("new", "--target", QWEN3_8B, "--draft", _heads(tmp_path)[head], "--json")
    data = json.loads(out)
    assert rc == 1 and data["ok"] is False and data["recipe"] is None


@pytest.mark.parametrize("family", ["dflash", "dspark", "peagle", "eagle3"])
def test_a_fitting_family_head_is_not_also_a_standalone_draft(run_cli, family):
    rc, out, _ = run_cli("new", "--target", PAIRS / "llama-target", "--draft", PAIRS / family / "draft", "--json")
    data = json.loads(out)
    assert rc == 0 and data["recipe"] == family and "draft-model" not in data["alternatives"]
