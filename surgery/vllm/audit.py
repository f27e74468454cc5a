"""Audit mode: the plugin changes nothing and reports how vLLM's own wiring differs from the recipe.

Selected with `SURGERY_MODE=audit` or `additional_config={"surgery": {"mode": "audit"}}` (plus the recipe
to compare with: `SURGERY_RECIPE` / `additional_config.surgery.recipe`). Twice per engine start:

- after the draft is loaded (vLLM's stock wiring done): KV sharing targets, the backend impl's copy of
  them, KV-scale values, shared / kept embedding and lm_head, compared with the recipe's plan;
- after the KV caches are bound: each shared draft layer's cache tensor, the target's aux hidden-state
  layers (EAGLE-3; set by the runner after the draft is loaded).

Every difference is a coded finding (SRG7xx; config findings of surgery/checks/field.py join them with
the live speculative method), logged through a logger under `vllm.` (so it lands in vLLM's own log) and
written as JSON to `SURGERY_REPORT=path` when set. Findings of severity `error` can change outputs or
acceptance; `surgery audit` exits 1 on them. What could not be compared is listed under `not_applicable`,
never passed over silently.

`write_report` is the one report writer (normal mode uses it too): keys `plan`, `apply`, `verify`,
`findings`, `not_applicable`.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from ..diagnostics import ERROR, INFO, WARNING, Diagnostic, Location, diag

ENV_MODE = "SURGERY_MODE"
ENV_REPORT = "SURGERY_REPORT"
REPORT_FORMAT = 1
LOGGER_NAME = "vllm.surgery"  # a child of vLLM's "vllm" logger: its handler prints our lines


def logger() -> logging.Logger:
    try:
        from vllm.logger import init_logger

        return init_logger(LOGGER_NAME)
    except Exception:  # noqa: BLE001 - vLLM absent: a plain logger of the same name
        return logging.getLogger(LOGGER_NAME)


def selected_mode(vllm_config: Any) -> str:
    """"audit" or "apply" (the default). additional_config wins over the environment."""
    extra = getattr(vllm_config, "additional_config", None) or {}
    sub = extra.get("surgery") if isinstance(extra, dict) else None
    if isinstance(sub, dict) and sub.get("mode"):
        return str(sub["mode"]).lower()
    return (os.environ.get(ENV_MODE) or "apply").lower()


def audit_mode(vllm_config: Any) -> bool:
    return selected_mode(vllm_config) == "audit"


# --------------------------------------------------------------------------- the report


def write_report(path: str | os.PathLike | None = None, *, plan: Any = None, apply: Any = None, verify: Any = None,
                 findings: list | None = None, not_applicable: list | None = None, mode: str = "apply",
                 extra: dict | None = None) -> str | None:
    """Write the plugin's JSON report to `path` (default: $SURGERY_REPORT; nothing when neither is set).
    Atomic (temp file + rename) so a reader never sees half a report. Returns the path written."""
    path = path or os.environ.get(ENV_REPORT)
    if not path:
        return None
    data = {
        "format": REPORT_FORMAT,
        "mode": mode,
        "plan": plan.to_dict() if hasattr(plan, "to_dict") else plan,
        "apply": apply,
        "verify": verify,
        "findings": [f.to_dict() if hasattr(f, "to_dict") else f for f in (findings or [])],
        "not_applicable": list(not_applicable or []),
        **(extra or {}),
    }
    from .report import write_json_atomic  # the one atomic writer (normal mode's report uses it too)

    write_json_atomic(Path(path), data)
    return str(path)


# --------------------------------------------------------------------------- comparisons


class Audit:
    """Findings of one engine's audit, in the order they were found."""

    def __init__(self, plan: Any):
        self.plan = plan
        self.findings: list[tuple[str, Diagnostic]] = []  # (stage, finding)
        self.not_applicable: list[dict] = []
        self.checked: dict[str, int] = {}

    @property
    def quantized_cache(self) -> bool:
        return str(self.plan.runtime.kv_cache_dtype).startswith("fp8") if self.plan is not None else False

    def add(self, stage: str, code: str, message: str, where: str | None = None, severity: str | None = None) -> None:
        self.findings.append((stage, diag(code, message, Location(key_path=where) if where else None,
                                          severity=severity)))

    def na(self, check: str, reason: str) -> None:
        self.not_applicable.append({"check": check, "reason": reason})

    def count(self, check: str) -> None:
        self.checked[check] = self.checked.get(check, 0) + 1

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for _, d in self.findings if d.severity == ERROR]

    def to_dict(self) -> dict:
        return {"findings": [{**d.to_dict(), "stage": s} for s, d in self.findings],
                "not_applicable": list(self.not_applicable), "checked": dict(self.checked),
                "ok": not self.errors}


