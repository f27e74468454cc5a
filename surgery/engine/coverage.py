"""Which draft families the shipped recipes cover, against what vLLM turns into MTP drafts.

Data only, no engine import (config-only commands never import vllm): `data/vllm_mtp_rewrites.yaml`
is generated from the installed vLLM by tools/gen_mtp_coverage.py (and checked against it by
tests/test_oracle_mtp_coverage.py); `data/unsupported.yaml` lists, with a reason, what no recipe
covers on purpose. A rewritten model type is covered when a shipped recipe lists it (target side,
or draft side for separate draft checkpoints such as gemma4_assistant); an architecture vLLM keys on
is covered when a recipe lists it, or lists the model type of a config carrying it.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

from .cards import card

_DATA = Path(__file__).parent.parent / "data"


def _load(name: str) -> dict:
    with open(_DATA / name, encoding="utf-8") as fh:
        return yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}


@lru_cache(maxsize=1)
def rewrites() -> dict:
    return _load("vllm_mtp_rewrites.yaml")


@lru_cache(maxsize=1)
def unsupported() -> list[dict]:
    return list(_load("unsupported.yaml").get("unsupported") or [])


@lru_cache(maxsize=1)
def vllm_methods() -> dict:
    return _load("vllm_methods.yaml")


def unsupported_block_architectures() -> dict[str, str]:
    """block-drafter architecture -> why no shipped recipe lists it (unsupported.yaml `block_draft_architectures`)."""
    return {m["name"]: m["reason"] for m in (_load("unsupported.yaml").get("block_draft_architectures") or [])}


def unsupported_draft_architectures() -> dict[str, str]:
    """named-draft architecture -> why no recipe of its method lists it (unsupported.yaml
    `draft_architectures`, then `block_draft_architectures` for the DFlash-family classes)."""
    data = _load("unsupported.yaml")
    return {m["name"]: m["reason"] for key in ("block_draft_architectures", "draft_architectures")
            for m in (data.get(key) or [])}


def draft_architecture_coverage(recipes) -> list[dict]:
    """Every architecture vLLM's speculative registry loads with a named-draft method (vllm_methods.yaml
    `draft_architectures`, issue 35): the recipes of that method listing it, or the reason none does."""
    reasons = unsupported_draft_architectures()
    runs = [(r.name, _recipe_methods(r)[0], set(r.applies_to["draft"].get("architectures") or ())) for r in recipes]
    out = []
    for a in vllm_methods().get("draft_architectures") or []:
        covered = [name for name, accepted, listed in runs if a["method"] in accepted and a["architecture"] in listed]
        out.append({**a, "covered_by": covered, "unsupported": None if covered else reasons.get(a["architecture"])})
    return out


def unsupported_methods() -> dict[str, str]:
    """method or speculators algorithm -> why no shipped recipe covers it (unsupported.yaml `methods`)."""
    return {m["name"]: m["reason"] for m in (_load("unsupported.yaml").get("methods") or [])}


@lru_cache(maxsize=1)
def eagle3_without_model_type() -> dict:
    """SupportsEagle3 architectures recipes/eagle3.yaml cannot select (model type unknown), with the reason."""
    return dict(_load("unsupported.yaml").get("eagle3_architectures_without_model_type") or {})


@dataclass(frozen=True)
class Trigger:
    kind: str  # model_type | architecture
    value: str
    draft_model_type: str
    model_types: tuple[str, ...]  # for an architecture: model types of configs carrying it
    covered_by: tuple[str, ...]  # recipe names
    unsupported_reason: str | None

    def to_dict(self) -> dict:
        return {"kind": self.kind, "value": self.value, "draft_model_type": self.draft_model_type,
                "model_types": list(self.model_types), "covered_by": list(self.covered_by),
                "unsupported": self.unsupported_reason}


# recipes for other speculative methods (an EAGLE head, a standalone draft) do not cover an MTP rewrite
# even where they list the same target model type
NOT_MTP_METHODS = ("eagle", "eagle3", "draft_model", "dflash", "dspark")


def recipe_selectors(recipes) -> list[tuple[str, dict, dict]]:
    return [(r.name, r.applies_to["target"], r.applies_to["draft"]) for r in recipes
            if (r.engine.get("vllm") or {}).get("method") not in NOT_MTP_METHODS]


def triggers(recipes) -> list[Trigger]:
    """Every model type / architecture vLLM rewrites into an MTP draft, with the recipes covering it."""
    sels = recipe_selectors(recipes)
    reasons = {(("model_type" if "model_type" in u else "architecture"), u.get("model_type") or u.get("architecture")):
               u["reason"] for u in unsupported()}
    out = []
    for entry in rewrites().get("rewrites") or []:
        kind = "model_type" if "model_type" in entry else "architecture"
        value = entry[kind]
        mts = tuple(entry.get("model_types") or ())
        covered = []
        for name, target, draft in sels:
            if kind == "model_type":
                hit = value in (target.get("model_type") or ()) or value in (draft.get("model_type") or ())
            else:
                hit = value in (target.get("architectures") or ()) or (
                    not target.get("architectures") and bool(set(mts) & set(target.get("model_type") or ())))
            if hit:
                covered.append(name)
        out.append(Trigger(kind, value, entry.get("draft_model_type", "?"), mts, tuple(covered),
                           reasons.get((kind, value))))
    return out


def summary(recipes) -> dict:
    ts = triggers(recipes)
    covered = [t for t in ts if t.covered_by]
    model_types = [t for t in ts if t.kind == "model_type"]
    return {"engine": rewrites().get("engine"), "source": rewrites().get("source"),
            "rewritten": len(ts), "covered": len(covered),
            "percent": round(100.0 * len(covered) / len(ts), 1) if ts else 100.0,
            "model_types_rewritten": len(model_types),
            "model_types_covered": sum(1 for t in model_types if t.covered_by),
            "unsupported": [t.to_dict() for t in ts if not t.covered_by],
            "triggers": [t.to_dict() for t in ts]}


# ------------------------------------------------------------------ speculative methods (issue 25)
def _recipe_methods(recipe) -> tuple[set[str], bool]:
    """The vLLM methods (after vLLM's normalisation, engine card `methods`) a recipe runs, and whether
    it drafts in parallel (`engine.vllm.parallel_drafting`)."""
    hints = recipe.engine.get("vllm") or {}
    hint = hints.get("method")
    accepted = set(card("vllm").methods.get(hint, [hint])) if hint else set()
    return accepted, bool(hints.get("parallel_drafting", False))


def method_coverage(recipes) -> dict:
    """Every method vLLM's SpeculativeConfig accepts that loads a draft model, and every speculators
    algorithm it reads, with the shipped recipes covering it or the reason none does. A method is
    covered by a recipe whose `engine.vllm.method` runs it; an algorithm by one that also drafts in
    parallel when the algorithm does and lists one of the draft architectures vLLM builds for it."""
    data, reasons = vllm_methods(), unsupported_methods()
    runs = [(r.name, *_recipe_methods(r), set(r.applies_to["draft"].get("architectures") or ())) for r in recipes]
    methods = []
    for m in data.get("methods") or []:
        if m["draft"] == "none":
            continue
        covered = [name for name, accepted, _par, _a in runs if m["method"] in accepted]
        methods.append({"method": m["method"], "draft": m["draft"], "aliases": list(m.get("aliases") or []),
                        "covered_by": covered, "unsupported": None if covered else reasons.get(m["method"])})
    algos = []
    for a in data.get("speculators_algorithms") or []:
        covered = [name for name, accepted, par, archs in runs
                   if a["method"] in accepted and (par or not a["parallel_drafting"])
                   and archs & set(a["architectures"])]
        algos.append({"speculators_model_type": a["speculators_model_type"], "method": a["method"],
                      "parallel_drafting": a["parallel_drafting"], "architectures": list(a["architectures"]),
                      "covered_by": covered,
                      "unsupported": None if covered else reasons.get(a["speculators_model_type"])})
    entries = methods + algos
    block_reasons = unsupported_block_architectures()
    archs = []
    for a in data.get("block_draft_architectures") or []:
        covered = [name for name, _acc, _par, listed in runs if a["architecture"] in listed]
        archs.append({**a, "covered_by": covered,
                      "unsupported": None if covered else block_reasons.get(a["architecture"])})
    return {"engine": data.get("engine"), "source": data.get("source"),
            "without_draft_model": [m["method"] for m in data.get("methods") or [] if m["draft"] == "none"],
            "methods": methods, "speculators_algorithms": algos, "block_draft_architectures": archs,
            "covered": sum(1 for e in entries if e["covered_by"]), "total": len(entries),
            "block_architectures_covered": sum(1 for a in archs if a["covered_by"]),
            "draft_architectures": draft_architecture_coverage(recipes)}
