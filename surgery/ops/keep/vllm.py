"""keep inside a vLLM worker. vLLM may already have replaced the draft's embedding by the
target's before the plugin runs (Gemma 4 MTP): then the draft's own embedding is gone and a
`tied_to: draft_embeddings` tie can only be checked as "not the target's embedding weight"."""
from __future__ import annotations

from typing import Any

from ...live.paths import get_path, role_path
from ...live.prepared import Check, Prepared
from . import own_weights_check, require_own_weights


def prepare(op: Any, draft: Any, target: Any, ctx: Any) -> Prepared:
    d_path = ctx.role_path(draft, op, "draft")
    d_mod = get_path(draft, d_path)
    t_mod = get_path(target, ctx.role_path(target, op, "target"))
    require_own_weights(op, draft, d_path, ctx, f"vLLM {type(draft).__name__}", f" ({type(draft).__name__} records no has_own flag)")

    def own() -> Check:
        now = get_path(draft, d_path)
        ok = now is d_mod and now is not t_mod
        w, tw = getattr(now, "weight", None), getattr(t_mod, "weight", None)
        if w is not None and tw is not None:
            ok = ok and w is not tw
        return Check(op.id, f"draft {d_path} is still its own (not the target's)", ok)

    checks = [own]
    if op.must_exist:
        checks.append(own_weights_check(op, draft, d_path, ctx))
    if op.tied_to in ("draft_embeddings", "none"):
        own_emb = get_path(draft, role_path("vllm", draft, "input_embeddings", "draft"))
        t_emb = get_path(target, role_path("vllm", target, "input_embeddings", "target"))
        own_is_target = own_emb is t_emb

        def tie() -> Check:
            w = getattr(get_path(draft, d_path), "weight", None)
            on_target = w is not None and w is getattr(t_emb, "weight", None)
            on_own = w is not None and w is getattr(own_emb, "weight", None) and not own_is_target
            if op.tied_to == "draft_embeddings":
                ok = not on_target and (own_is_target or on_own)
            else:
                ok = w is not None and not on_target and not on_own
            return Check(op.id, f"draft {op.role} tie as planned (tied_to: {op.tied_to}; never the target's "
                         "embedding weight)", ok, f"on_target={on_target} on_own={on_own}")

        checks.append(tie)
    return Prepared(op, [], checks)
