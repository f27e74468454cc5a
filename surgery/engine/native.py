"""What an engine release wires by itself, with no recipe, where a recipe step plans the same wiring
(issue 65: SRG325 said SGLang "cannot perform" Gemma 4's KV sharing, which SGLang's own FROZEN_KV_MTP does
on the target's pool).

Each rule is data (surgery/data/sglang_limits.yaml `native`), applied to a release only where the release's
wheel holds the code (surgery/data/releases/sglang.json `start.limits`). No engine import.
"""
from __future__ import annotations

from ..resources import load_data
from .releases import known, release


def _native() -> dict:
    return load_data("data/sglang_limits.yaml").get("native") or {}


def sglang_kv_map(version: str | None, draft, target) -> tuple[dict[int, int], str, str] | None:
    """(assistant layer -> the target layer whose KV it reads, the release judged, where its code holds it)
    as SGLang's FROZEN_KV_MTP binds them (models/gemma4_mtp.py build_frozen_kv_mtp_context), or None where
    the release has no such wiring or the pair is not one it applies to."""
    rule = _native().get("frozen_kv_mtp")
    if rule is None or draft.model_type not in rule["draft_model_types"]:
        return None
    rel, _ = release("sglang", version or known("sglang")[-1])
    where = ((rel.facts.get("start") or {}).get("limits") or {}).get("frozen_kv_mtp") if rel is not None else None
    if not where:
        return None
    n = target.num_layers
    if n < 2:
        return None
    owners = target.own_kv_sources()
    by_type = {target.layers[i].layer_type: owners.get(i, i) for i in (n - 2, n - 1)}
    out = {}
    for layer in draft.layers:
        if layer.layer_type not in by_type:
            return None  # SGLang refuses such an assistant ("expected one of ..."): not this rule's to say
        out[layer.index] = by_type[layer.layer_type]
    return out, rel.asked, where
