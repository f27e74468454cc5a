"""Load-time decisions both engine adapters take the same way (one place each):

- `if_draft_has_own` of share_module: `share` (always), `share_if_identical` (share when the draft
  brings no weights of its own or identical ones: the live tensors are compared; a head's own,
  different weights are never overwritten), `keep` (share only when the draft brings none);
- `must_exist` of keep: the draft checkpoint must have brought its own weights for the role.

Whether the draft "brings its own" is engine knowledge the adapter passes in: vLLM's EAGLE models
set `has_own_embed_tokens` / `has_own_lm_head` while loading the checkpoint; surgery's HF loader
records the checkpoint's missing keys. None means the engine cannot tell.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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


def must_exist_problem(role: str, draft_has_own: bool | None) -> str | None:
    """None when the draft checkpoint brought its own weights for the role; else why not."""
    if draft_has_own is True:
        return None
    if draft_has_own is False:
        return f"the draft checkpoint has no weights for {role} (must_exist: true)"
    return f"the engine cannot tell whether the draft checkpoint brought weights for {role} (must_exist: true)"


def prepare_module_share(op: Any, draft: Any, d_path: str, t_path: str, d_mod: Any, t_mod: Any,
                         decision: ShareDecision):
    """The one share_module preparation both engine adapters use once they have found the two
    modules and decided: either rebind the draft's module to the target's (checked by identity), or
    keep the draft's own (checked: still its own, not the target's). Reversible, like every mutation."""
    from .core import Check, Prepared
    from .mutations import SetAttr
    from .paths import get_path, split_parent

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

