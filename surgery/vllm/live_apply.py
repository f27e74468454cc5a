"""What the plugin does inside a vLLM worker, hook by hook (installed by surgery/vllm/plugin.py).

- `after_draft_loaded(proposer, target_model)`: right after vLLM's own draft wiring and before
  KV-cache specs are collected: the selected recipe is resolved against the live configs and
  runtime (surgery/vllm/selection.py), applied atomically, verified (rolled back if a check
  fails), reported in one log line and in `SURGERY_REPORT`. Audit mode changes nothing and hands
  over to surgery/vllm/audit.py.
- `after_kv_cache_bound(runner, kv_cache_config, is_profiling)`: each shared draft layer's cache
  tensor IS its target's; captured hidden-state layers as planned. A recipe selected but never
  applied (the draft was loaded through a method no hook wraps) stops the engine (SRG323).
- `after_weights_reloaded(runner)`: vLLM's weight reload rewrites the target's KV scales; the
  copied attributes are refreshed in place.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ..diagnostics import SurgeryError, diag
from ..live.paths import attention_path, get_path
from ..live.prepared import Check, NotApplicable
from ..live.vllm import VLLMContext, aux_holder, target_language_model
from . import state
from .log import APPLIED, KV_BOUND, REFRESHED, get_logger
from .selection import audit_mode, plan_from_config, selected_recipe, strict
from .wiring import kv_cache_groups_of


def plan_for(proposer: Any):
    """Resolve the selected recipe against the live engine; None when no recipe is selected."""
    selection = plan_from_config(proposer.vllm_config, proposer.speculative_config)
    return None if selection is None else selection.plan


def hint_problems(plan: Any, proposer: Any, draft: Any, target: Any) -> list:
    """The recipe's vLLM `engine:` hints checked against the live engine (SRG324)."""
    hints = plan.engine_hints.get("vllm") or {}
    problems = []
    method = getattr(getattr(proposer, "speculative_config", None), "method", None)
    if "method" in hints and method is not None and method != hints["method"]:
        problems.append(diag("SRG324", f"recipe {plan.recipe} is for vLLM method {hints['method']!r} but the engine "
                             f"runs speculative_config.method {method!r}"))
    if hints.get("attention_backend") == "inherit_target":
        def backends(model):
            return {getattr(m, "attn_backend", None) for _, m in model.named_modules()
                    if getattr(m, "attn_backend", None) is not None} if hasattr(model, "named_modules") else set()

        d, t = backends(draft), backends(target)
        if d and t and not d <= t:
            problems.append(diag("SRG324", "attention_backend: inherit_target, but the draft's attention backend "
                                 f"({', '.join(sorted(getattr(b, '__name__', str(b)) for b in d))}) is not the "
                                 f"target's ({', '.join(sorted(getattr(b, '__name__', str(b)) for b in t))})"))
    if "advance_draft_positions" in hints:
        constant = getattr(proposer, "constant_draft_positions", None)
        if isinstance(constant, bool) and constant == hints["advance_draft_positions"]:
            problems.append(diag("SRG324", f"advance_draft_positions: {hints['advance_draft_positions']}, but the "
                                 f"proposer {type(proposer).__name__} has constant_draft_positions={constant}"))
    if "parallel_drafting" in hints:
        live = getattr(proposer, "parallel_drafting", None)
        if isinstance(live, bool) and live != hints["parallel_drafting"]:
            problems.append(diag("SRG324", f"parallel_drafting: {hints['parallel_drafting']}, but the proposer "
                                 f"{type(proposer).__name__} has parallel_drafting={live} (speculative_config."
                                 "parallel_drafting; a P-EAGLE head needs it, a speculators `peagle` file sets it)"))
    return problems


def after_draft_loaded(proposer: Any, target_model: Any) -> None:
    if audit_mode(proposer.vllm_config):
        from . import audit

        audit.after_draft_loaded(proposer, target_model)
        return
    plan = plan_for(proposer)
    if plan is None:
        return
    if not plan.ok:
        raise SurgeryError(plan.errors)
    from ..applier import apply_plan, rollback, verify_plan
    from .report import write_for_proposer

    target_lm = target_language_model(target_model)
    draft = proposer.model
    is_strict = strict(proposer.vllm_config)
    problems = hint_problems(plan, proposer, draft, target_lm)
    if problems and is_strict:
        raise SurgeryError(problems)
    spec = getattr(proposer.vllm_config, "speculative_config", None)
    context = VLLMContext(proposer.vllm_config.compilation_config.static_forward_context,
                          method=getattr(spec, "method", None))
    report = apply_plan(plan, draft, target_lm, context, strict=is_strict)
    verification = verify_plan(plan, draft, target_lm, context, report=report)
    if not verification.ok:
        rollback(report)  # never leave a wiring that failed its own checks in place
    state.record(proposer, plan=plan, report=report, verify=verification, target_lm=target_lm, hint_problems=problems)
    write_for_proposer(proposer)
    maps = "; ".join(f"{n}: " + ",".join(f"{r.draft}->{r.target}" for r in rows) for n, rows in plan.layer_maps.items())
    get_logger().info(
        APPLIED.fmt, plan.recipe, len(report.applied), maps, len(plan.skipped), report.summary(),
        "PASS" if verification.ok else "FAIL, rolled back", len(verification.checks),
        "" if verification.ok else ": " + "; ".join(f"{c.op_id} {c.name} ({c.detail})" for c in verification.failed[:5]),
        "" if not problems else "; " + "; ".join(f"{d.code} {d.message}" for d in problems))
    if not verification.ok and is_strict:
        raise SurgeryError(diag("SRG501", "; ".join(f"{c.op_id}: {c.name} ({c.detail})" for c in verification.failed)
                                + " (the wiring was rolled back)"))


