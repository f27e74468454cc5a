"""Reading a live vLLM engine back: what it actually wired (the draft's embedding / lm_head / MTP
shared heads against the target's, EAGLE-3 aux layers, d2t), the plan's steps, and the checks of
the steps vLLM's own loader performed (the applier reported them as not performed, SRG321)."""
from __future__ import annotations

from ..text.diagnostics import SurgeryError
from ..live.paths import get_path, layers_path
from ..live.vllm import target_language_model
from .ablation import role_sites
from .wiring import role_module
from ..ops.registry import UNITS


def mtp_shared_heads(draft) -> dict[int, object]:
    """Layer number -> the module computing that MTP layer's logits (role `mtp_shared_head` of the
    vLLM engine card), for the draft's layers that have one; empty for drafts without MTP layers."""
    try:
        layers = get_path(draft, layers_path("vllm", draft, "draft")) if draft is not None else None
    except SurgeryError:
        return {}
    heads = {}
    for k in (layers.keys() if hasattr(layers, "items") else ()):
        head = role_module(draft, "mtp_shared_head", "draft", layer=int(k))
        if head is not None:
            heads[int(k)] = head
    return heads


def live_wiring(proposer, target) -> dict:
    """What vLLM actually wired, read off the live objects: the target's captured aux layers
    (EAGLE-3), whether the draft's input embedding / lm_head ARE the target's modules, and for
    DeepSeek-style MTP drafts the layer numbers of the MTP layers and whether each one's
    ``shared_head.head`` (what computes its logits) is the target's lm_head."""
    target_lm = target_language_model(target)
    draft = getattr(proposer, "model", None)

    def same(a, b):
        return a is not None and b is not None and (a is b or getattr(a, "weight", 0) is getattr(b, "weight", 1))

    d_embed = role_module(draft, "input_embeddings", "draft")
    t_head = role_module(target_lm, "lm_head", "target")
    shared_roles = {}
    if draft is not None:
        for role in ("input_embeddings", "lm_head", "mtp_shared_head"):
            try:
                sites = role_sites(draft, target_lm, role)
            except SurgeryError:
                continue
            shared_roles[role] = all(get_path(draft, d) is get_path(target_lm, t) for d, t in sites)
    d_head = role_module(draft, "lm_head", "draft")
    d2t = getattr(draft, "draft_id_to_target_id", None)
    aux = getattr(getattr(target_lm, "model", target_lm), "aux_hidden_state_layers", None)
    mtp = mtp_shared_heads(draft)
    return {
        "method": getattr(getattr(proposer, "speculative_config", None), "method", None),
        "draft_class": type(draft).__name__,
        "target_aux_layers": list(aux) if aux is not None else None,
        "draft_embed_is_target": same(d_embed, role_module(target_lm, "input_embeddings", "target")),
        "draft_lm_head_is_target": same(d_head, t_head),
        "draft_lm_head_rows": int(d_head.weight.shape[0]) if d_head is not None and hasattr(d_head, "weight") else None,
        "draft_d2t": d2t.detach().cpu().tolist() if d2t is not None else None,
        "shared_roles": shared_roles,
        "draft_mtp_layers": sorted(mtp) if mtp else None,
        "draft_shared_heads_are_target": [same(mtp[i], t_head) for i in sorted(mtp)] if mtp else None,
        # block / parallel drafters (P-EAGLE, DFlash): one pass over mask slots, and the mask token used
        "parallel_drafting": getattr(proposer, "parallel_drafting", None),
        "parallel_drafting_token_id": getattr(proposer, "parallel_drafting_token_id", None)
        if getattr(proposer, "parallel_drafting", False) else None,
    }


def plan_steps(plan) -> list[dict]:
    """One entry per recipe step of the plan: step number, op kind, role, label."""

    out: dict[int, dict] = {}
    for op in plan.operations:
        out.setdefault(op.step, {"step": op.step, "op": op.op, "role": getattr(op, "role", None),
                                 "label": UNITS[op.op].label(op)})
    return [out[k] for k in sorted(out)]


def engine_checks(plan, report, wiring: dict | None) -> list[dict]:
    """Checks, on the live engine, of the plan steps the plugin's applier reported as not
    performed (SRG321): vLLM's own loader did them, so we verify the outcome instead. A
    not-performed step no check here covers stays unverified (``ok`` False): no silent gap."""
    out = []
    for op in plan.operations:
        if not any(d.message.startswith(f"{op.id}: ") for d in report.not_applicable):
            continue
        if op.op == "capture_hidden_states":
            want = sorted(set(op.layers or ()))
            got = (wiring or {}).get("target_aux_layers")
            out.append({"op": op.id, "check": f"target returns aux hidden states of layers {want}",
                        "ok": got == want, "live": got})
        else:
            out.append({"op": op.id, "check": "not performed by the applier and not checked on the engine",
                        "ok": False})
    return out


def brief_wiring(wiring: dict | None) -> dict | None:
    """The wiring for the report: the d2t map summarised (its length), not listed."""
    if not wiring:
        return wiring
    out = dict(wiring)
    d2t = out.pop("draft_d2t", None)
    out["draft_d2t_len"] = len(d2t) if d2t is not None else None
    return out
