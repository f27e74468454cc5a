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
- `after_warmed_up(worker)`: after the engine's profile and warm-up forwards (KV caches bound, model
  compiled, CUDA graphs captured), before the first request: every check of the plan runs again
  (values in all their representations, captured layers, identities, the KV-cache checks); a check
  that held at load and fails here is SRG510, naming the engine step that changed the value where it
  is known. With calculate_kv_scales and the fix selected (SRG517) the target's calculated scales are
  copied onto the KV-shared draft layers first.
- `after_dummy_weights(model)`: under `load_format="dummy"` every declared parameter is present; the
  draft's has-own flags say so before vLLM decides what to share (SRG512).
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any

from ..diagnostics import SurgeryError, diag
from ..live.paths import attention_path, get_path
from ..live.prepared import Check, NotApplicable
from ..live.mutations import SetAttr
from ..live.vllm import aux_holder, target_language_model
from . import state
from .log import APPLIED, KV_BOUND, REFRESHED, WARMED, get_logger
from .selection import (audit_mode, calculates_kv_scales, kv_scales_follow_target, load_format, plan_from_config,
                        selected_recipe, strict)
from .wiring import kv_cache_groups_of

SCALE_ATTRS = ("_k_scale", "_v_scale", "_k_scale_float", "_v_scale_float", "_k_scale_cpu", "_v_scale_cpu")


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
    kv_scales = kv_scales_problems(proposer, plan, draft, target_lm)
    if any(d.severity == "error" for d in kv_scales) and is_strict:  # SRG514; non-strict: the warmed stage shows it
        raise SurgeryError([d for d in kv_scales if d.severity == "error"])
    info = load_info(proposer.vllm_config)
    st = state.of(proposer)
    st.load_info = info
    context = st.engine_context(proposer)  # built once; every later stage uses it
    report = apply_plan(plan, draft, target_lm, context, strict=is_strict)
    t0 = time.perf_counter()
    verification = verify_plan(plan, draft, target_lm, context, report=report)
    info["verify_seconds"] = time.perf_counter() - t0
    if not verification.ok:
        rollback(report)  # never leave a wiring that failed its own checks in place
    st.loaded(plan, report, verification, target_lm, problems, info,
              load_values(plan, draft, target_lm, context) if verification.ok else None)
    if verification.ok and any(d.code == "SRG517" for d in kv_scales):  # the fix: stop the draft's own calculation
        st.kv_scales_fix = stop_own_scale_calculation(plan, draft, target_lm, st)
    write_for_proposer(proposer)
    maps = "; ".join(f"{n}: " + ",".join(f"{r.draft}->{r.target}" for r in rows) for n, rows in plan.layer_maps.items())
    get_logger().info(
        APPLIED.fmt, plan.recipe, len(report.applied), maps, len(plan.skipped), report.summary(),
        "PASS" if verification.ok else "FAIL, rolled back", len(verification.checks), info["said"],
        "" if verification.ok else ": " + "; ".join(f"{c.op_id} {c.name} ({c.detail})" for c in verification.failed[:5]),
        "" if not problems and not kv_scales else "; " + "; ".join(f"{d.code} {d.message}"
                                                                   for d in [*problems, *kv_scales]))
    if not verification.ok and is_strict:
        raise SurgeryError(diag("SRG501", "; ".join(f"{c.op_id}: {c.name} ({c.detail})" for c in verification.failed)
                                + " (the wiring was rolled back)"))


def load_info(vllm_config: Any) -> dict:
    """How the engine loads weights, and where the plugin's "has own weights" answer comes from."""
    fmt = load_format(vllm_config)
    dummy = fmt == "dummy"
    said = ("SRG512 load_format=dummy: has own weights = yes for every role the draft declares (every declared "
            "parameter is present, random)" if dummy else
            f"load_format={fmt}: has own weights from the checkpoint's names (vLLM's has-own flags)")
    return {"load_format": fmt, "dummy": dummy, "has_own_weights": "every declared parameter (dummy load)" if dummy
            else "from the checkpoint's weight names", "said": said}


def _kv_layers(plan: Any, draft: Any, target: Any):
    """(op, draft attention, target attention) for each share_kv op whose layers are found."""
    out = []
    for op in plan.ops("share_kv"):
        try:
            d = get_path(draft, attention_path("vllm", draft, op.draft_layer, "draft"))
            t = get_path(target, attention_path("vllm", target, op.target_layer, "target"))
        except (AttributeError, IndexError, KeyError, TypeError):
            continue
        out.append((op, d, t))
    return out