def _target_lm(target_model: Any) -> Any:
    if target_model is not None and hasattr(target_model, "get_language_model"):
        try:
            return target_model.get_language_model()
        except Exception:  # noqa: BLE001
            return target_model
    return target_model


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, list) or isinstance(b, list):
        la = a if isinstance(a, list) else [a]
        lb = b if isinstance(b, list) else [b]
        if len(la) == 1 and len(lb) > 1:
            la = la * len(lb)
        if len(lb) == 1 and len(la) > 1:
            lb = lb * len(la)
        return len(la) == len(lb) and all(_same_value(x, y) for x, y in zip(la, lb))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(float(a) - float(b)) <= 1e-6 * max(1.0, abs(float(b)))
    return a == b


def audit_after_load(audit: Audit, proposer: Any, target_model: Any) -> None:
    """Compare vLLM's stock wiring (right after the draft is loaded) with the plan."""
    from .hooks import _value, get_layer_maps

    plan = audit.plan
    maps = get_layer_maps(proposer, target_model)
    for op in plan.ops("share_kv"):
        attn, tname = maps.draft.get(op.draft_layer), maps.target_names.get(op.target_layer)
        where = maps.draft_names.get(op.draft_layer, f"draft layer {op.draft_layer}")
        if attn is None or tname is None:
            audit.na(op.id, f"no live attention layer for draft {op.draft_layer} / target {op.target_layer}")
            continue
        audit.count("share_kv")
        got = getattr(attn, "kv_sharing_target_layer_name", None)
        if got is None:
            audit.add("load", "SRG702", f"draft layer {op.draft_layer} reads its own KV cache; the recipe has it read "
                      f"{tname} ({op.id})", where)
        elif got != tname:
            audit.add("load", "SRG702", f"draft layer {op.draft_layer} reads {got}; the recipe has it read {tname} "
                      f"({op.id})", where)
        impl = getattr(attn, "impl", None)
        if impl is None or not hasattr(impl, "kv_sharing_target_layer_name"):
            audit.na(f"impl_copy:{op.draft_layer}", f"the attention impl ({type(impl).__name__}) keeps no copy")
        else:
            audit.count("impl_copy")
            if impl.kv_sharing_target_layer_name != got:
                audit.add("load", "SRG703", f"draft layer {op.draft_layer}: the backend impl's copy of "
                          f"kv_sharing_target_layer_name is {impl.kv_sharing_target_layer_name!r}, the layer's is "
                          f"{got!r} ({type(impl).__name__})", where)
    for op in plan.ops("copy_attr"):
        d, t = maps.draft.get(op.draft_layer), maps.target.get(op.target_layer)
        where = maps.draft_names.get(op.draft_layer, f"draft layer {op.draft_layer}")
        if d is None or t is None or not hasattr(d, op.attr) or not hasattr(t, op.attr):
            audit.na(op.id, f"{op.attr} absent on the live layers of this vLLM")
            continue
        audit.count("copy_attr")
        dv, tv = _value(getattr(d, op.attr)), _value(getattr(t, op.attr))
        if not _same_value(dv, tv):
            latent = "" if audit.quantized_cache else " (latent: the cache is not quantized now, so unused)"
            audit.add("load", "SRG701", f"draft layer {op.draft_layer} {op.attr} = {dv} but target layer "
                      f"{op.target_layer}, whose cache it reads, has {tv}{latent}", where,
                      severity=None if audit.quantized_cache else WARNING)
    _audit_modules(audit, proposer, target_model)


