"""Coverage of vLLM's draft families (issue 18), with vLLM's own code as the oracle.

- every model type / architecture vLLM 0.32's `SpeculativeConfig.hf_config_override` turns into an
  MTP draft (found from vLLM's source and behaviour, tests/vllm_mtp_oracle.py) is covered by a shipped
  recipe or listed, with a reason, in surgery/data/unsupported.yaml; the generated
  surgery/data/vllm_mtp_rewrites.yaml (what `surgery recipes` reads without importing vLLM) matches;
- per family config (tests/data/configs/<family>/, reconstructed; see each file's `_source`): vLLM's
  rewritten draft model type, its n_predict, the layer indices of the MTP module it would build and
  whether those layers own a `shared_head` equal our plan (the recipe `surgery new` picks, resolved by
  `surgery.resolve`);
- `surgery validate` passes on each family's config and fails with SRG336 once its MTP layers are
  removed (count field 0);
- the EAGLE-3 recipe's targets cover every architecture whose vLLM class is a `SupportsEagle3`.
"""
from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from testpaths import CONFIGS, ROOT  # noqa: E402

from surgery import Runtime, facts_from_config, load_recipe, resolve  # noqa: E402
from surgery.engine.coverage import rewrites, summary, triggers, unsupported  # noqa: E402
from surgery.facts import read_config  # noqa: E402
from surgery.new import choose  # noqa: E402
from surgery.resources import shipped_recipes  # noqa: E402

pytest.importorskip("torch")
vllm = pytest.importorskip("vllm")
import vllm_mtp_oracle as oracle  # noqa: E402

# every family config: the per-family folders plus the MTP configs of the first recipe library
ROOT_MTP_CONFIGS = ["DeepSeek-V3.json", "DeepSeek-V3.2-Exp.json", "GLM-4.5-Air.json", "MiMo-7B-RL.json",
                    "Qwen3-Next-80B-A3B-Instruct.json"]
FAMILY_CONFIGS = sorted(p for p in CONFIGS.glob("*/*.json") if p.parent.name != "gemma4") + \
    [CONFIGS / n for n in ROOT_MTP_CONFIGS]
COUNT_FIELDS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules")


def _id(path: Path) -> str:
    return str(path.relative_to(CONFIGS))


def _cfg(path: Path) -> dict:
    return read_config(path)[0]


def _recipes():
    return [load_recipe(p) for p in shipped_recipes()]


def _mtp_layer_plan(recipe_name: str, facts):
    plan = resolve(load_recipe(recipe_name), facts, facts, Runtime())
    layers = sorted(i for name, idx in plan.layer_sets.items() if name.startswith("mtp_layers") for i in idx)
    shared = sorted(o.layer for o in plan.ops("share_module") if o.role == "mtp_shared_head")
    return plan, layers, shared


# ------------------------------------------------------------------------------ what vLLM rewrites
def test_generated_rewrite_list_matches_installed_vllm():
    """surgery/data/vllm_mtp_rewrites.yaml (read by `surgery recipes`) is what the installed vLLM does;
    on failure rerun tools/gen_mtp_coverage.py."""
    sys.path.insert(0, str(ROOT / "tools"))
    import gen_mtp_coverage

    assert rewrites()["rewrites"] == gen_mtp_coverage.entries()
    assert rewrites()["engine"] == f"vllm {vllm.__version__}"


def test_every_mtp_model_type_of_vllm_is_reached():
    """Cross-check of the extraction: every MTP draft type vLLM knows (`MTPModelTypes`, bar the
    generic `mtp`) is produced by some rewrite found - no branch of hf_config_override was missed."""
    produced = {t[2] for t in oracle.rewrite_triggers()}
    # a draft type reachable only through a branch the generic probe cannot run shows up via the corpus
    produced |= {oracle.vllm_override(_cfg(p)).model_type for p in FAMILY_CONFIGS}
    produced |= {oracle.vllm_override(_cfg(CONFIGS / "gemma-4-E2B-it-assistant.json")).model_type}
    assert set(oracle.mtp_model_types()) - {"mtp"} - produced == set()