def kv_cache_checks(proposer: Any, kv_cache_config: Any = None) -> list:
    """After KV caches are bound: each shared draft layer's cache tensor IS its target's, and the
    layer is in its target's KV-cache group (the block table it reads with)."""
    plan = state.recorded(proposer, "plan")
    if plan is None:
        return []
    draft, target = proposer.model, state.recorded(proposer, "target_lm")
    groups = kv_cache_groups_of(kv_cache_config)
    checks = []
    for op in plan.ops("capture_hidden_states"):
        # vLLM's runner sets the auxiliary layers itself after the draft is loaded (legacy
        # `_setup_eagle3_aux_hidden_state_outputs`): check the engine ended up with the planned ones
        holder = aux_holder(target)
        now = tuple(getattr(holder, "aux_hidden_state_layers", ())) if holder is not None else None
        checks.append(Check(op.id, "the target still returns the planned hidden states after vLLM's set-up",
                            now == tuple(op.layers), f"aux_hidden_state_layers={now} planned={tuple(op.layers)}"))
    for op in plan.ops("share_kv"):
        d = get_path(draft, attention_path("vllm", draft, op.draft_layer, "draft"))
        t = get_path(target, attention_path("vllm", target, op.target_layer, "target"))
        kv, tkv = getattr(d, "kv_cache", None), getattr(t, "kv_cache", None)
        ok = kv is not None and tkv is not None and kv is tkv and getattr(kv, "numel", lambda: 0)() > 0
        checks.append(Check(op.id, "draft kv_cache is the target layer's tensor (identity)", ok))
        if groups is not None:
            dg, tg = groups.get(getattr(d, "layer_name", None)), groups.get(getattr(t, "layer_name", None))
            checks.append(Check(op.id, "draft layer is in its target layer's KV-cache group (same block table)",
                                dg is not None and dg == tg, f"draft group {dg}, target group {tg}"))
    return checks


def after_kv_cache_bound(runner: Any, kv_cache_config: Any, is_profiling: bool) -> None:
    proposer = getattr(runner, "drafter", None) or getattr(runner, "speculator", None)
    if proposer is None or is_profiling:
        return
    vllm_config = getattr(proposer, "vllm_config", None) or getattr(runner, "vllm_config", None)
    # the runner deep-copies the config it is given and files the KV-shared layers into the copy's
    # groups (gpu_model_runner.initialize_kv_cache): that copy is what its block tables come from
    kv_cache_config = getattr(runner, "kv_cache_config", None) or kv_cache_config
    if state.recorded(proposer, "audit") is not None or audit_mode(vllm_config):
        from . import audit

        audit.after_kv_cache_bound(proposer, is_profiling, kv_cache_config)  # audit mode: observe only (audit.py)
        return
    if state.recorded(proposer, "plan") is None:
        # a recipe is selected but the after-load callback never ran: the draft was loaded through a
        # method no hook wraps (a runner this release does not know). Never serve it unwired.
        ref = selected_recipe(vllm_config)
        if ref is not None:
            from .hooks import installed_targets

            raise SurgeryError(diag("SRG323", f"recipe {ref!r} is selected but was never applied: the draft of "
                                    f"{type(proposer).__name__} was loaded without passing a wrapped method "
                                    f"(wrapped: {', '.join(installed_targets()) or 'none'})"))
        return
    from .report import write_for_proposer

    checks = kv_cache_checks(proposer, kv_cache_config)
    state.record(proposer, kv_checks=checks)
    write_for_proposer(proposer)
    failed = [c for c in checks if not c.ok]
    get_logger().info(KV_BOUND.fmt, len(checks) - len(failed), len(checks))
    if failed and strict(proposer.vllm_config):
        raise SurgeryError(diag("SRG501", "; ".join(f"{c.op_id}: {c.name}" for c in failed)))


def refresh_copied_attrs(proposer: Any) -> int:
    """Re-copy every copied attribute of the applied plan from the target, in place where the
    shapes allow (so anything holding the draft's scale tensors sees the new values). vLLM's
    weight reload re-runs `process_weights_after_loading`, which rewrites the target's scales;
    without this the draft would keep the old ones. The copy is the copy_attrs performer's own
    (`copy_inplace` for tensors, the op's mode otherwise): one place copies attributes. Returns the
    number of attributes refreshed."""
    import torch

    from ..applier.core import prepare_op

    plan = state.recorded(proposer, "plan")
    if plan is None:
        return 0
    draft, target = proposer.model, state.recorded(proposer, "target_lm")
    context = VLLMContext(is_attention=lambda m: True)  # the layers were checked when the plan was applied
    n = 0
    for op in plan.ops("copy_attr"):
        d_attn, t_attn = context.attention_pair(op, draft, target)
        src, dst = getattr(t_attn, op.attr, None), getattr(d_attn, op.attr, None)
        tensors = isinstance(src, torch.Tensor) and isinstance(dst, torch.Tensor)
        try:
            prepared = prepare_op(dataclasses.replace(op, mode="copy_inplace") if tensors else op, draft, target,
                                  context)
        except NotApplicable:
            continue  # reported as not applicable at apply time (attribute absent in this vLLM)
        for m in prepared.mutations:
            m.apply()
        n += 1
    return n


def after_weights_reloaded(runner: Any) -> None:
    proposer = getattr(runner, "drafter", None) or getattr(runner, "speculator", None)
    if proposer is not None:
        n = refresh_copied_attrs(proposer)
        if n:
            get_logger().info(REFRESHED.fmt, n)
