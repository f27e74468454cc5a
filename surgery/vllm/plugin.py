"""The `vllm.general_plugins` entry point.

vLLM calls `register()` in every process it starts (engine, workers), before any model is built.
We wrap the draft-loading step of both spec-decode runners (surgery/vllm/hooks.py). In the
process that loads models, right after vLLM's own draft wiring and before KV-cache specs are
collected, the selected recipe is resolved against the live configs and runtime, applied
atomically, verified, and reported in one log line. After the KV caches are bound, cache identity
is verified too. No recipe selected: the wrappers return at once.

Recipe selection is explicit, never guessed: `SURGERY_RECIPE=<path or shipped name>` or
`additional_config={"surgery": {"recipe": ...}}`. An invalid recipe stops engine start with the
coded diagnostic.
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from ..diagnostics import SurgeryError, diag

ENV_RECIPE = "SURGERY_RECIPE"
ENV_STRICT = "SURGERY_STRICT"  # "0": report (not fail on) operations vLLM cannot perform and failed verification
_registered = False
logger = logging.getLogger("surgery.vllm")


def _vllm_logger():
    """A logger under `vllm.` so the lines print with vLLM's own handler (surgery/vllm/log.py)."""
    from .log import get_logger

    return get_logger()


def register() -> None:
    """Entry point. Idempotent: vLLM may call it several times per process (the hooks dedupe
    callbacks and wrap each class once), and calling it again after `hooks.uninstall_all()`
    re-installs the callbacks instead of silently staying off."""
    global _registered
    from . import lazy, startup

    startup.install()  # fail fast: check the recipe where vLLM builds its config (surgery/vllm/startup.py)
    # the model hooks go in where a model runner is imported, i.e. only in processes that load models
    # (the API server and engine core never import one; importing them there cost seconds of start-up)
    modules = _runner_modules()
    if not any(_module_exists(m) for m in modules):
        # no runner module this vLLM has will ever trigger the install: the recipe would never be
        # applied, and no hook would notice (SRG323 now, not a silent start)
        _no_load_hooks(f"no vLLM model-runner module found ({', '.join(modules) or 'none listed'})")
    lazy.when_imported(modules, _install_hooks)
    _registered = True


