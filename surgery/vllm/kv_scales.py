"""The KV-cache scales of a vLLM draft, across one engine start, in order.

Why one module: the scales are the one value the plugin copies that vLLM itself changes after the
copy (a weight reload rewrites the target's; with `calculate_kv_scales` every Attention layer computes
its own in its first forward), so every stage of the engine start has something to do with them.
A scale lives in three representations per Attention layer (`SCALE_TENSOR_ATTRS`, `SCALE_FLOAT_ATTRS`,
`SCALE_CPU_ATTRS`); vLLM's legacy runner copies none of them to a KV-shared draft layer, the recipe's
`copy_attrs` ops do (the performer: surgery/ops/copy_attrs/vllm.py, through the applier). The plan-time
rule (SRG514-517, config only) is surgery/checks/kv_scales.py; the hooks that call in here are
surgery/vllm/startup.py and surgery/vllm/live_apply.py.

The lifecycle:

0. configured (where vLLM builds its config): `startup_check` - `calculate_kv_scales` in the cache
   config with KV-shared draft layers is SRG514, which stops a strict start; with the fix selected
   (surgery/vllm/selection.py `follow_target_selected`: SURGERY_KV_SCALES=follow_target or additional_config)
   it is SRG517, logged.
1. loaded (after the draft is loaded): the plan's copy_attrs ops copy the target's scales onto the draft
   (the applier); before it here `before_apply` (the same findings from the live cache config and the
   draft layers' own flags), after it `after_verify` (the copied values and the flags right after the copy,
   which stage 4 compares with, and, the fix selected, fix part 1: each KV-shared draft layer's
   `calculate_kv_scales` set False, the changes handed to the state).
2. KV bound: nothing happens to the scales (live_apply.kv_cache_checks checks the cache tensors).
3. reloaded (vLLM's reload_weights re-runs process_weights_after_loading, which rewrites the target's
   scales): `refresh` copies every copied attribute again, in place where the shapes allow.
4. warmed (after the profile / warm-up forwards, before the first request): `follow_target` (fix part 2:
   the scales the target layers computed are copied onto the draft layers; `pending_problems` is SRG510
   for target layers that computed none), then every check runs again; a failed scale check is
   explained by `changed_by` (which side changed since load, and whether `calculate_kv_scales` did it).
5. read out: `scale_info` (each representation's value and registration, for the wiring description and
   `surgery.vllm.inspect.wiring`), `scales_brief`; the fix's record is `PluginState.kv_scales_fix`,
   reported under `warmed.kv_scales_fix`, and said in the warmed log line (`fix_said`).

Every live change here goes through `PluginState.change` (surgery/live/mutations.py), so a rollback
after any stage restores every attribute (tests/test_plugin_state.py). Audit mode changes nothing and
observes the same stages itself (surgery/vllm/audit.py compare_scales / own_scale_calculation).
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any

from ..applier.core import prepare_op
from ..checks import config_spelling
from ..checks.kv_scales import engine_step, kv_scales_findings
from ..text.diagnostics import Diagnostic, diag
from ..live.mutations import SetAttr, registration
from ..live.paths import attention_path, get_path
from ..live.prepared import Check, NotApplicable
from ..live.values import plain_value, values_equal
from . import state
from .log import get_logger
from .selection import follow_target_selected, strict

# KV-scale attributes on vllm.model_executor.layers.attention.Attention
SCALE_TENSOR_ATTRS = ("_k_scale", "_v_scale")  # registered buffers (or nn.Parameter under quant)
SCALE_FLOAT_ATTRS = ("_k_scale_float", "_v_scale_float")  # python floats, read by CPU/FlashInfer kernels
SCALE_CPU_ATTRS = ("_k_scale_cpu", "_v_scale_cpu")  # plain attribute, 0-d float32 CPU tensors
SCALE_ATTRS = SCALE_TENSOR_ATTRS + SCALE_FLOAT_ATTRS + SCALE_CPU_ATTRS


# --------------------------------------------------------------------------- settings


def engine_calculates(vllm_config: Any) -> bool:
    """Whether the engine runs with calculate_kv_scales=True (False on releases without the option)."""
    return bool(getattr(getattr(vllm_config, "cache_config", None), "calculate_kv_scales", False))


def _cache_dtype(vllm_config: Any) -> str | None:
    dtype = getattr(getattr(vllm_config, "cache_config", None), "cache_dtype", None)
    return str(dtype) if dtype is not None else None


def kv_layers(plan: Any, draft: Any, target: Any) -> list:
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


# --------------------------------------------------------------------------- 0. configured


def startup_check(vllm_config: Any, plan: Any) -> list[Diagnostic]:
    """calculate_kv_scales in the live cache config with KV-shared draft layers (surgery/checks/kv_scales.py):
    returns the errors (SRG514); the fix selected (SRG517) and unknown releases are logged."""
    found = kv_scales_findings(plan, calculate=engine_calculates(vllm_config),
                               version=config_spelling.installed_vllm_version(),
                               follow_target=follow_target_selected(vllm_config),
                               kv_cache_dtype=_cache_dtype(vllm_config), source="cache_config")
    for d in found:
        if d.severity != "error" or not strict(vllm_config):
            get_logger().log(logging.ERROR if d.severity == "error" else logging.INFO, "spec-surgery: %s", d.render())
    return [d for d in found if d.severity == "error"]


# --------------------------------------------------------------------------- 1. loaded


def before_apply(vllm_config: Any, plan: Any, draft: Any, target: Any, follow_target: bool) -> tuple[list, list]:
    """Before the apply: (the KV-shared attention pairs, `kv_layers`, found once for this stage; SRG514 (error) /
    SRG517 (info, the fix selected) from the live engine: the cache config says calculate_kv_scales, or a
    KV-shared draft layer still has the flag (the release has the option))."""
    calculate_config, dtype = engine_calculates(vllm_config), _cache_dtype(vllm_config)
    layers = kv_layers(plan, draft, target)
    calculate = calculate_config or any(getattr(d, "calculate_kv_scales", False) is True for _, d, _ in layers)
    return layers, kv_scales_findings(plan, calculate=calculate, version=None, follow_target=follow_target,
                                      kv_cache_dtype=dtype, source="cache_config", version_known=False)


def after_verify(plan: Any, layers: list, findings: list[Diagnostic], context: Any, draft: Any,
                 target: Any) -> tuple[dict, dict | None, list]:
    """After a verified apply: (the values the warmed stage compares with, the fix's record or None, the fix's
    reversible changes for the state to apply). The values: per copy_attrs op the copied (draft, target)
    values, and each KV-shared layer's calculate_kv_scales flags as they were before the fix; the fix (part 1,
    SRG517 among `findings`): each KV-shared draft layer stops computing its own scales in its first forward
    (`calculate_kv_scales = False`); part 2 runs after the warm-up (`follow_target`)."""
    values: dict = {"values": {}, "calculate": {op.id: (getattr(d, "calculate_kv_scales", None),
                                                        getattr(t, "calculate_kv_scales", None))
                                                for op, d, t in layers}}
    fix, changes = None, []
    if any(d.code == "SRG517" for d in findings):
        stopped = [(op, d) for op, d, _ in layers if getattr(d, "calculate_kv_scales", False) is True]
        changes = [SetAttr(f"{op.id}:calculate_kv_scales", d, "calculate_kv_scales", False, kind="attribute")
                   for op, d in stopped]
        fix = {"stopped": [op.draft_layer for op, _ in stopped], "recopied": None, "targets_calculated": None}
    for op in plan.ops("copy_attrs"):
        try:
            d, t = context.attention_pair(op, draft, target)
            values["values"][op.id] = (plain_value(getattr(d, op.attr, None)), plain_value(getattr(t, op.attr, None)))
        except Exception:  # noqa: BLE001 - not applicable here; the verification said so
            continue
    return values, fix, changes


# --------------------------------------------------------------------------- 3. reloaded


def refresh(proposer: Any) -> int:
    """Re-copy every copied attribute of the applied plan from the target, in place where the
    shapes allow (so anything holding the draft's scale tensors sees the new values). vLLM's
    weight reload re-runs `process_weights_after_loading`, which rewrites the target's scales;
    without this the draft would keep the old ones. The copy is the copy_attrs performer's own
    (`copy_inplace` for tensors, the op's mode otherwise): one place copies attributes. Returns the
    number of attributes refreshed."""
    import torch

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


# --------------------------------------------------------------------------- 4. warmed


def follow_target(proposer: Any) -> dict:
    """The fix, part 2 (after the warm-up): the target layers have calculated their scales; copy them
    onto the draft layers in all three representations (the copy_attrs performer's own copy)."""
    st = state.of(proposer)
    fix = dict(st.kv_scales_fix or {})
    pending = [op.target_layer for op, _, t in kv_layers(st.plan, proposer.model, st.target_lm)
               if getattr(t, "calculate_kv_scales", False) is True]
    fix["targets_calculated"] = not pending
    fix["targets_not_calculated"] = sorted(set(pending))
    fix["recopied"] = refresh(proposer)
    st.kv_scales_fixed(fix)
    return fix


def warmed(proposer: Any) -> dict | None:
    """Fix part 2 when the fix was selected at load (None otherwise): runs before the warmed checks."""
    return follow_target(proposer) if state.of(proposer).kv_scales_fix is not None else None


def pending_problems(fix: dict | None) -> list[Diagnostic]:
    """SRG510 when target layers computed no scales by the end of the warm-up (the draft keeps the
    target's load-time ones)."""
    if fix is None or fix["targets_calculated"]:
        return []
    return [diag("SRG510", f"calculate_kv_scales fix: target layers {fix['targets_not_calculated']} have "
                 "not calculated their scales by the end of the warm-up (no forward ran them): the draft "
                 "layers hold the target's load-time scales")]


def fix_said(fix: dict | None) -> str:
    """The fix's part of the warmed log line."""
    return "" if fix is None else (f"; SRG517 target scales copied onto the draft layers {fix['stopped']} "
                                   f"({fix['recopied']} attributes)")


def changed_by(proposer: Any, plan: Any, check: Check) -> tuple[str | None, str]:
    """For a failed warmed check on a scale attribute: (the engine step that changed it, when it was
    calculate_kv_scales, else None; what changed since load, " (since load: ...)" or "")."""
    st = state.of(proposer)
    base = st.load_values or {}
    op = next((o for o in plan.operations if o.id == check.op_id), None)
    if op is None or getattr(op, "attr", None) not in SCALE_ATTRS:
        return None, ""
    draft, target = proposer.model, st.target_lm
    share = next((o for o in plan.ops("share_kv") if o.draft_layer == op.draft_layer), None)
    flags = base.get("calculate", {}).get(share.id) if share is not None else None
    try:
        d, t = st.engine_context(proposer).attention_pair(op, draft, target)
    except Exception:  # noqa: BLE001
        d = t = None
    changed = ""
    if op.id in base.get("values", {}) and d is not None:
        was_d, was_t = base["values"][op.id]
        now_d, now_t = plain_value(getattr(d, op.attr, None)), plain_value(getattr(t, op.attr, None))
        sides = [f"draft {was_d} -> {now_d}" for _ in [0] if not values_equal(was_d, now_d)]
        sides += [f"target {was_t} -> {now_t}" for _ in [0] if not values_equal(was_t, now_t)]
        changed = f" (since load: {'; '.join(sides) or 'neither side'})"
    step = None
    if flags is not None and d is not None:
        d_was, t_was = flags
        if d_was is True and getattr(d, "calculate_kv_scales", None) is False:
            step = f"{engine_step()}: the draft layer computed its own scales{changed}"
        elif t_was is True and getattr(t, "calculate_kv_scales", None) is False:
            step = f"{engine_step()}: the target layer computed its scales after load, the draft kept the copy{changed}"
    return step, changed


# --------------------------------------------------------------------------- 5. read out


def _kind(module: Any, name: str) -> str:
    """How the attribute is held, for the wiring description: the registration classifier's kind
    (persistent or not, a buffer is a buffer here), and for plain attributes whether it is a tensor."""
    import torch

    kind = registration(module, name)
    if kind != "attribute":
        return "buffer" if kind == "buffer_np" else kind
    if not hasattr(module, name):
        return "missing"
    return "tensor_attr" if isinstance(getattr(module, name), torch.Tensor) else "attr"


def scale_info(attn: Any) -> dict[str, dict[str, Any]]:
    """One attention layer's scales in their three representations: value, registration kind and,
    for tensors, shape, dtype and device."""
    import torch

    out = {}
    for name in SCALE_TENSOR_ATTRS + SCALE_CPU_ATTRS + SCALE_FLOAT_ATTRS:
        v = getattr(attn, name, None)
        info: dict[str, Any] = {"kind": _kind(attn, name), "value": plain_value(v)}
        if isinstance(v, torch.Tensor):
            info.update(shape=tuple(v.shape), dtype=str(v.dtype), device=str(v.device))
        out[name] = info
    return out


def scales_brief(info: dict | None) -> dict | None:
    """`scale_info` as `surgery.vllm.inspect.wiring` reports it: value, kind and shape."""
    if info is None:
        return None
    return {name: {"value": v.get("value"), "kind": v.get("kind"), "shape": v.get("shape")} for name, v in info.items()}
