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
  copied attributes are refreshed in place (surgery/vllm/kv_scales.py `refresh`).
- `after_warmed_up(worker)`: after the engine's profile and warm-up forwards (KV caches bound, model
  compiled, CUDA graphs captured), before the first request: every check of the plan runs again
  (values in all their representations, captured layers, identities, the KV-cache checks); a check
  that held at load and fails here is SRG510, naming the engine step that changed the value where it
  is known. With calculate_kv_scales and the fix selected (SRG517) the target's calculated scales are
  copied onto the KV-shared draft layers first.
- `after_dummy_weights(model)`: under `load_format="dummy"` every declared parameter is present; the
  draft's has-own flags say so before vLLM decides what to share (SRG512).

What happens to the KV-cache scales at each of these stages is surgery/vllm/kv_scales.py (the
lifecycle, told in order there); the hooks here call into it.
"""
from __future__ import annotations

import time
from typing import Any

from .. import applier  # called through the package, where tests put a failing verify_plan
from ..text.diagnostics import SurgeryError, diag
from ..engine.cards import card
from ..live.mutations import SetAttr
from ..live.paths import attention_path, get_path, role_path
from ..live.prepared import Check
from ..live.vllm import aux_holder
from . import audit, kv_scales, selection, state, wiring
from .hooks import installed_targets
from .log import APPLIED, KV_BOUND, REFRESHED, WARMED, get_logger
from .report import write_for_proposer, write_state
from .selection import audit_mode, selected_recipe, strict
from .wiring import kv_cache_groups_of


def after_draft_loaded(proposer: Any, target_model: Any) -> None:
    """The draft is loaded (vLLM's own wiring done). The selection is read once (surgery/vllm/selection.py
    `read`), then each stage runs once, in order: audit mode observes (surgery/vllm/audit.py); apply mode
    checks the live engine against the plan (engine hints SRG324, the KV-scale rule SRG514 / SRG517), applies,
    verifies (rolled back on failure), keeps the copied values the warmed stage compares with, records the
    stage on the proposer's state, writes the report and says it in one log line."""
    selected = selection.read(proposer.vllm_config, proposer.speculative_config)
    live = wiring.at_load(proposer, target_model, selected)
    if selected.audit:
        audit.after_draft_loaded(proposer, target_model, selected, live)
        return
    plan = selected.plan
    if plan is None:
        return
    draft, target_lm, context, problems = live.draft, live.target_lm, live.context, live.hint_problems
    if problems and selected.strict:
        raise SurgeryError(problems)
    layers, scale_findings = kv_scales.before_apply(proposer.vllm_config, plan, draft, target_lm, selected.follow_target)
    if any(d.severity == "error" for d in scale_findings) and selected.strict:  # SRG514; else the warmed stage says
        raise SurgeryError([d for d in scale_findings if d.severity == "error"])
    applied = applier.apply_plan(plan, draft, target_lm, context, strict=selected.strict)
    t0 = time.perf_counter()
    verification = applier.verify_plan(plan, draft, target_lm, context, report=applied)
    info = dict(selected.load_info, verify_seconds=time.perf_counter() - t0)
    values, fix, changes = None, None, []
    if verification.ok:  # the values the warmed stage compares with; the fix selected (SRG517), its part 1
        values, fix, changes = kv_scales.after_verify(plan, layers, scale_findings, context, draft, target_lm)
    else:
        applier.rollback(applied)  # never leave a wiring that failed its own checks in place
    st = state.of(proposer)
    st.change(changes)
    if fix is not None:
        st.kv_scales_fixed(fix)
    st.loaded(plan, applied, verification, target_lm, problems, info, values, context)
    write_state(st)
    maps = "; ".join(f"{n}: " + ",".join(f"{r.draft}->{r.target}" for r in rows) for n, rows in plan.layer_maps.items())
    get_logger().info(
        APPLIED.fmt, plan.recipe, len(applied.applied), maps, len(plan.skipped), applied.summary(),
        "PASS" if verification.ok else "FAIL, rolled back", len(verification.checks), info["said"],
        "" if verification.ok else ": " + "; ".join(f"{c.op_id} {c.name} ({c.detail})" for c in verification.failed[:5]),
        "" if not problems and not scale_findings else "; " + "; ".join(f"{d.code} {d.message}"
                                                                        for d in [*problems, *scale_findings]))
    if not verification.ok and selected.strict:
        raise SurgeryError(diag("SRG501", "; ".join(f"{c.op_id}: {c.name} ({c.detail})" for c in verification.failed)
                                + " (the wiring was rolled back)"))


def kv_cache_checks(proposer: Any, kv_cache_config: Any = None) -> list:
    """After KV caches are bound: each shared draft layer's cache tensor IS its target's, and the
    layer is in its target's KV-cache group (the block table it reads with)."""
    st = state.get(proposer)
    plan = st.plan if st is not None else None
    if plan is None:
        return []
    draft, target = proposer.model, st.target_lm
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
    st = state.get(proposer)
    if (st is not None and st.audit is not None) or audit_mode(vllm_config):
        audit.after_kv_cache_bound(proposer, is_profiling, kv_cache_config)  # audit mode: observe only (audit.py)
        return
    if st is None or st.plan is None:
        # a recipe is selected but the after-load callback never ran: the draft was loaded through a
        # method no hook wraps (a runner this release does not know). Never serve it unwired.
        ref = selected_recipe(vllm_config)
        if ref is not None:
            raise SurgeryError(diag("SRG323", f"recipe {ref!r} is selected but was never applied: the draft of "
                                    f"{type(proposer).__name__} was loaded without passing a wrapped method "
                                    f"(wrapped: {', '.join(installed_targets()) or 'none'})"))
        return
    checks = kv_cache_checks(proposer, kv_cache_config)
    st.kv_bound(checks)
    write_for_proposer(proposer)
    failed = [c for c in checks if not c.ok]
    get_logger().info(KV_BOUND.fmt, len(checks) - len(failed), len(checks))
    if failed and strict(proposer.vllm_config):
        raise SurgeryError(diag("SRG501", "; ".join(f"{c.op_id}: {c.name}" for c in failed)))