def _audit_modules(audit: Audit, proposer: Any, target_model: Any) -> None:
    draft = proposer.model
    target_lm = _target_lm(target_model)
    d_embed = getattr(getattr(draft, "model", None), "embed_tokens", None)
    t_embed = getattr(getattr(target_lm, "model", None), "embed_tokens", None)
    d_head, t_head = getattr(draft, "lm_head", None), getattr(target_lm, "lm_head", None)
    plan = audit.plan
    for op in plan.ops("share_module") + plan.ops("keep"):
        if op.layer is not None or op.role not in ("input_embeddings", "lm_head"):
            continue
        mine, theirs = (d_embed, t_embed) if op.role == "input_embeddings" else (d_head, t_head)
        if mine is None or theirs is None:
            audit.na(op.id, f"{op.role}: no such module on the live {'draft' if mine is None else 'target'}")
            continue
        audit.count(op.role)
        shared = mine is theirs
        if op.op == "keep" and shared:
            audit.add("load", "SRG704", f"{op.role}: the recipe keeps the draft's own, but vLLM replaced it with the "
                      f"target's ({op.id})", op.role)
        elif op.op == "share_module" and not shared:
            shape = tuple(getattr(getattr(mine, "weight", None), "shape", ()) or ())
            tshape = tuple(getattr(getattr(theirs, "weight", None), "shape", ()) or ())
            if op.if_draft_has_own == "share_if_identical" and shape == tshape:
                audit.add("load", "SRG705", f"{op.role}: the draft kept its own {list(shape)} (vLLM found it different "
                          f"from the target's; the recipe shares only identical weights) ({op.id})", op.role,
                          severity=INFO)
            else:
                audit.add("load", "SRG705", f"{op.role}: the draft kept its own {list(shape)} (a placeholder where the "
                          f"target's {list(tshape)} belongs); the recipe shares the target's ({op.id})", op.role)


def _aux_layers(target_model: Any) -> tuple[int, ...] | None:
    seen = set()
    stack = [target_model]
    while stack:
        obj = stack.pop()
        if obj is None or id(obj) in seen:
            continue
        seen.add(id(obj))
        layers = getattr(obj, "aux_hidden_state_layers", None)
        if layers:
            return tuple(int(i) for i in layers)
        stack.extend([getattr(obj, "model", None), getattr(obj, "language_model", None)])
    return None


def audit_after_kv_cache(audit: Audit, proposer: Any, target_model: Any) -> None:
    """After the KV caches are bound: cache identity of shared layers; the target's aux layers."""
    import torch

    from .hooks import get_layer_maps

    plan = audit.plan
    maps = get_layer_maps(proposer, target_model) if plan.ops("share_kv") else None
    for op in plan.ops("share_kv"):
        d, t = maps.draft.get(op.draft_layer), maps.target.get(op.target_layer)
        if d is None or t is None:
            continue
        audit.count("kv_cache")
        kv, tkv = getattr(d, "kv_cache", None), getattr(t, "kv_cache", None)
        if not (isinstance(kv, torch.Tensor) and isinstance(tkv, torch.Tensor) and kv is tkv):
            audit.add("kv_cache", "SRG706", f"draft layer {op.draft_layer}'s bound KV cache is not target layer "
                      f"{op.target_layer}'s tensor ({op.id})", maps.draft_names.get(op.draft_layer))
    for op in plan.ops("capture_hidden_states"):
        live = _aux_layers(target_model)
        if live is None:
            audit.na(op.id, "the target exposes no aux_hidden_state_layers (not an EAGLE-3 run in this vLLM)")
            continue
        audit.count("aux_layers")
        want = tuple(sorted(set(op.layers or ())))
        if tuple(sorted(set(live))) != want:
            audit.add("kv_cache", "SRG707", f"the target captures hidden states of layers {list(live)}; the head's "
                      f"config / recipe says {list(want)} ({op.id})", "aux_hidden_state_layers")
        from .adapter import _aux_holder, embedding_capture_is_copied

        holder = _aux_holder(target_model)
        if 0 in live and holder is not None and not embedding_capture_is_copied(holder):
            audit.add("kv_cache", "SRG709", f"aux layer 0 (the embeddings) is handed to the head by reference: the "
                      f"first decoder layer's in-place add-RMSNorm overwrites it before the head reads it ({op.id})",
                      "_maybe_add_hidden_state")


def config_findings(audit: Audit, proposer: Any) -> None:
    """Field checks of surgery/checks/field.py with what the engine really runs (its method)."""
    from ..checks.field import field_checks
    from ..recipe import load_recipe
    from .plugin import _model_facts, selected_recipe

    vllm_config = proposer.vllm_config
    spec = proposer.speculative_config
    try:
        recipe = load_recipe(selected_recipe(vllm_config))
        draft = _model_facts(spec.draft_model_config.model, spec.draft_model_config.hf_config, "draft")
        target = _model_facts(vllm_config.model_config.model, vllm_config.model_config.hf_config, "target")
    except Exception as exc:  # noqa: BLE001 - a config the plan was resolved from cannot vanish; say so if it does
        audit.na("field_checks", f"{type(exc).__name__}: {exc}")
        return
    for d in field_checks(audit.plan, recipe, draft, target, method=getattr(spec, "method", None), method_given=True,
                          max_model_len=getattr(vllm_config.model_config, "max_model_len", None)):
        audit.findings.append(("load", d))


