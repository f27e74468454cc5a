"""Config checks for failures the field keeps reporting (surgery/data/field_checks.yaml lists each with
its public report; codes SRG640-SRG644). They run after the resolver on the resolved plan, from
config.json alone (no torch):

- EAGLE-3 aux layer ids absent: the engine default (2, L//2, L-3) is used, named in the warning;
- draft max_position_embeddings below the serving length;
- the target's quantization config applied to an unquantized draft;
- the speculative method the engine is told does not fit the draft (EAGLE-3 head as `eagle`, a Gemma 4
  assistant as `draft_model`);
- the share-or-not decision taken per tensor-parallel rank.
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from ..text.diagnostics import Diagnostic, INFO, Location, diag
from .head import head_checks
from .inherit import inheritance_checks
from .tokenizer_identity import tokenizer_check

_EAGLE_METHODS = ("eagle", "eagle3")


@lru_cache(maxsize=1)
def field_data() -> dict:
    with open(Path(__file__).resolve().parent.parent / "data" / "field_checks.yaml", encoding="utf-8") as fh:
        return yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def normalise_method(method: str | None) -> str:
    """The method vLLM will run: no method -> draft_model, any `*_mtp` -> mtp (config/speculative.py)."""
    if not method:
        return "draft_model"
    return "mtp" if method.endswith("_mtp") else method


def _quantized(raw: dict) -> bool:
    text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else {}
    return bool(raw.get("quantization_config") or text.get("quantization_config"))


def _same_config(draft, target) -> bool:
    return draft.source == target.source or draft.raw == target.raw


def _matches(sel: dict, draft, target) -> bool:
    if "model_type" in sel and draft.model_type not in sel["model_type"] and draft.text_model_type not in sel["model_type"]:
        return False
    if "architectures" in sel and not set(draft.architectures) & set(sel["architectures"]):
        return False
    if sel.get("same_config_as_target") and not _same_config(draft, target):
        return False
    return True


def expected_methods(recipe, draft, target) -> tuple[list[str], str]:
    """The methods the draft may be served with, and why (data table, then the recipe's hint)."""
    for row in field_data()["methods"]:
        if _matches(row["draft"], draft, target):
            return list(row["accept"]), row["because"]
    hint = (getattr(recipe, "engine", {}) or {}).get("vllm", {}).get("method")
    if hint:
        return [hint], f"recipe {recipe.name} is served with method {hint}"
    return [], ""


def field_checks(plan, recipe, draft, target, *, method: str | None = None, method_given: bool = False,
                 max_model_len: int | None = None, own_roles: dict[str, bool] | None = None,
                 serving_flags: dict | None = None) -> list[Diagnostic]:
    """Findings for a resolved plan. `method_given`: the user named a method (or left it unset in a live
    engine, which means draft_model); `own_roles`: from the weights checks, per role "absent", "identical"
    or "differs" (the draft's own vs the target's; missing: unknown); `serving`: the other serving flags
    the second catalogue reads (hf_overrides, num_speculative_tokens, draft_kv_cache_dtype)."""
    out: list[Diagnostic] = []
    accept, because = expected_methods(recipe, draft, target) if method_given else ([], "")

    # EAGLE-3 aux ids absent -> engine default
    for op in plan.ops("capture_hidden_states"):
        # a DFlash / DSpark draft names its layers in its own numbering (recipes/dflash.yaml offset 1)
        if draft["eagle_aux_hidden_state_layer_ids"] is None and draft["block_draft_target_layer_ids"] is None:
            ids = ", ".join(map(str, op.layers or ()))
            L = target.num_layers
            # a note (issue 53): (2, L//2, L-3) is also every known producer's default in the engine's numbering
            # (SafeAILab, SpecForge, ModelOpt, speculators: ../shared/FIELD.md), so a head without ids is
            # served the layers it was most likely trained on; the config cannot tell, a measurement can
            out.append(diag("SRG640", f"the head's config has no eagle_aux_hidden_state_layer_ids: the engine uses its "
                            f"default (2, L//2, L-3) = ({ids}) for the target's {L} layers, which is also every known "
                            f"trainer's default; a head trained on other layers would collapse silently "
                            f"(vllm#50170): the config cannot tell, acceptance can",
                            Location(draft.source, key_path="eagle_aux_hidden_state_layer_ids"), severity=INFO))

    # max positions below the serving length
    serving = max_model_len or target["max_position_embeddings"]
    dmax = draft["max_position_embeddings"]
    served = normalise_method(method) if method_given else (recipe.engine.get("vllm", {}) or {}).get("method")
    if isinstance(dmax, int) and isinstance(serving, int) and dmax < serving:
        eagle = served in _EAGLE_METHODS and plan.runtime.engine == "vllm"
        out.append(diag("SRG641", f"draft max_position_embeddings {dmax} < serving length {serving}"
                        + (" (vLLM raises it to max_model_len for EAGLE drafts' RoPE; its drafting length is SRG645's check)" if eagle
                           else ": the draft's RoPE is clamped / extrapolated past it"),
                        Location(draft.source, key_path=draft.key_prefix + "max_position_embeddings"),
                        severity=INFO if eagle else None))

    # target quantization inherited by an unquantized draft
    if _quantized(target.raw) and not _quantized(draft.raw) and not _same_config(draft, target):
        out.append(diag("SRG642", "the target is quantized (quantization_config) and the draft is not: the draft must "
                        "be built without the target's quant config",
                        Location(target.source, key_path="quantization_config")))

    # method mismatch
    if method_given:
        got = normalise_method(method)
        if accept and got not in accept:
            shown = method if method else "none (vLLM runs it as draft_model)"
            out.append(diag("SRG643", f"served with method {shown}, but this draft needs {' or '.join(accept)}: "
                            f"{because}", Location(draft.source, key_path="architectures")))

    # share-or-not per tensor-parallel rank
    if plan.runtime.tp_size > 1:
        for op in plan.ops("share_module"):
            if op.if_draft_has_own != "share_if_identical" or op.layer is not None:
                continue
            known = (own_roles or {}).get(op.role)
            if known in (False, "absent", "identical"):
                continue  # the draft brings none, or one equal to the target's: every rank decides alike
            # vLLM decides per rank (llm_base_proposer._maybe_share_embeddings: torch.equal on the local shards), so
            # ranks disagree only when the draft's own tensor equals the target's on some shards and not on others.
            # Not knowing the weights (no --weights) is no such risk: a note, or every EAGLE --tp > 1 run would warn.
            if known is None:
                why, hint, severity = ("ranks disagree only if the draft's own equals the target's on some shards and "
                                       "not on others"), \
                    "run `surgery validate --weights` on the folders to decide it on the whole tensor", INFO
            else:
                why, hint, severity = ("the draft's own differs from the target's, so a rank whose shard happens to be "
                                       "equal shares while the others keep theirs"), \
                    "make the draft's weights equal the target's, or drop them", None
            out.append(diag("SRG644", f"{op.role}: shared only if the draft's own equals the target's, decided per "
                            f"rank on {plan.runtime.tp_size} shards; {why}", Location(draft.source), hint,
                            severity=severity))
    return out + second_catalogue(plan, recipe, draft, target, method=normalise_method(served) if served else
                                  expected_method(recipe, draft, target), max_model_len=max_model_len, **(serving_flags or {}))


def expected_method(recipe, draft, target) -> str:
    accept, _ = expected_methods(recipe, draft, target)
    return accept[0] if accept else "draft_model"


def second_catalogue(plan, recipe, draft, target, *, method: str, max_model_len: int | None = None,
                     hf_overrides: dict | None = None, num_speculative_tokens: int | None = None,
                     draft_kv_cache_dtype: str | None = None, engine_version: str | None = None) -> list[Diagnostic]:
    """SRG645-649, SRG670-671: what the draft inherits, what the engine's code reaches, the tokenizers."""
    return (inheritance_checks(plan, recipe, draft, target, method=method, hf_overrides=hf_overrides,
                               max_model_len=max_model_len, num_speculative_tokens=num_speculative_tokens,
                               draft_kv_cache_dtype=draft_kv_cache_dtype, engine_version=engine_version)
            + head_checks(plan, recipe, draft, target, method=method, num_speculative_tokens=num_speculative_tokens)
            + tokenizer_check(draft, target))


def with_findings(plan, findings: list[Diagnostic]) -> Any:
    """The plan with extra diagnostics (the Plan is frozen)."""
    return replace(plan, diagnostics=tuple(plan.diagnostics) + tuple(findings)) if findings else plan