def test_every_rewritten_type_is_covered_or_listed_unsupported():
    ts = triggers(_recipes())
    assert len(ts) >= 30  # the extraction found vLLM's list (about thirty families), not nothing
    gaps = [t.value for t in ts if not t.covered_by and not t.unsupported_reason]
    assert gaps == [], f"rewritten by vLLM, no shipped recipe, not in surgery/data/unsupported.yaml: {gaps}"
    listed = {(u.get("model_type") or u.get("architecture")) for u in unsupported()}
    by_value = {t.value: t for t in ts}
    stale = sorted(v for v in listed if v not in by_value or by_value[v].covered_by)
    assert stale == [], f"unsupported.yaml lists what vLLM no longer rewrites or a recipe covers: {stale}"
    s = summary(_recipes())
    assert s["covered"] / s["rewritten"] >= 0.9
    assert s["model_types_covered"] / s["model_types_rewritten"] >= 0.9


def test_every_family_config_is_one_vllm_rewrites_and_every_trigger_has_a_config():
    """The configs exercise every rewrite: each trigger (model type or architecture) not listed as
    unsupported is carried by at least one family config, and each family config is rewritten."""
    mtp = set(oracle.mtp_model_types())
    carried = set()
    for path in FAMILY_CONFIGS:
        cfg = _cfg(path)
        assert oracle.vllm_override(cfg).model_type in mtp, _id(path)
        text = cfg.get("text_config") or {}
        carried |= {cfg.get("model_type"), text.get("model_type"), *(cfg.get("architectures") or [])}
    carried |= {"gemma4_assistant", "gemma4_unified_assistant"}  # tests/test_recipe_library.py (E2B assistant)
    missing = [t.value for t in triggers(_recipes()) if t.value not in carried and not t.unsupported_reason]
    assert missing == []


# ------------------------------------------------------------------------------ per family: vLLM vs plan
@pytest.mark.parametrize("path", FAMILY_CONFIGS, ids=_id)
def test_oracle_family_plan_matches_vllm(path):
    cfg = _cfg(path)
    theirs = oracle.vllm_mtp_layers(cfg)
    facts = facts_from_config(cfg, str(path))
    chosen = choose(facts, facts, Runtime(engine="vllm"))
    assert chosen.ok, [c.reasons[:1] for c in chosen.candidates if c.applies]
    recipe = load_recipe(chosen.chosen.name)
    # vLLM turns every MTP draft model type into method "mtp" (SpeculativeConfig.__post_init__)
    assert theirs["draft_model_type"] in oracle.mtp_model_types()
    assert recipe.engine["vllm"]["method"] == "mtp"
    plan, layers, shared = _mtp_layer_plan(recipe.name, facts)
    assert plan.ok, [d.render() for d in plan.errors]
    assert layers == theirs["layers"], (theirs["source"], theirs["layer_classes"])
    if theirs["n_predict"] is not None:  # Qwen3-Next: vLLM's override reads no count (the model defaults to 1)
        assert facts["num_mtp_layers_served"] == theirs["n_predict"]
    assert theirs["shared_head"] is not None, theirs["layer_classes"]
    assert shared == (layers if theirs["shared_head"] else [])


def test_oracle_gemma4_assistant_layers_match_vllm():
    """The Gemma 4 assistant (vLLM: gemma4_assistant -> gemma4_mtp): vLLM builds one MTP decoder layer
    per assistant layer; the plan maps each of them to a target KV producer."""
    target, draft = _cfg(CONFIGS / "gemma-4-E2B-it.json"), _cfg(CONFIGS / "gemma-4-E2B-it-assistant.json")
    theirs = oracle.vllm_mtp_layers(draft)
    assert theirs["draft_model_type"] == "gemma4_mtp" and theirs["n_predict"] == 1
    plan = resolve(load_recipe("gemma4-mtp"), facts_from_config(draft, "d"), facts_from_config(target, "t"),
                   Runtime(device="cuda"))
    assert plan.ok and [row.draft for row in plan.layer_maps["kv_source"]] == theirs["layers"]