def kv_scales_problems(proposer: Any, plan: Any, draft: Any, target: Any) -> list:
    """SRG514 (error) / SRG517 (info, the fix selected) from the live engine: the cache config says
    calculate_kv_scales, or a KV-shared draft layer still has the flag (the release has the option)."""
    from ..checks.kv_scales import kv_scales_findings

    vc = proposer.vllm_config
    calculate = calculates_kv_scales(vc) or any(getattr(d, "calculate_kv_scales", False) is True
                                                 for _, d, _ in _kv_layers(plan, draft, target))
    dtype = getattr(getattr(vc, "cache_config", None), "cache_dtype", None)
    return kv_scales_findings(plan, calculate=calculate, version=None, follow_target=kv_scales_follow_target(vc),
                              kv_cache_dtype=str(dtype) if dtype is not None else None, source="cache_config",
                              version_known=False)


def stop_own_scale_calculation(plan: Any, draft: Any, target: Any, st: state.PluginState) -> dict:
    """The fix, part 1 (at load): each KV-shared draft layer stops computing its own scales in its first
    forward (`calculate_kv_scales = False`, a reversible change kept on `st`); part 2 runs after the
    warm-up (`follow_target_scales`)."""
    stopped = []
    for op, d, _ in _kv_layers(plan, draft, target):
        if getattr(d, "calculate_kv_scales", False) is True:
            st.change([SetAttr(f"{op.id}:calculate_kv_scales", d, "calculate_kv_scales", False, kind="attribute")])
            stopped.append(op.draft_layer)
    return {"stopped": stopped, "recopied": None, "targets_calculated": None}


def follow_target_scales(proposer: Any) -> dict:
    """The fix, part 2 (after the warm-up): the target layers have calculated their scales; copy them
    onto the draft layers in all three representations (the copy_attrs performer's own copy)."""
    st = state.of(proposer)
    fix = dict(st.kv_scales_fix or {})
    pending = [op.target_layer for op, _, t in _kv_layers(st.plan, proposer.model, st.target_lm)
               if getattr(t, "calculate_kv_scales", False) is True]
    fix["targets_calculated"] = not pending
    fix["targets_not_calculated"] = sorted(set(pending))
    fix["recopied"] = refresh_copied_attrs(proposer)
    st.kv_scales_fix = fix
    return fix


def load_values(plan: Any, draft: Any, target: Any, context: Any) -> dict:
    """The copied values right after apply, per copy_attrs op (draft, target): what the warmed stage
    compares with to say which side changed; plus each KV-shared layer's calculate_kv_scales flag."""
    from ..live.values import plain_value

    out: dict = {"values": {}, "calculate": {}}
    for op in plan.ops("copy_attrs"):
        try:
            d, t = context.attention_pair(op, draft, target)
            out["values"][op.id] = (plain_value(getattr(d, op.attr, None)), plain_value(getattr(t, op.attr, None)))
        except Exception:  # noqa: BLE001 - not applicable here; the verification said so
            continue
    for op, d, t in _kv_layers(plan, draft, target):
        out["calculate"][op.id] = (getattr(d, "calculate_kv_scales", None), getattr(t, "calculate_kv_scales", None))
    return out


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
        from . import audit

        audit.after_kv_cache_bound(proposer, is_profiling, kv_cache_config)  # audit mode: observe only (audit.py)
        return
    if st is None or st.plan is None:
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
    st.kv_bound(checks)
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

    st = state.get(proposer)
    plan = st.plan if st is not None else None
    if plan is None:
        return 0
    draft, target = proposer.model, st.target_lm
    context = st.engine_context(proposer)  # the one the plan was applied with
    n = 0
    for op in plan.ops("copy_attrs"):
        d_attn, t_attn = context.attention_pair(op, draft, target)
        src, dst = getattr(t_attn, op.attr, None), getattr(d_attn, op.attr, None)
        tensors = isinstance(src, torch.Tensor) and isinstance(dst, torch.Tensor)
        try:
            prepared = prepare_op(dataclasses.replace(op, mode="copy_inplace") if tensors else op, draft, target,
                                  context)
        except NotApplicable:
            continue  # reported as not applicable at apply time (attribute absent in this vLLM)
        st.change(prepared.mutations)  # kept, so a rollback undoes the refresh too
        n += 1
    return n


