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
ENV_STRICT = "SURGERY_STRICT"  # "0": log verification failures instead of stopping the engine
_registered = False
logger = logging.getLogger("surgery.vllm")


def _vllm_logger():
    try:
        from vllm.logger import init_logger

        return init_logger("surgery.vllm")
    except Exception:  # noqa: BLE001
        return logger


def register() -> None:
    """Entry point. Idempotent: vLLM may call it several times per process (the hooks dedupe
    callbacks and wrap each class once), and calling it again after `hooks.uninstall_all()`
    re-installs the callbacks instead of silently staying off."""
    global _registered
    from . import hooks

    hooks.install_load_model_hook(_after_draft_loaded, when="after")
    hooks.install_kv_cache_hook(_after_kv_cache_bound)
    _wrap_reload()
    _registered = True


def selected_recipe(vllm_config: Any) -> str | None:
    extra = getattr(vllm_config, "additional_config", None) or {}
    sub = extra.get("surgery") if isinstance(extra, dict) else None
    if isinstance(sub, dict) and sub.get("recipe"):
        return str(sub["recipe"])
    return os.environ.get(ENV_RECIPE) or None


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
    plan = plan_for(proposer)
    if plan is None:
        return
    log = _vllm_logger()
    if not plan.ok:
        raise SurgeryError(plan.errors)
    from ..apply import apply_plan, verify_plan
    from .adapter import VLLMAdapter

    target_lm = target_model.get_language_model() if hasattr(target_model, "get_language_model") else target_model
    adapter = VLLMAdapter(proposer.vllm_config.compilation_config.static_forward_context)
    report = apply_plan(plan, _draft_module(proposer), target_lm, adapter)
    verification = verify_plan(plan, _draft_module(proposer), target_lm, adapter, report=report)
    proposer._surgery_plan = plan
    proposer._surgery_report = report
    proposer._surgery_verify = verification
    proposer._surgery_target_lm = target_lm
    maps = "; ".join(f"{n}: " + ",".join(f"{r.draft}->{r.target}" for r in rows) for n, rows in plan.layer_maps.items())
    log.info("spec-surgery: recipe %s applied: %d operations (%s), %d skipped, verification %s (%d checks)%s",
             plan.recipe, len(report.applied), maps, len(plan.skipped), "PASS" if verification.ok else "FAIL",
             len(verification.checks), "" if verification.ok else ": " + "; ".join(
                 f"{c.op_id} {c.name} ({c.detail})" for c in verification.failed[:5]))
    if not verification.ok and os.environ.get(ENV_STRICT, "1") != "0":
        raise SurgeryError(diag("SRG501", "; ".join(f"{c.op_id}: {c.name} ({c.detail})" for c in verification.failed)))


def kv_cache_checks(proposer: Any) -> list:
    """After KV caches are bound: each shared draft layer's cache tensor IS its target's."""
    from ..apply.core import Check
    from ..apply.paths import attention_path, get_path

    plan = getattr(proposer, "_surgery_plan", None)
    if plan is None:
        return []
    draft, target = _draft_module(proposer), proposer._surgery_target_lm
    checks = []
    for op in plan.ops("share_kv"):
        d = get_path(draft, attention_path("vllm", draft, op.draft_layer, "draft"))
        t = get_path(target, attention_path("vllm", target, op.target_layer, "target"))
        kv, tkv = getattr(d, "kv_cache", None), getattr(t, "kv_cache", None)
        ok = kv is not None and tkv is not None and kv is tkv and getattr(kv, "numel", lambda: 0)() > 0
        checks.append(Check(op.id, "draft kv_cache is the target layer's tensor (identity)", ok))
    return checks


def _after_kv_cache_bound(runner: Any, kv_cache_config: Any, is_profiling: bool) -> None:
    proposer = getattr(runner, "drafter", None) or getattr(runner, "speculator", None)
    if proposer is None or getattr(proposer, "_surgery_plan", None) is None or is_profiling:
        return
    checks = kv_cache_checks(proposer)
    proposer._surgery_kv_checks = checks
    failed = [c for c in checks if not c.ok]
    _vllm_logger().info("spec-surgery: KV caches bound: %d/%d draft layers read their target's cache tensor",
                        len(checks) - len(failed), len(checks))
    if failed and os.environ.get(ENV_STRICT, "1") != "0":
        raise SurgeryError(diag("SRG501", "; ".join(f"{c.op_id}: {c.name}" for c in failed)))


def refresh_copied_attrs(proposer: Any) -> int:
    """Re-copy every copied attribute of the applied plan from the target, in place where the
    shapes allow (so anything holding the draft's scale tensors sees the new values). vLLM's
    weight reload re-runs `process_weights_after_loading`, which rewrites the target's scales;
    without this the draft would keep the old ones. Returns the number of attributes refreshed."""
    import torch

    from ..apply.paths import attention_path, get_path

    plan = getattr(proposer, "_surgery_plan", None)
    if plan is None:
        return 0
    draft, target = _draft_module(proposer), proposer._surgery_target_lm
    n = 0
    with torch.no_grad():
        for op in plan.ops("copy_attr"):
            d = get_path(draft, attention_path("vllm", draft, op.draft_layer, "draft"))
            t = get_path(target, attention_path("vllm", target, op.target_layer, "target"))
            if not (hasattr(t, op.attr) and hasattr(d, op.attr)):
                continue  # reported as not applicable at apply time (attribute absent in this vLLM)
            src, dst = getattr(t, op.attr), getattr(d, op.attr)
            if isinstance(dst, torch.Tensor) and isinstance(src, torch.Tensor) and dst.shape == src.shape:
                dst.copy_(src)
            else:
                setattr(d, op.attr, src.detach().clone() if isinstance(src, torch.Tensor) else src)
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
