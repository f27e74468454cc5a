"""The recipe applied to a live SGLang draft and target, right after SGLang's own wiring
(`init_lm_head`: set_embed_and_head / set_embed) and before the draft's attention backends and
CUDA graphs are built: resolved against both checkpoints' config.json, applied atomically,
verified on the live objects, rolled back when a check fails, and said in one log line.

SGLang's own id arithmetic for the capture list runs later, when the target's attention backends
are initialised (`configure_aux_hidden_state_capture` -> `set_eagle3_layers_to_capture`): the hook
re-applies the planned capture there (hooks.py `after_attention_backends`) and checks it again."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..text.diagnostics import SurgeryError, diag
from ..live.sglang import SGLangContext
from .log import APPLIED, get_logger
from ..live.paths import get_path, role_path
from ..facts import read_facts
from ..engine.capture import installed_version
from ..plan import Runtime
from ..recipe import load_recipe
from ..resolver import resolve
from .. import applier  # read when called: tests wrap applier.verify_plan (tests/sglang_engine/test_hooks.py)


@dataclass
class Applied:
    """What the hook did to one draft: the plan, the apply and verify reports."""

    plan: Any
    report: Any
    verification: Any
    context: Any
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"recipe": self.plan.recipe, "applied": len(self.report.applied),
                "verified": bool(self.verification.ok),
                "checks": [c.to_dict() for c in self.verification.checks],
                "not_applicable": [f"{d.code} {d.message}" for d in self.report.not_applicable]}


def wiring(draft: Any, target: Any) -> dict[str, str]:
    """Where the draft's embedding and head point on the live models: `target` (the draft's weight IS
    the target's tensor), `own`, or `absent`. Read before and after the recipe: the live oracle that
    the recipe's wiring equals SGLang's own where the two must agree."""

    out = {}
    for role in ("input_embeddings", "lm_head"):
        try:
            d = getattr(get_path(draft, role_path("sglang", draft, role, "draft")), "weight", None)
            t = getattr(get_path(target, role_path("sglang", target, role, "target")), "weight", None)
        except SurgeryError:
            out[role] = "absent"
            continue
        out[role] = "absent" if d is None else "target" if d is t else "own"
    return out


def snapshot_own_weights(draft: Any) -> dict[str, Any]:
    """Role path -> the draft's weight tensor now (before SGLang's wiring), for every role SGLang's
    init_lm_head may replace."""

    out = {}
    for role in ("input_embeddings", "lm_head"):
        try:
            path = role_path("sglang", draft, role, "draft")
        except SurgeryError:
            continue
        weight = getattr(get_path(draft, path), "weight", None)
        if weight is not None:
            out[path] = weight
    return out


def plan_for(recipe_ref: str, draft_path: str, target_path: str):

    # the installed SGLang is the one that serves: its capture range judges the aux ids (SRG362)
    plan = resolve(load_recipe(recipe_ref), read_facts(draft_path), read_facts(target_path),
                   Runtime(engine="sglang", engine_version=installed_version("sglang")))
    if not plan.ok:
        raise SurgeryError(plan.errors)
    return plan


def apply_recipe(recipe_ref: str, draft: Any, target: Any, draft_path: str, target_path: str,
                 algorithm: str | None = None, loaded_names: frozenset[str] | None = None,
                 own_weights: dict[str, Any] | None = None, strict: bool = True) -> Applied:
    """Apply, verify, roll back on failure (then SRG501 when strict). Never leaves a wiring that
    failed its own checks in place."""

    plan = plan_for(recipe_ref, draft_path, target_path)
    context = SGLangContext(algorithm=algorithm, loaded_names=loaded_names, own_weights=own_weights)
    stock = wiring(draft, target)  # SGLang's own init_lm_head has run
    report = applier.apply_plan(plan, draft, target, context, strict=strict)
    verification = applier.verify_plan(plan, draft, target, context, report=report)
    if not verification.ok:
        applier.rollback(report)
    after = wiring(draft, target)
    get_logger().info(
        APPLIED.fmt, plan.recipe, algorithm or "?",
        len(report.applied), report.summary(), "PASS" if verification.ok else "FAIL, rolled back",
        len(verification.checks),
        "" if verification.ok else ": " + "; ".join(f"{c.op_id} {c.name} ({c.detail})" for c in verification.failed[:5]),
        stock, after, "identical" if stock == after else "the recipe rewired " +
        ", ".join(r for r in stock if stock[r] != after[r]))
    if not verification.ok and strict:
        raise SurgeryError(diag("SRG501", "; ".join(f"{c.op_id}: {c.name} ({c.detail})" for c in verification.failed)
                                + " (the wiring was rolled back)"))
    return Applied(plan, report, verification, context, notes=[{"sglang_wiring": stock, "after_recipe": after}])
