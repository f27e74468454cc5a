"""Draft architectures from vLLM's own registry (issue 35), with vLLM's code as the oracle:

- every architecture vLLM 0.32's speculative registry (`_SPECULATIVE_DECODING_MODELS`) loads with a
  named-draft method (the names `EAGLEConfig(method)` keeps, found by tests/vllm_method_oracle.py, never
  typed in here) is listed by a recipe of that method or in surgery/data/unsupported.yaml with a reason;
  a newer vLLM registering one that no recipe names fails here;
- the renaming rule surgery applies to a draft's `architectures` (the vLLM card's
  `draft_architecture_rewrite`, surgery/engine/servedarch.py) gives what EAGLEConfig gives, for every
  registry name, every plain name it renames into one, and probe names.
The generated list (surgery/data/vllm_methods.yaml `draft_architectures`) is compared with the installed
vLLM by tests/test_oracle_method_coverage.py.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from surgery import load_recipe  # noqa: E402
from surgery.engine.coverage import draft_architecture_coverage, unsupported_draft_architectures  # noqa: E402
from surgery.resources import shipped_recipes  # noqa: E402
from surgery.engine.servedarch import rewrite_rules, served_architecture  # noqa: E402

pytest.importorskip("torch")
pytest.importorskip("vllm")
import vllm_method_oracle as oracle  # noqa: E402


def _coverage():
    return draft_architecture_coverage([load_recipe(p) for p in shipped_recipes()])


def test_the_card_rule_is_eagle_configs():
    from vllm.model_executor.models.registry import _SPECULATIVE_DECODING_MODELS

    assert sorted(rewrite_rules()) == sorted(oracle.eagle_config_methods())
    names = set(_SPECULATIVE_DECODING_MODELS) | {w for a in oracle.draft_architectures() for w in a["written_as"]}
    names |= {"LlamaForCausalLM", "Qwen3ForCausalLM", "DeepseekV3ForCausalLM", "FooEagle3", "FooDFlash", oracle.PROBE_ARCH}
    wrong = [(m, n, served_architecture(m, n), oracle.served_architecture(m, n))
             for m in rewrite_rules() for n in sorted(names)
             if served_architecture(m, n) != oracle.served_architecture(m, n)]
    assert wrong == []


def test_every_registry_draft_architecture_is_named_by_a_recipe_or_unsupported():
    cov = _coverage()
    assert len(cov) >= 15  # the extraction found vLLM's registry, not nothing
    gaps = [f"{a['architecture']} (method {a['method']})" for a in cov if not a["covered_by"] and not a["unsupported"]]
    assert gaps == [], f"vLLM's registry loads these, no recipe of that method names them, unsupported.yaml does not list them: {gaps}"
    names = {a["architecture"]: a for a in cov}
    import yaml

    listed = yaml.safe_load((Path(__file__).resolve().parents[1] / "surgery" / "data" / "unsupported.yaml").read_text())
    stale = sorted(m["name"] for m in listed.get("draft_architectures") or []
                   if m["name"] not in names or names[m["name"]]["covered_by"])
    assert stale == [], f"unsupported.yaml `draft_architectures` lists what vLLM no longer loads or a recipe names: {stale}"
    assert set(unsupported_draft_architectures()) >= {m["name"] for m in listed["draft_architectures"]}


def test_the_mla_eagle3_heads_are_served_by_the_eagle3_recipe():
    by = {a["architecture"]: a for a in _coverage()}
    for arch in ("Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM"):
        assert by[arch]["method"] == "eagle3" and by[arch]["module"] == "deepseek_eagle3"
        assert "eagle3" in by[arch]["covered_by"]
    assert "LlamaForCausalLM" in by["Eagle3LlamaForCausalLM"]["written_as"]


def test_templates_vllm_does_not_serve_are_listed_and_still_unserved():
    """Domino (SpecForge / TorchSpec templates): vLLM 0.32 has no class, method or speculators algorithm
    for it; unsupported.yaml says so. A vLLM that registers it fails this test: then write the recipe."""
    import yaml
    from vllm.model_executor.models.registry import _SPECULATIVE_DECODING_MODELS
    from vllm.transformers_utils.configs.speculators.algos import SUPPORTED_SPECULATORS_TYPES

    listed = yaml.safe_load((Path(__file__).resolve().parents[1] / "surgery" / "data" / "unsupported.yaml").read_text())
    names = {m["name"] for m in listed["architectures_not_in_engine"]}
    assert "DominoDraftModel" in names
    assert not names & set(_SPECULATIVE_DECODING_MODELS)
    assert "domino" not in SUPPORTED_SPECULATORS_TYPES and "domino" not in oracle.accepted_methods()