# --------------------------------------------------------------------------- plugin entry points


def _log(audit: Audit, stage: str) -> None:
    log = logger()
    new = [d for s, d in audit.findings if s == stage]
    for d in new:
        level = {ERROR: logging.ERROR, WARNING: logging.WARNING}.get(d.severity, logging.INFO)
        log.log(level, "spec-surgery audit: %s %s: %s%s", d.severity, d.code, d.message,
                f" [{d.location}]" if str(d.location) != "<input>" else "")
    log.info("spec-surgery audit (%s, recipe %s, stage %s): %d finding(s), %d error(s) that can change outputs or "
             "acceptance; %d check(s) not applicable", "no changes made", audit.plan.recipe, stage, len(new),
             sum(d.severity == ERROR for d in new), len(audit.not_applicable))


def _rank_path() -> str | None:
    """$SURGERY_REPORT for rank 0; `<path>.rank<N>` for the other ranks of a multi-GPU engine (each rank
    wires its own drafter, and ranks can disagree: vllm#50158)."""
    path = os.environ.get(ENV_REPORT)
    if not path:
        return None
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1 and dist.get_rank() > 0:
            return f"{path}.rank{dist.get_rank()}"
    except Exception:  # noqa: BLE001 - no process group: a single rank
        pass
    return path


def _write(audit: Audit, stage: str) -> None:
    write_report(_rank_path(), plan=audit.plan, apply=None, verify=None, mode="audit",
                 findings=[{**d.to_dict(), "stage": s} for s, d in audit.findings],
                 not_applicable=audit.not_applicable, extra={"stage": stage, "checked": audit.checked,
                                                             "ok": not audit.errors})


def after_draft_loaded(proposer: Any, target_model: Any) -> Audit | None:
    from ..diagnostics import SurgeryError
    from .plugin import plan_for

    try:
        plan = plan_for(proposer)
    except SurgeryError as exc:  # audit observes; a recipe that does not load is reported, not raised
        for d in exc.diagnostics:
            logger().error("spec-surgery audit: %s", d.render())
        write_report(mode="audit", findings=exc.diagnostics,
                     not_applicable=[{"check": "all", "reason": "the recipe could not be resolved"}])
        return None
    except Exception as exc:  # noqa: BLE001 - an audit must never stop the engine it observes
        logger().error("spec-surgery audit: could not resolve the recipe against this engine: %s: %s",
                       type(exc).__name__, exc)
        write_report(mode="audit", not_applicable=[{"check": "all", "reason": f"{type(exc).__name__}: {exc}"}])
        return None
    if plan is None:
        logger().warning("spec-surgery audit: %s=audit but no recipe selected (SURGERY_RECIPE or "
                         "additional_config.surgery.recipe): nothing to compare vLLM's wiring with", ENV_MODE)
        write_report(mode="audit", not_applicable=[{"check": "all", "reason": "no recipe selected"}])
        return None
    audit = Audit(plan)
    for d in plan.diagnostics:
        if d.severity in (ERROR, WARNING):
            audit.findings.append(("load", d))  # the recipe does not fit this engine's configs / runtime
    try:
        audit_after_load(audit, proposer, target_model)
    except Exception as exc:  # noqa: BLE001 - an audit must never stop the engine it observes
        audit.na("after_load", f"{type(exc).__name__}: {exc}")
    config_findings(audit, proposer)
    proposer._surgery_audit = audit
    proposer._surgery_audit_target = target_model
    _log(audit, "load")
    _write(audit, "load")
    return audit


def after_kv_cache_bound(proposer: Any, is_profiling: bool) -> Audit | None:
    audit = getattr(proposer, "_surgery_audit", None)
    if audit is None or is_profiling:
        return audit
    try:
        audit_after_kv_cache(audit, proposer, getattr(proposer, "_surgery_audit_target", None))
    except Exception as exc:  # noqa: BLE001
        audit.na("after_kv_cache", f"{type(exc).__name__}: {exc}")
    _log(audit, "kv_cache")
    _write(audit, "kv_cache")
    return audit