def after_weights_reloaded(runner: Any) -> None:
    proposer = getattr(runner, "drafter", None) or getattr(runner, "speculator", None)
    if proposer is not None:
        state.of(proposer).weights_reloaded()
        n = kv_scales.refresh(proposer)
        if n:
            get_logger().info(REFRESHED.fmt, n)


# --------------------------------------------------------------------------- after the warm-up


def _check_key(c: Check) -> tuple[str, str]:
    return (c.op_id, c.name)


def engine_step(proposer: Any, plan: Any, check: Check) -> str:
    """Which engine step changed the value a failed warmed check compares, where it can be found."""
    step, changed = kv_scales.changed_by(proposer, plan, check)  # calculate_kv_scales, for a scale attribute
    if step is not None:
        return step
    if state.of(proposer).reloaded:
        return f"vLLM's reload_weights (process_weights_after_loading){changed}"
    return ("not identified: changed between load and the end of the warm-up (profile run, KV-cache binding, "
            f"warm-up / compile / CUDA-graph capture){changed}")


def warmed_checks(proposer: Any, runner: Any) -> list:
    """Every check of the applied plan, run again on the live objects, plus the KV-cache checks."""
    st = state.of(proposer)
    checks = list(applier.verify_plan(st.plan, proposer.model, st.target_lm, st.engine_context(proposer),
                              report=st.report).checks)
    kv_config = getattr(runner, "kv_cache_config", None) if runner is not None else None
    return checks + kv_cache_checks(proposer, kv_config)


def warmed_problems(proposer: Any, checks: list) -> list:
    """SRG510 per failed check: held at load (or when the KV caches were bound) and fails now."""
    st = state.of(proposer)
    plan = st.plan
    held = {_check_key(c) for c in (st.verification.checks or ()) if c.ok}
    held |= {_check_key(c) for c in (st.kv_checks or ()) if c.ok}
    out = []
    for c in checks:
        if c.ok:
            continue
        when = "held at load" if _check_key(c) in held else "not run before (a KV-cache check)"
        out.append(diag("SRG510", f"{c.op_id}: {c.name} ({c.detail}) {when}, fails after the warm-up; changed by "
                        f"{engine_step(proposer, plan, c)}"))
    return out


def after_warmed_up(worker: Any) -> None:
    runner = getattr(worker, "model_runner", None) or worker
    proposer = getattr(runner, "drafter", None) or getattr(runner, "speculator", None)
    if proposer is None:
        return
    vllm_config = getattr(proposer, "vllm_config", None) or getattr(runner, "vllm_config", None)
    st = state.get(proposer)
    if (st is not None and st.audit is not None) or audit_mode(vllm_config):
        audit.after_warmed_up(proposer)  # audit mode: observe only
        return
    if st is None or st.plan is None:
        return  # no recipe; a selected recipe never applied stopped the engine at KV binding (SRG323)
    if st.verification is None or not st.verification.ok:
        st.warmed_up({"ok": False, "checks": [], "problems": [], "skipped":
                      "the wiring failed its load-time verification and was rolled back"})
        write_for_proposer(proposer)
        return
    fix = kv_scales.warmed(proposer)  # the fix, part 2: before the checks, which then see the copied scales
    checks = warmed_checks(proposer, runner)
    problems = warmed_problems(proposer, checks) + kv_scales.pending_problems(fix)
    st.warmed_up({"ok": not problems, "checks": checks, "problems": problems, "kv_scales_fix": fix})
    write_for_proposer(proposer)
    failed = [c for c in checks if not c.ok]
    get_logger().info(WARMED.fmt, len(checks) - len(failed), len(checks), kv_scales.fix_said(fix),
                      "" if not problems else ": " + "; ".join(d.render().replace("\n", " ") for d in problems[:5]))
    if problems and strict(vllm_config):
        raise SurgeryError(problems)


def after_dummy_weights(model: Any) -> None:
    """load_format="dummy": set the model's has-own flags (names in the engine card) for every role it
    declares, as a checkpoint with every declared parameter would (SRG512); only with a recipe selected."""
    try:
        from vllm.config import get_current_vllm_config

        vllm_config = get_current_vllm_config()
    except Exception:  # noqa: BLE001 - outside a config context: the environment decides
        vllm_config = None
    if selected_recipe(vllm_config) is None or audit_mode(vllm_config):
        return  # stock vLLM (and audit mode, which observes stock vLLM) keep their own dummy behaviour
    flags, changes = {}, []
    for role, flag in card("vllm").has_own_flags.items():
        if not isinstance(getattr(model, flag, None), bool):
            continue
        try:
            get_path(model, role_path("vllm", model, role, "draft"))
        except Exception:  # noqa: BLE001 - the model declares no such module: nothing to mark
            continue
        changes.append(SetAttr(f"dummy_load:{flag}", model, flag, True, kind="attribute"))
        flags[flag] = True
    if flags:
        st = state.of(model)
        st.change(changes)  # reversible: a rollback puts vLLM's own flags back
        st.dummy_loaded(flags)
