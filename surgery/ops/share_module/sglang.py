"""share_module inside an SGLang speculative worker: the shared decision (decide.py), then SGLang's
own way of sharing: the draft module's `weight` rebound to the target's tensor (models/llama.py
`set_embed_and_head` / `set_embed`), the module object kept. Checked by identity of the weight.

SGLang records nothing about what the draft checkpoint brought; the context answers has-own only
where the hook recorded the names `load_weights` received (surgery/live/sglang.py)."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from ...text.diagnostics import SurgeryError, diag
from ...live.mutations import SetAttr
from ...live.paths import get_path
from ...live.prepared import Check, Prepared
from .decide import decide_share


def prepare(op: Any, draft: Any, target: Any, ctx: Any) -> Prepared:
    d_path = ctx.role_path(draft, op, "draft")
    t_path = ctx.role_path(target, op, "target")
    d_mod, t_mod = get_path(draft, d_path), get_path(target, t_path)
    t_weight = getattr(t_mod, "weight", None)
    d_weight = getattr(d_mod, "weight", None)
    if t_weight is None or d_weight is None:
        raise SurgeryError(diag("SRG405", f"{op.id}: {'target ' + t_path if t_weight is None else 'draft ' + d_path} "
                                "has no weight to share (SGLang shares weights, not modules)"))
    own = ctx.own_weight(draft, d_path)  # before SGLang's init_lm_head replaced it, where it did
    if tuple(own.shape) != tuple(t_weight.shape):
        raise SurgeryError(diag("SRG405", f"{op.id}: draft {d_path}.weight is {tuple(own.shape)}, the target's "
                                f"{tuple(t_weight.shape)}"))
    replaced = own is not d_weight
    decision = decide_share(op.if_draft_has_own, SimpleNamespace(weight=own), t_mod,
                            ctx.draft_has_own(draft, op.role, d_path))
    if not decision.share:
        why = decision.why + ("; SGLang's init_lm_head had replaced it with the target's: restored" if replaced else "")

        def kept() -> Check:
            now = getattr(get_path(draft, d_path), "weight", None)
            return Check(op.id, f"draft {d_path}.weight is its own tensor ({why})", now is own and now is not t_weight)

        return Prepared(op, [SetAttr(op.id, d_mod, "weight", own)] if replaced else [], [kept], decision=why)

    def identical() -> Check:
        now = getattr(get_path(draft, d_path), "weight", None)
        return Check(op.id, f"draft {d_path}.weight is the target's {t_path}.weight (same tensor, no copy)",
                     now is t_weight, f"id(draft)={id(now):#x} id(target)={id(t_weight):#x}")

    return Prepared(op, [SetAttr(op.id, d_mod, "weight", t_weight)], [identical], decision=decision.why)
