"""share_kv inside a vLLM worker: KV sharing is by name (`Attention.kv_sharing_target_layer_name`),
read when KV-cache specs are collected. Setting it after construction skips vLLM's own constructor
check (`validate_kv_sharing_target`) and leaves the backend impl's copy of the name at None; so
the performer re-runs that check, adds the ones vLLM never does (same head size / KV heads /
window / cache dtype, target on this pipeline stage) and keeps the impl's copy in sync."""
from __future__ import annotations

from typing import Any

from ...text.diagnostics import SurgeryError, diag
from ...engine.cards import card
from ...live.prepared import Check, Prepared
from ...live.vllm import kv_sharing_mutations
from ..common import MATCH_CODES


def prepare(op: Any, draft: Any, target: Any, ctx: Any) -> Prepared:
    d_attn, t_attn = ctx.attention_pair(op, draft, target)
    name = t_attn.layer_name
    sfc = ctx.sfc
    if sfc is not None:
        if name not in sfc or sfc[name] is not t_attn:
            raise SurgeryError(diag("SRG316", f"{op.id}: target layer {name} is not registered in this engine's "
                                    "forward context (another pipeline stage?)"))
        if d_attn.layer_name not in sfc:
            raise SurgeryError(diag("SRG402", f"{op.id}: draft layer {d_attn.layer_name} is not registered"))
    for attr, fact in card("vllm").attention_facts.items():
        dv, tv = getattr(d_attn, attr, None), getattr(t_attn, attr, None)
        if dv != tv:
            raise SurgeryError(diag(MATCH_CODES.get(fact, "SRG402"), f"{op.id}: draft {d_attn.layer_name} {attr}={dv!r} "
                                    f"but target {name} {attr}={tv!r}: the backend cannot read one layer's cache as "
                                    "the other's"))
    if getattr(t_attn, "kv_sharing_target_layer_name", None):
        raise SurgeryError(diag("SRG307", f"{op.id}: target {name} itself reads "
                                f"{t_attn.kv_sharing_target_layer_name}; point the draft at a layer that owns KV"))
    muts = kv_sharing_mutations(op.id, d_attn, name)
    impl = getattr(d_attn, "impl", None)

    def named() -> Check:
        got = d_attn.kv_sharing_target_layer_name
        impl_got = getattr(impl, "kv_sharing_target_layer_name", name) if impl is not None else name
        return Check(op.id, "draft layer reads the mapped target layer (layer and impl names)",
                     got == name and impl_got == name, f"layer={got!r} impl={impl_got!r} want={name!r}")

    def validated() -> Check:
        if sfc is None:
            return Check(op.id, "vLLM validate_kv_sharing_target", True, "no forward context given")
        from vllm.model_executor.layers.attention.attention import validate_kv_sharing_target

        validate_kv_sharing_target(d_attn.layer_name, name, sfc)
        return Check(op.id, "vLLM validate_kv_sharing_target", True)

    return Prepared(op, muts, [named, validated])