def _module_exists(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _no_load_hooks(why: str) -> None:
    """Nothing will ever call us at load time: with a recipe selected in the environment that is a
    silent no-op unless we stop here (SRG323); additional_config is not visible yet: say it in the log."""
    from . import hooks

    missing = hooks.missing_targets(hooks.LOAD_MODEL_TARGETS)
    names = "; ".join(f"{k} ({v})" for k, v in missing.items()) or why
    if missing and why:
        names = f"{why}; {names}"
    if os.environ.get(ENV_RECIPE):
        raise SurgeryError(diag("SRG323", f"recipe {os.environ[ENV_RECIPE]!r} selected but no vLLM draft-loading "
                                f"method could be wrapped: {names}"))
    _vllm_logger().warning("spec-surgery: SRG323 no vLLM draft-loading method could be wrapped (%s); a recipe "
                           "selected through additional_config will not be applied", names)


def _runner_modules() -> list[str]:
    from .hooks import KV_CACHE_TARGETS

    return [module for module, _ in KV_CACHE_TARGETS]


def _install_hooks(_module: str = "") -> None:
    """Install the load-model, KV-cache and reload hooks (idempotent). Runs after a runner module
    finished importing; while another runner is still half-imported (one runner imports the other)
    it waits for that one's completion, which calls it again."""
    from . import hooks, lazy

    if lazy.any_initializing(m for m in _runner_modules() if m != _module):  # _module: its body just ran
        return
    wrapped = hooks.install_load_model_hook(_after_draft_loaded, when="after")
    hooks.install_kv_cache_hook(_after_kv_cache_bound)
    _wrap_reload()
    if not wrapped:
        _no_load_hooks("")


def selected_recipe(vllm_config: Any) -> str | None:
    extra = getattr(vllm_config, "additional_config", None) or {}
    sub = extra.get("surgery") if isinstance(extra, dict) else None
    if isinstance(sub, dict) and sub.get("recipe"):
        return str(sub["recipe"])
    return os.environ.get(ENV_RECIPE) or None


def strict(vllm_config: Any) -> bool:
    """Strict unless the user opts out: SURGERY_STRICT=0 or additional_config {"surgery": {"strict": false}}."""
    extra = getattr(vllm_config, "additional_config", None) or {}
    sub = extra.get("surgery") if isinstance(extra, dict) else None
    if isinstance(sub, dict) and sub.get("strict") is False:
        return False
    return os.environ.get(ENV_STRICT, "1") != "0"


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
    return problems


def _model_facts(path_or_id: str, hf_config: Any, side: str):
    """Facts from the checkpoint's own config.json (vLLM rewrites the draft's live config, e.g.
    gemma4_assistant -> gemma4_mtp with num_kv_shared_layers forced to 0)."""
    from ..facts import facts_from_config, read_facts

    p = Path(str(path_or_id))
    if (p / "config.json").exists() or p.suffix == ".json":
        return read_facts(p)
    cfg = hf_config.to_dict() if hasattr(hf_config, "to_dict") else dict(hf_config)
    return facts_from_config(json.loads(json.dumps(cfg, default=str)), f"{side}:{path_or_id}")


def runtime_of(vllm_config: Any):
    from ..plan import Runtime

    par = vllm_config.parallel_config
    backend = getattr(getattr(vllm_config, "attention_config", None), "backend", None)
    pp_rank, tp_rank = _parallel_ranks()
    return Runtime(engine="vllm", pp_size=int(par.pipeline_parallel_size), tp_size=int(par.tensor_parallel_size),
                   kv_cache_dtype=str(vllm_config.cache_config.cache_dtype),
                   attention_backend=getattr(backend, "name", None) if backend is not None else None,
                   pp_rank=pp_rank, tp_rank=tp_rank)


def _parallel_ranks() -> tuple[int | None, int | None]:
    """This process's pipeline stage and tensor-parallel rank from vLLM's process groups.
    (`parallel_config.rank` is the GLOBAL rank: under TP 2 rank 1 would claim pp stage 1, and a recipe
    condition on `pp_rank` would decide differently per TP rank; tests/vllm/test_distributed.py.)
    None outside an initialised worker."""
    try:
        from vllm.distributed import get_pp_group, get_tensor_model_parallel_rank

        return int(get_pp_group().rank_in_group), int(get_tensor_model_parallel_rank())
    except Exception:  # noqa: BLE001 - groups not initialised (stand-ins, offline resolution)
        return None, None


def plan_for(proposer: Any):
    """Resolve the selected recipe against the live engine; None when no recipe is selected."""
    from ..recipe import load_recipe
    from ..resolver import resolve

    vllm_config = proposer.vllm_config
    recipe_ref = selected_recipe(vllm_config)
    if recipe_ref is None:
        return None
    recipe = load_recipe(recipe_ref)
    spec = proposer.speculative_config
    draft_cfg = spec.draft_model_config
    target_cfg = vllm_config.model_config
    draft = _model_facts(draft_cfg.model, draft_cfg.hf_config, "draft")
    target = _model_facts(target_cfg.model, target_cfg.hf_config, "target")
    return resolve(recipe, draft, target, runtime_of(vllm_config))


def _draft_module(proposer: Any) -> Any:
    return proposer.model


def _after_draft_loaded(proposer: Any, target_model: Any) -> None:
    # audit mode (SURGERY_MODE=audit): change nothing, compare vLLM's wiring with the plan (audit.py)
    from . import audit

    if audit.audit_mode(proposer.vllm_config):
        audit.after_draft_loaded(proposer, target_model)
        return
    plan = plan_for(proposer)
    if plan is None:
        return
    log = _vllm_logger()
    if not plan.ok:
        raise SurgeryError(plan.errors)
    from ..applier import apply_plan, rollback, verify_plan
    from .adapter import VLLMAdapter

    target_lm = target_model.get_language_model() if hasattr(target_model, "get_language_model") else target_model
    draft = _draft_module(proposer)
    is_strict = strict(proposer.vllm_config)
    problems = hint_problems(plan, proposer, draft, target_lm)
    if problems and is_strict:
        raise SurgeryError(problems)
    spec = getattr(proposer.vllm_config, "speculative_config", None)
    adapter = VLLMAdapter(proposer.vllm_config.compilation_config.static_forward_context,
                          method=getattr(spec, "method", None))
    report = apply_plan(plan, draft, target_lm, adapter, strict=is_strict)
    verification = verify_plan(plan, draft, target_lm, adapter, report=report)
    if not verification.ok:
        rollback(report)  # never leave a wiring that failed its own checks in place
    proposer._surgery_plan = plan
    proposer._surgery_report = report
    proposer._surgery_verify = verification
    proposer._surgery_target_lm = target_lm
    proposer._surgery_hint_problems = problems
    _write_report(proposer)
    maps = "; ".join(f"{n}: " + ",".join(f"{r.draft}->{r.target}" for r in rows) for n, rows in plan.layer_maps.items())
    log.info("spec-surgery: recipe %s applied: %d operations (%s), %d skipped, %s, verification %s (%d checks)%s%s",
             plan.recipe, len(report.applied), maps, len(plan.skipped), report.summary(),
             "PASS" if verification.ok else "FAIL, rolled back", len(verification.checks),
             "" if verification.ok else ": " + "; ".join(
                 f"{c.op_id} {c.name} ({c.detail})" for c in verification.failed[:5]),
             "" if not problems else "; " + "; ".join(f"{d.code} {d.message}" for d in problems))
    if not verification.ok and is_strict:
        raise SurgeryError(diag("SRG501", "; ".join(f"{c.op_id}: {c.name} ({c.detail})" for c in verification.failed)
                                + " (the wiring was rolled back)"))


def _write_report(proposer: Any) -> None:
    """SURGERY_REPORT=path: the plan, apply report, verification as JSON (surgery/vllm/report.py)."""
    from .report import write_for_proposer

    write_for_proposer(proposer)


def kv_cache_checks(proposer: Any) -> list:
    """After KV caches are bound: each shared draft layer's cache tensor IS its target's."""
    from ..applier.core import Check
    from ..applier.paths import attention_path, get_path

    plan = getattr(proposer, "_surgery_plan", None)
    if plan is None:
        return []
    draft, target = _draft_module(proposer), proposer._surgery_target_lm
    checks = []
    from .adapter import _aux_holder

    for op in plan.ops("capture_hidden_states"):
        # vLLM's runner sets the auxiliary layers itself after the draft is loaded (legacy
        # `_setup_eagle3_aux_hidden_state_outputs`): check the engine ended up with the planned ones
        holder = _aux_holder(target)
        now = tuple(getattr(holder, "aux_hidden_state_layers", ())) if holder is not None else None
        checks.append(Check(op.id, "the target still returns the planned hidden states after vLLM's set-up",
                            now == tuple(op.layers), f"aux_hidden_state_layers={now} planned={tuple(op.layers)}"))
    for op in plan.ops("share_kv"):
        d = get_path(draft, attention_path("vllm", draft, op.draft_layer, "draft"))
        t = get_path(target, attention_path("vllm", target, op.target_layer, "target"))
        kv, tkv = getattr(d, "kv_cache", None), getattr(t, "kv_cache", None)
        ok = kv is not None and tkv is not None and kv is tkv and getattr(kv, "numel", lambda: 0)() > 0
        checks.append(Check(op.id, "draft kv_cache is the target layer's tensor (identity)", ok))
    return checks


def _after_kv_cache_bound(runner: Any, kv_cache_config: Any, is_profiling: bool) -> None:
    proposer = getattr(runner, "drafter", None) or getattr(runner, "speculator", None)
    if proposer is None or is_profiling:
        return
    from . import audit

    if getattr(proposer, "_surgery_audit", None) is not None or audit.audit_mode(
            getattr(proposer, "vllm_config", None) or getattr(runner, "vllm_config", None)):
        audit.after_kv_cache_bound(proposer, is_profiling)  # audit mode: observe only (audit.py)
        return
    if getattr(proposer, "_surgery_plan", None) is None:
        # a recipe is selected but the after-load callback never ran: the draft was loaded through a
        # method no hook wraps (a runner this release does not know). Never serve it unwired.
        ref = selected_recipe(getattr(proposer, "vllm_config", None) or getattr(runner, "vllm_config", None))
        if ref is not None:
            from . import hooks

            raise SurgeryError(diag("SRG323", f"recipe {ref!r} is selected but was never applied: the draft of "
                                    f"{type(proposer).__name__} was loaded without passing a wrapped method "
                                    f"(wrapped: {', '.join(hooks.installed_targets()) or 'none'})"))
        return
    checks = kv_cache_checks(proposer)
    proposer._surgery_kv_checks = checks
    _write_report(proposer)
    failed = [c for c in checks if not c.ok]
    _vllm_logger().info("spec-surgery: KV caches bound: %d/%d checks hold (draft KV caches are their target's "
                        "tensors; captured hidden-state layers as planned)", len(checks) - len(failed), len(checks))
    if failed and strict(proposer.vllm_config):
        raise SurgeryError(diag("SRG501", "; ".join(f"{c.op_id}: {c.name}" for c in failed)))


def refresh_copied_attrs(proposer: Any) -> int:
    """Re-copy every copied attribute of the applied plan from the target, in place where the
    shapes allow (so anything holding the draft's scale tensors sees the new values). vLLM's
    weight reload re-runs `process_weights_after_loading`, which rewrites the target's scales;
    without this the draft would keep the old ones. The copy is the adapter's own (`copy_inplace`
    for tensors, the op's mode otherwise): one place copies attributes. Returns the number of
    attributes refreshed."""
    import dataclasses

    import torch

    from ..applier.core import NotApplicable
    from .adapter import VLLMAdapter

    plan = getattr(proposer, "_surgery_plan", None)
    if plan is None:
        return 0
    draft, target = _draft_module(proposer), proposer._surgery_target_lm
    adapter = VLLMAdapter(is_attention=lambda m: True)  # the layers were checked when the plan was applied
    n = 0
    for op in plan.ops("copy_attr"):
        d_attn, t_attn = adapter._attn_pair(op, draft, target)
        src, dst = getattr(t_attn, op.attr, None), getattr(d_attn, op.attr, None)
        tensors = isinstance(src, torch.Tensor) and isinstance(dst, torch.Tensor)
        try:
            prepared = adapter.prepare(dataclasses.replace(op, mode="copy_inplace") if tensors else op, draft, target)
        except NotApplicable:
            continue  # reported as not applicable at apply time (attribute absent in this vLLM)
        for m in prepared.mutations:
            m.apply()
        n += 1
    return n


def _wrap_reload() -> None:
    """Refresh copied scales after `reload_weights` on the model runners that have it."""
    import functools
    import importlib

    for module, cls_name in (("vllm.v1.worker.gpu_model_runner", "GPUModelRunner"),
                             ("vllm.v1.worker.gpu.model_runner", "GPUModelRunner")):
        try:
            cls = getattr(importlib.import_module(module), cls_name)
        except Exception:  # noqa: BLE001 - optional runner
            continue
        orig = cls.__dict__.get("reload_weights")
        if orig is None or getattr(orig, "__surgery_hook__", None):
            continue

        @functools.wraps(orig)
        def reload_weights(self, *args, __orig=orig, **kwargs):
            result = __orig(self, *args, **kwargs)
            proposer = getattr(self, "drafter", None) or getattr(self, "speculator", None)
            if proposer is not None:
                n = refresh_copied_attrs(proposer)
                if n:
                    _vllm_logger().info("spec-surgery: refreshed %d copied attributes after weight reload", n)
            return result

        reload_weights.__surgery_hook__ = orig
        setattr(cls, "reload_weights", reload_weights)
