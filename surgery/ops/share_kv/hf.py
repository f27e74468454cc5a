"""share_kv on HF transformers (Gemma 4): wired under transformers' own `shared_kv_states` contract.

A KV-shared attention layer reads `shared_kv_states[self.layer_type]` (modeling_gemma4.py,
Gemma4TextAttention.forward); the target's layers with `store_full_length_kv` publish there under
their own `layer_type`. For transformers' default map nothing is rebound; for any other target
layer j, layer j publishes under its own key (surgery/live/kvrouting.py `kv_key`) and the draft layer
is pointed at that key, so a wired pair runs in transformers' `generate` and in ours.
"""
from __future__ import annotations

from typing import Any

from ...text.diagnostics import SurgeryError, diag
from ...live.kvrouting import kv_key, parse_kv_key, publisher_key, reads_target_layer
from ...live.mutations import SetAttr
from ...live.paths import attention_path, get_path
from ...live.prepared import Check, Prepared


def prepare(op: Any, draft: Any, target: Any, ctx: Any) -> Prepared:
    """The HF share_kv operation: checks, reversible mutations and the verification check.

    Raises SurgeryError (nothing touched) when the live modules cannot do what the plan says."""
    d_path = attention_path("hf", draft, op.draft_layer, "draft")
    t_path = attention_path("hf", target, op.target_layer, "target")
    d_attn, t_attn = get_path(draft, d_path), get_path(target, t_path)
    if not getattr(d_attn, "is_kv_shared_layer", False):
        raise SurgeryError(diag("SRG402", f"{op.id}: draft {d_path} computes its own K/V (is_kv_shared_layer is "
                                "False); HF can only redirect KV-shared layers"))
    if getattr(t_attn, "is_kv_shared_layer", False):
        raise SurgeryError(diag("SRG307", f"{op.id}: target {t_path} is KV-shared and holds no K/V of its own"))
    if getattr(d_attn, "head_dim", None) != getattr(t_attn, "head_dim", None):
        raise SurgeryError(diag("SRG405", f"{op.id}: draft head_dim {getattr(d_attn, 'head_dim', None)} != target "
                                f"head_dim {getattr(t_attn, 'head_dim', None)} on the live modules"))

    key = publisher_key(t_attn)
    mutations = []
    if key is None or parse_kv_key(key) not in (None, op.target_layer):
        # target layer j publishes nothing today: make it publish under its own key
        key = kv_key(op.target_layer)
        mutations += [SetAttr(f"{op.id} (target publishes)", t_attn, "layer_type", key),
                      SetAttr(f"{op.id} (target publishes)", t_attn, "store_full_length_kv", True)]
    if d_attn.layer_type != key:
        mutations.append(SetAttr(op.id, d_attn, "layer_type", key))

    def reads() -> Check:
        ok, detail = reads_target_layer(d_attn, target, op.target_layer)
        return Check(op.id, f"draft {d_path} reads target layer {op.target_layer}'s K/V through transformers' "
                     "shared_kv_states (live target forward)", ok, detail)

    return Prepared(op, mutations, [reads])