# ------------------------------------------------------------------------------ validate / new on each family
def _without_mtp_layers(cfg: dict) -> dict:
    """The same config with its MTP layers removed: every MTP count field it could be read from set to 0."""
    out = copy.deepcopy(cfg)
    for level in (out, out.get("text_config")):
        if isinstance(level, dict):
            for key in COUNT_FIELDS:
                level[key] = 0
            if isinstance(level.get("mtp_config"), dict):
                level["mtp_config"]["num_nextn_predict_layers"] = 0
    return out


@pytest.mark.parametrize("path", FAMILY_CONFIGS, ids=_id)
def test_validate_passes_and_fails_without_mtp_layers(run_cli, tmp_path, path):
    facts = facts_from_config(_cfg(path), str(path))
    name = choose(facts, facts).chosen.name
    code, out, _ = run_cli("validate", name, "--target", path, "--draft", path)
    assert code == 0, out
    stripped = tmp_path / "config.json"
    stripped.write_text(json.dumps(_without_mtp_layers(_cfg(path))), encoding="utf-8")
    code, out, _ = run_cli("validate", name, "--target", stripped, "--draft", stripped, "--json")
    assert code == 1
    assert "SRG336" in {d["code"] for d in json.loads(out)["diagnostics"] if d["severity"] == "error"}


def _drop(cfg: dict, dotted: str) -> dict:
    out = copy.deepcopy(cfg)
    *path, last = dotted.split(".")
    node = out
    for key in path:
        node = node[key]
    node.pop(last)
    return out


def _set(cfg: dict, dotted: str, value) -> dict:
    out = copy.deepcopy(cfg)
    *path, last = dotted.split(".")
    node = out
    for key in path:
        node = node[key]
    node[last] = value
    return out


@pytest.mark.parametrize("config, change, code", [
    ("qwen4_exp/Qwen4-Exp.json", lambda c: _drop(c, "text_config.hc_count"), "SRG338"),
    ("nemotron_h/Nemotron-H-MTP.json", lambda c: _drop(c, "mtp_hybrid_override_pattern"), "SRG338"),
    ("nemotron_h/Nemotron-H-MTP.json", lambda c: _set(c, "num_nextn_predict_layers", 2), "SRG337"),
    ("dots3_note/Dots3-Note.json", lambda c: _drop(c, "layer_types"), "SRG338"),
    ("dots3_note/Dots3-Note.json", lambda c: _set(c, "mtp_layer_types", ["sliding_attention"] * 2), "SRG339"),
], ids=["qwen4-hc_count", "nemotron-pattern", "nemotron-2-steps", "dots3-layer_types", "dots3-mtp_layer_types"])
def test_oracle_family_config_checks_fail_where_vllm_fails(config, change, code):
    """Each family check refuses exactly a config vLLM's own code fails on (hf_config_override or the
    MTP predictor's construction, evaluated by the oracle), with its own code; the unchanged config
    passes both (test_oracle_family_plan_matches_vllm)."""
    cfg = change(_cfg(CONFIGS / config))
    with pytest.raises(Exception):  # noqa: B017 - vLLM raises ValueError / AttributeError / AssertionError
        oracle.vllm_mtp_layers(cfg)
    facts = facts_from_config(cfg, config)
    name = choose(facts_from_config(_cfg(CONFIGS / config), config), facts_from_config(_cfg(CONFIGS / config),
                                                                                        config)).chosen.name
    plan = resolve(load_recipe(name), facts, facts, Runtime())
    assert code in {d.code for d in plan.errors}