def after_weights_reloaded(runner: Any) -> None:
    proposer = getattr(runner, "drafter", None) or getattr(runner, "speculator", None)
    if proposer is not None:
        state.of(proposer).reloaded = True
        n = refresh_copied_attrs(proposer)
        if n:
            get_logger().info(REFRESHED.fmt, n)


# --------------------------------------------------------------------------- after the warm-up


def _check_key(c: Check) -> tuple[str, str]:
    return (c.op_id, c.name)


def engine_step(proposer: Any, plan: Any, check: Check) -> str:
    """Which engine step changed the value a failed warmed check compares, where it can be found."""
    from ..checks.kv_scales import engine_step as kv_step
    from ..live.values import plain_value, values_equal

    st = state.of(proposer)
    base = st.load_values or {}
    op = next((o for o in plan.operations if o.id == check.op_id), None)
    changed = ""
    if op is not None and getattr(op, "attr", None) in SCALE_ATTRS:
        draft, target = proposer.model, st.target_lm
        share = next((o for o in plan.ops("share_kv") if o.draft_layer == op.draft_layer), None)
        flags = base.get("calculate", {}).get(share.id) if share is not None else None
        try:
            d, t = st.engine_context(proposer).attention_pair(op, draft, target)
        except Exception:  # noqa: BLE001
            d = t = None
        if op.id in base.get("values", {}) and d is not None:
            was_d, was_t = base["values"][op.id]
            now_d, now_t = plain_value(getattr(d, op.attr, None)), plain_value(getattr(t, op.attr, None))
            sides = [f"draft {was_d} -> {now_d}" for _ in [0] if not values_equal(was_d, now_d)]
            sides += [f"target {was_t} -> {now_t}" for _ in [0] if not values_equal(was_t, now_t)]
            changed = f" (since load: {'; '.join(sides) or 'neither side'})"
        if flags is not None and d is not None:
            d_was, t_was = flags
            if d_was is True and getattr(d, "calculate_kv_scales", None) is False:
                return f"{kv_step()}: the draft layer computed its own scales{changed}"
            if t_was is True and getattr(t, "calculate_kv_scales", None) is False:
                return f"{kv_step()}: the target layer computed its scales after load, the draft kept the copy{changed}"
    if st.reloaded:
        return f"vLLM's reload_weights (process_weights_after_loading){changed}"
    return ("not identified: changed between load and the end of the warm-up (profile run, KV-cache binding, "
            f"warm-up / compile / CUDA-graph capture){changed}")


def warmed_checks(proposer: Any, runner: Any) -> list:
    """Every check of the applied plan, run again on the live objects, plus the KV-cache checks."""
    from ..applier import verify_plan

    st = state.of(proposer)
    checks = list(verify_plan(st.plan, proposer.model, st.target_lm, st.engine_context(proposer),
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
        from . import audit

        audit.after_warmed_up(proposer)  # audit mode: observe only
        return
    if st is None or st.plan is None:
        return  # no recipe; a selected recipe never applied stopped the engine at KV binding (SRG323)
    from .report import write_for_proposer

    if st.verification is None or not st.verification.ok:
        st.warmed_up({"ok": False, "checks": [], "problems": [], "skipped":
                      "the wiring failed its load-time verification and was rolled back"})
        write_for_proposer(proposer)
        return
    fix = follow_target_scales(proposer) if st.kv_scales_fix is not None else None
    checks = warmed_checks(proposer, runner)
    problems = warmed_problems(proposer, checks)
    if fix is not None and not fix["targets_calculated"]:
        problems.append(diag("SRG510", f"calculate_kv_scales fix: target layers {fix['targets_not_calculated']} have "
                             "not calculated their scales by the end of the warm-up (no forward ran them): the draft "
                             "layers hold the target's load-time scales"))
    st.warmed_up({"ok": not problems, "checks": checks, "problems": problems, "kv_scales_fix": fix})
    write_for_proposer(proposer)
    failed = [c for c in checks if not c.ok]
    get_logger().info(WARMED.fmt, len(checks) - len(failed), len(checks),
                      "" if fix is None else f"; SRG517 target scales copied onto the draft layers {fix['stopped']} "
                      f"({fix['recopied']} attributes)",
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
    from ..engines import card
    from ..live.paths import role_path

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
        st.dummy_load = flags
