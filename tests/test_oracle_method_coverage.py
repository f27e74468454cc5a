"""Coverage of vLLM's speculative methods (issue 25), with vLLM's own code as the oracle.

Every method vLLM 0.32's `SpeculativeConfig` accepts (its `SpeculativeMethod` Literal, as
`__post_init__` normalises it) that loads a draft model, and every speculators algorithm vLLM reads
(algos.py `SUPPORTED_SPECULATORS_TYPES`, served as `build_vllm_speculative_config` says), is covered
by a shipped recipe or listed with a reason in surgery/data/unsupported.yaml (`methods`); the list
comes from tests/vllm_method_oracle.py, never typed in here. The generated
surgery/data/vllm_methods.yaml (what `surgery recipes` reads without importing vLLM) matches.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from testpaths import ROOT  # noqa: E402

from surgery import load_recipe  # noqa: E402
from surgery.engine.coverage import method_coverage, unsupported_methods, vllm_methods  # noqa: E402
from surgery.resources import shipped_recipes  # noqa: E402

pytest.importorskip("torch")
vllm = pytest.importorskip("vllm")
import vllm_method_oracle as oracle  # noqa: E402


def _recipes():
    return [load_recipe(p) for p in shipped_recipes()]


def test_generated_method_list_matches_installed_vllm():
    """On failure rerun tools/gen_method_coverage.py."""
    sys.path.insert(0, str(ROOT / "tools"))
    import gen_method_coverage

    data = vllm_methods()
    assert data["engine"] == f"vllm {vllm.__version__}"
    assert {k: data[k] for k in ("methods", "speculators_algorithms", "block_draft_architectures",
                                                  "draft_architectures")} == \
        gen_method_coverage.data()


def test_the_extraction_finds_vllms_methods_and_where_their_drafts_come_from():
    """Sanity of the oracle itself: the families of issue 25 are there, MTP aliases fold into mtp,
    and the draft source is observed (a named draft, the target checkpoint, or none)."""
    by = {m["method"]: m for m in oracle.methods()}
    assert {"dflash", "dspark", "eagle3", "mtp", "draft_model"} <= set(by)
    assert by["dflash"]["draft"] == by["eagle3"]["draft"] == by["draft_model"]["draft"] == "named"
    assert by["mtp"]["draft"] == by["dspark"]["draft"] == "target_checkpoint"
    assert by["ngram"]["draft"] == "none" and "deepseek_mtp" in by["mtp"]["aliases"]
    algos = {a["speculators_model_type"]: a for a in oracle.speculators_algorithms()}
    assert algos["peagle"]["method"] == "eagle3" and algos["peagle"]["parallel_drafting"] is True
    assert "DFlashDraftModel" in algos["dflash"]["architectures"]


def test_every_draft_loading_method_is_covered_or_listed_unsupported():
    cov = method_coverage(_recipes())
    entries = cov["methods"] + cov["speculators_algorithms"]
    assert len(cov["methods"]) >= 8  # the extraction found vLLM's list, not nothing
    gaps = [e.get("speculators_model_type") or e["method"] for e in entries if not e["covered_by"] and not e["unsupported"]]
    assert gaps == [], f"vLLM accepts these, no shipped recipe covers them, unsupported.yaml does not list them: {gaps}"
    names = {e.get("speculators_model_type") or e["method"]: e for e in entries}
    stale = sorted(n for n in unsupported_methods() if n not in names or names[n]["covered_by"])
    assert stale == [], f"unsupported.yaml `methods` lists what vLLM no longer accepts or a recipe covers: {stale}"
    # the draft-less methods are not counted at all (nothing to wire)
    assert not set(cov["without_draft_model"]) & set(names)


def test_issue_25_families_have_recipes():
    cov = method_coverage(_recipes())
    methods = {m["method"]: m["covered_by"] for m in cov["methods"]}
    algos = {a["speculators_model_type"]: a["covered_by"] for a in cov["speculators_algorithms"]}
    assert methods["dflash"] == ["dflash"] and methods["dspark"] == ["dspark"]
    assert algos["peagle"] == ["peagle"] and algos["dflash"] == ["dflash"] and algos["dspark"] == ["dspark"]
    for name in ("dflash", "dspark", "peagle"):  # each recipe's method is one vLLM accepts
        hint = load_recipe(name).engine["vllm"]["method"]
        assert hint in {m["method"] for m in oracle.methods()}


def test_surgery_recipes_shows_method_coverage(run_cli):
    code, out, _ = run_cli("recipes", "--json")
    assert code == 0
    cov = json.loads(out)["method_coverage"]
    assert cov == method_coverage(_recipes())
    code, text, _ = run_cli("recipes", "--verbose")
    assert code == 0
    assert f"{cov['covered']} of {cov['total']} methods / speculators algorithms" in text
    assert "  dflash: dflash\n" in text and "  dspark: dspark\n" in text
    assert "speculators peagle (method eagle3, parallel drafting): peagle" in text
    for name, reason in unsupported_methods().items():
        assert f"{name}: not covered: {reason}" in text or f"{name} (method" in text


def test_every_block_drafter_architecture_is_listed_by_a_recipe_or_unsupported():
    """Every DFlash / DSpark / P-EAGLE class vLLM's registry serves (tests/vllm_method_oracle.py reads
    `_SPECULATIVE_DECODING_MODELS`) is in a recipe's draft architectures or listed with a reason."""
    from surgery.engine.coverage import unsupported_block_architectures

    archs = method_coverage(_recipes())["block_draft_architectures"]
    names = {a["architecture"] for a in archs}
    assert {"DFlashDraftModel", "Qwen3DSparkModel", "PeagleLlamaForCausalLM"} <= names and len(names) >= 10
    gaps = [a["architecture"] for a in archs if not a["covered_by"] and not a["unsupported"]]
    assert gaps == [], f"vLLM block drafters neither in a recipe nor in unsupported.yaml: {gaps}"
    listed = unsupported_block_architectures()
    covered = {a["architecture"] for a in archs if a["covered_by"]}
    assert sorted(n for n in listed if n not in names or n in covered) == []  # no stale entry


def test_surgery_recipes_shows_block_drafter_architectures(run_cli):
    code, text, _ = run_cli("recipes", "--verbose")
    assert code == 0
    assert "  DFlashDraftModel (qwen3_dflash): dflash\n" in text
    assert "  K3DSparkModel (vllm.models.kimi_k3.nvidia.dspark_mla): not covered: " in text