@pytest.mark.parametrize("config, recipe", [
    ("qwen3_5/Qwen3.5.json", "mtp"), ("kimi_k3/Kimi-K3.json", "deepseek-mtp"),
    ("mimo_v2/MiMo-V2-Flash.json", "mimo-v2-mtp"), ("nemotron_h/Nemotron-H-Omni-MTP.json", "mtp"),
    ("bailing_hybrid/Ling-3-VL.json", "deepseek-mtp"), ("DeepSeek-V3.json", "deepseek-mtp")])
def test_surgery_new_picks_the_family_recipe(run_cli, config, recipe):
    code, out, _ = run_cli("new", "--target", CONFIGS / config, "--draft", CONFIGS / config, "--json")
    assert code == 0
    assert json.loads(out)["recipe"] == recipe


def test_surgery_recipes_shows_coverage(run_cli):
    code, out, _ = run_cli("recipes", "--json")
    assert code == 0
    data = json.loads(out)
    cov = data["coverage"]
    assert cov["covered"] / cov["rewritten"] >= 0.9 and cov["engine"] == f"vllm {vllm.__version__}"
    covered_types = {t for r in data["recipes"] for t in r["covers"]["target_model_types"] + r["covers"]["draft_model_types"]}
    for t in cov["triggers"]:
        if t["kind"] == "model_type" and t["covered_by"]:
            assert t["value"] in covered_types
    listed = {u.get("model_type") or u.get("architecture"): u["reason"] for u in unsupported()}
    assert {u["value"]: u["unsupported"] for u in data["unsupported"]} == listed
    code, text, _ = run_cli("recipes", "--verbose")
    assert code == 0
    for value, reason in listed.items():
        assert f"{value}: {reason}" in text
    assert f"{cov['covered']} of {cov['rewritten']}" in text
    gap = data["eagle3_architectures_without_model_type"]
    assert gap == _eagle3_unmapped() and all(a in text for a in gap["architectures"])


# ------------------------------------------------------------------------------ EAGLE-3 targets
def _eagle3_unmapped() -> dict:
    import yaml

    data = yaml.safe_load((ROOT / "surgery" / "data" / "unsupported.yaml").read_text(encoding="utf-8"))
    return data["eagle3_architectures_without_model_type"]


def _config_model_types_by_architecture() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for path in CONFIGS.rglob("*.json"):
        cfg = json.loads(path.read_text(encoding="utf-8"))
        if "not known offline" in str(cfg.get("_source", "")):
            continue  # a reconstructed config whose model type is a guess proves nothing
        text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else {}
        for arch in cfg.get("architectures") or []:
            out.setdefault(arch, set()).update(t for t in (cfg.get("model_type"), text.get("model_type")) if t)
    return out


def test_eagle3_targets_cover_every_supports_eagle3_architecture():
    """The EAGLE-family recipes select targets by the architecture vLLM builds (issue 42): their target
    architecture lists are exactly vLLM's SupportsEagle3 classes; the model_type fallback lists every model
    type known for them."""
    archs = oracle.eagle3_target_architectures()
    assert "LlamaForCausalLM" in archs and len(archs) > 20  # the extraction works
    for name in ("eagle3", "peagle", "dflash", "dspark"):
        assert tuple(sorted(load_recipe(name).applies_to["target"]["architectures"])) == archs, name
    mapping = oracle.model_types_of_architecture()
    for arch, types in _config_model_types_by_architecture().items():
        mapping.setdefault(arch, set()).update(types)
    targets = set(load_recipe("eagle3").applies_to["target"]["model_type"])
    gaps = [a for a in archs if mapping.get(a) and not (mapping[a] & targets)]
    assert gaps == [], f"SupportsEagle3 architectures whose known model types recipes/eagle3.yaml does not list: {gaps}"
    assert _eagle3_unmapped()["architectures"] == []
