"""copy_attrs inside a vLLM worker: KV-cache scales exist in three representations per attention
layer (tensor buffer or Parameter, Python float, CPU tensor); vLLM's legacy runner copies none of
them to the draft. Each mode keeps what the draft's kernels read intact: `clone_keep_registration`
keeps the draft's buffer / Parameter kind, `copy_inplace` keeps the tensor's identity (other
holders see the value), `assign` rebinds."""
from __future__ import annotations

from typing import Any

from ...text.diagnostics import SurgeryError, diag
from ...live.mutations import CopyInPlace, SetAttr, registration
from ...live.prepared import Check, NotApplicable, Prepared
from ...live.values import show, values_equal


def prepare(op: Any, draft: Any, target: Any, ctx: Any) -> Prepared:
    import torch

    d_attn, t_attn = ctx.attention_pair(op, draft, target)
    attr = op.attr
    if not hasattr(t_attn, attr) and not hasattr(d_attn, attr):
        # e.g. `_k_scale_cpu` exists in vLLM 0.32 but not in 0.25: nothing to keep in sync
        raise NotApplicable(f"neither attention layer has {attr} in this vLLM version")
    if not hasattr(t_attn, attr):
        raise SurgeryError(diag("SRG401", f"{op.id}: target attention has no attribute {attr}"))
    if not hasattr(d_attn, attr):
        raise SurgeryError(diag("SRG401", f"{op.id}: draft attention has no attribute {attr}"))
    src, old = getattr(t_attn, attr), getattr(d_attn, attr)
    kind = registration(d_attn, attr)
    if op.mode == "assign":
        value = src.detach().clone() if isinstance(src, torch.Tensor) else src
        muts = [SetAttr(op.id, d_attn, attr, value)]
    elif op.mode == "clone_keep_registration":
        if not isinstance(src, torch.Tensor):
            raise SurgeryError(diag("SRG405", f"{op.id}: clone_keep_registration needs a tensor, target {attr} "
                                    f"is {type(src).__name__}"))
        device = old.device if isinstance(old, torch.Tensor) else src.device
        muts = [SetAttr(op.id, d_attn, attr, src.detach().clone().to(device), kind=kind)]
    else:  # copy_inplace
        if not isinstance(old, torch.Tensor) or not isinstance(src, torch.Tensor):
            raise SurgeryError(diag("SRG405", f"{op.id}: copy_inplace needs tensors on both sides"))
        if old.shape == src.shape:
            muts = [CopyInPlace(op.id, old, src)]
        else:
            # per-head target vs scalar draft: the shape follows the target; keep the registration
            muts = [SetAttr(op.id, d_attn, attr, src.detach().clone().to(old.device), kind=kind)]

    def equal() -> Check:
        now, want = getattr(d_attn, attr), getattr(t_attn, attr)
        return Check(op.id, f"{attr} equals the target's ({op.mode})", values_equal(now, want),
                     f"draft {show(now)} target {show(want)}")

    def kept() -> Check:
        now_kind = registration(d_attn, attr)
        now, want = getattr(d_attn, attr), getattr(t_attn, attr)
        aliased = isinstance(now, torch.Tensor) and (now is want or (now.numel() and now.data_ptr() == want.data_ptr()))
        return Check(op.id, f"{attr} keeps the draft's registration ({kind}) and does not alias the target",
                     now_kind == kind and not aliased, f"kind {now_kind}, aliased {aliased}")

    return Prepared(op, muts, [equal, kept])
