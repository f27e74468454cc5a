"""The load-time side of share_module, the same for every engine:

- `if_draft_has_own`: `share` (always), `share_if_identical` (share when the draft brings no
  weights of its own or identical ones: the live tensors are compared; a head's own, different
  weights are never overwritten), `keep` (share only when the draft brings none);
- once a performer found the two modules and decided: the reversible rebinding and its checks.

Whether the draft "brings its own" is engine knowledge the performer gets from its context
(surgery/live/hf.py, surgery/live/vllm.py); None means the engine cannot tell.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ...live.mutations import SetAttr
from ...live.paths import get_path, split_parent
from ...live.prepared import Check, Prepared


@dataclass(frozen=True)
class ShareDecision:
    share: bool
    why: str


def weights_identical(a: Any, b: Any) -> bool:
    """Same object, or tensors of one shape with equal values (compared on CPU, like vLLM does)."""
    if a is b:
        return True
    wa, wb = getattr(a, "weight", None), getattr(b, "weight", None)
    if wa is None or wb is None:
        return False
    if wa is wb:
        return True
    import torch

    if not (isinstance(wa, torch.Tensor) and isinstance(wb, torch.Tensor)) or wa.shape != wb.shape:
        return False
    return bool(torch.equal(wa.detach().cpu(), wb.detach().cpu()))


def decide_share(policy: str | None, draft_mod: Any, target_mod: Any, draft_has_own: bool | None) -> ShareDecision:
    policy = policy or "share"
    if policy == "share":
        return ShareDecision(True, "if_draft_has_own: share")
    if draft_has_own is False:
        return ShareDecision(True, f"if_draft_has_own: {policy}; the draft checkpoint brings none of its own")
    if policy == "keep":
        why = "brings its own" if draft_has_own else "may bring its own (the engine cannot tell)"
        return ShareDecision(False, f"if_draft_has_own: keep; the draft {why}: kept")
    if weights_identical(draft_mod, target_mod):
        return ShareDecision(True, "if_draft_has_own: share_if_identical; the draft's weights equal the target's")
    return ShareDecision(False, "if_draft_has_own: share_if_identical; the draft brings its own, different weights: "
                                "kept (never overwritten)")


def prepare_module_share(op: Any, draft: Any, target: Any, ctx: Any,
                         fits: Callable[[Any, Any], None] | None = None) -> Prepared:
    """Find the role's two modules through the context, run the performer's own `fits(draft_mod,
    target_mod)` check (raises to refuse), decide, and prepare either the rebinding of the draft's
    module to the target's (checked by identity) or keeping the draft's own (checked: still its
    own, not the target's)."""
    d_path = ctx.role_path(draft, op, "draft")
    t_path = ctx.role_path(target, op, "target")
    t_mod = get_path(target, t_path)
    d_mod = get_path(draft, d_path)
    if fits is not None:
        fits(d_mod, t_mod)
    decision = decide_share(op.if_draft_has_own, d_mod, t_mod, ctx.draft_has_own(draft, op.role, d_path))
    if not decision.share:
        def kept() -> Check:
            now = get_path(draft, d_path)
            return Check(op.id, f"draft {d_path} keeps its own module ({decision.why})",
                         now is d_mod and now is not t_mod)

        return Prepared(op, [], [kept], decision=decision.why)
    parent, name = split_parent(draft, d_path)

    def identical() -> Check:
        now = get_path(draft, d_path)
        return Check(op.id, f"draft {d_path} is the target's {t_path} (same object, no copy)", now is t_mod,
                     f"id(draft)={id(now):#x} id(target)={id(t_mod):#x}")

    return Prepared(op, [SetAttr(op.id, parent, name, t_mod)], [identical], decision=decision.why)
