"""Inspect how a running vLLM engine wired its draft into the target.

``wiring(llm)`` returns plain data (picklable, JSON-friendly) gathered inside the worker with
``llm.collective_rpc`` (any executor), falling back to the in-process model runner
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``) when the RPC path is unavailable:

    {"workers": [...per worker...], **first worker's entry}

Per worker: ``layers`` (one entry per draft attention layer: the target layer it reads, by name and
index; whether its bound ``kv_cache`` IS the target layer's tensor; its KV scales in the three
representations next to the target's), ``shared_modules`` (input embedding shared, lm_head own),
and ``surgery`` (the plugin's plan / apply / verification / KV-cache-check / after-warm-up summary,
or None when no recipe was applied).
"""
from __future__ import annotations

from typing import Any

from . import state
from .hooks import target_model_of
from .kv_scales import scales_brief
from .wiring import describe_wiring, find_live_runner

__all__ = ["wiring", "worker_wiring", "runner_wiring", "surgery_summary"]


def surgery_summary(proposer: Any) -> dict | None:
    """The plugin's results stored on the proposer (None if no recipe was applied)."""
    st = state.get(proposer)
    if st is None or st.plan is None:
        return None
    plan, report, ver, kv, warmed, load = st.plan, st.report, st.verification, st.kv_checks, st.warmed, st.load_info
    return {
        "recipe": plan.recipe,
        "recipe_file": plan.recipe_file,
        "plan_ok": plan.ok,
        "runtime": plan.runtime.to_dict(),
        "layer_maps": {name: {r.draft: r.target for r in rows} for name, rows in plan.layer_maps.items()},
        "operations": len(plan.operations),
        "skipped": [s.to_dict() for s in plan.skipped],
        "applied": list(report.applied) if report is not None else None,
        # SRG321: operations this engine did not perform, each with its reason
        "not_applicable": [d.to_dict() for d in report.not_applicable] if report is not None else None,
        "decisions": dict(report.decisions) if report is not None else None,
        "hint_problems": [d.to_dict() for d in st.hint_problems or []],
        "apply_seconds": report.seconds if report is not None else None,
        "verification": None if ver is None else {
            "ok": ver.ok, "checks": len(ver.checks), "failed": [c.to_dict() for c in ver.failed]},
        "kv_cache_checks": None if kv is None else {
            "ok": all(c.ok for c in kv), "checks": len(kv), "failed": [c.to_dict() for c in kv if not c.ok]},
        # after the profile / warm-up forwards, before the first request (None until then)
        "warmed": None if warmed is None else {
            "ok": bool(warmed.get("ok")), "checks": len(warmed.get("checks") or ()),
            "failed": [c.to_dict() for c in warmed.get("checks") or () if not c.ok],
            "problems": [d.to_dict() for d in warmed.get("problems") or ()], "skipped": warmed.get("skipped"),
            "kv_scales_fix": warmed.get("kv_scales_fix")},
        "load": None if load is None else {k: v for k, v in load.items() if k not in ("said", "verify_seconds")},
        "verify_seconds": None if load is None else load.get("verify_seconds"),
    }


def runner_wiring(runner: Any) -> dict:
    """Wiring summary of one model runner (legacy ``drafter`` or V2 ``speculator``)."""
    proposer = getattr(runner, "drafter", None) or getattr(runner, "speculator", None)
    if proposer is None or getattr(proposer, "model", None) is None:
        return {"speculative": False, "layers": [], "shared_modules": {}, "surgery": None}
    target = target_model_of(proposer) or getattr(runner, "model", None)
    w = describe_wiring(proposer, target)
    shared_cache = dict(getattr(runner, "shared_kv_cache_layers", {}) or {})
    layers = []
    for l in w["layers"]:
        layers.append({
            "draft_index": l["draft_index"],
            "draft_layer": l["draft_layer_name"],
            "reads_target_layer": l["kv_sharing_target_layer_name"],
            "reads_target_index": l["target_index"],
            "impl_reads": l["impl_kv_sharing_target_layer_name"],
            "runner_shared_kv_cache_layer": shared_cache.get(l["draft_layer_name"]),
            "kv_cache_bound": l["kv_cache_bound"],
            "kv_cache_is_target": l["kv_cache_is_target"],
            "scales": scales_brief(l["scales"]),
            "target_scales": scales_brief(l["target_scales"]),
        })
    return {
        "speculative": True,
        "proposer": w["proposer_class"],
        "draft_model": w["draft_model_class"],
        "target_model": w["target_model_class"],
        "layers": layers,
        "shared_modules": {
            "input_embeddings": w["embed_tokens_shared"],
            "lm_head_is_target": w["draft_lm_head_is_target_lm_head"],
            "draft_embed_shape": w["draft_embed_shape"],
            "draft_lm_head_shape": w["draft_lm_head_shape"],
        },
        "surgery": surgery_summary(proposer),
    }


def worker_wiring(worker: Any) -> dict:
    """``collective_rpc`` entry: runs inside a worker process."""
    runner = getattr(worker, "model_runner", None)
    if runner is None and hasattr(worker, "worker"):  # WorkerWrapperBase
        runner = worker.worker.model_runner
    return runner_wiring(runner)


def wiring(llm: Any) -> dict:
    """How the running engine's draft reads the target; see the module docstring."""
    results = None
    errors = []
    try:
        results = llm.collective_rpc(worker_wiring)
    except Exception as exc:  # noqa: BLE001 - e.g. an executor that cannot ship the callable
        errors.append(f"collective_rpc: {type(exc).__name__}: {exc}")
    if not results:
        results = [runner_wiring(find_live_runner(llm))]
        via = "in_process_runner"
    else:
        via = "collective_rpc"
    out = dict(results[0])
    out["workers"] = list(results)
    out["via"] = via
    if errors:
        out["errors"] = errors
    return out
