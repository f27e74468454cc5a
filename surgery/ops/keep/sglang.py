"""keep inside an SGLang speculative worker: the draft's weight for the role stays its own tensor
(SGLang shares by rebinding weights, so "kept" is checked on the weight, not the module).

`must_exist`: SGLang records nothing about what the checkpoint brought (sglang#27908); the context
answers only where the hook recorded the names the draft's `load_weights` received."""
from __future__ import annotations

from typing import Any

from ...live.mutations import SetAttr
from ...live.paths import get_path, role_path
from ...live.prepared import Check, Prepared
from . import own_weights_check, require_own_weights


def prepare(op: Any, draft: Any, target: Any, ctx: Any) -> Prepared:
    d_path = ctx.role_path(draft, op, "draft")
    d_mod = get_path(draft, d_path)
    current = getattr(d_mod, "weight", None)
    d_weight = ctx.own_weight(draft, d_path)  # before SGLang's init_lm_head replaced it, where it did
    t_weight = getattr(get_path(target, ctx.role_path(target, op, "target")), "weight", None)
    # SGLang's init_lm_head replaces an EAGLE / NEXTN draft's head and embedding whatever it brought:
    # keeping means putting the draft's own tensor back
    restore = [SetAttr(op.id, d_mod, "weight", d_weight)] if d_weight is not None and current is not d_weight else []
    require_own_weights(op, draft, d_path, ctx, f"SGLang {type(draft).__name__}",
                        " (SGLang records no loaded weight names for this draft: the surgery hook did not see "
                        "its load_weights)")

    def own() -> Check:
        now = getattr(get_path(draft, d_path), "weight", None)
        return Check(op.id, f"draft {d_path}.weight is still its own tensor (not the target's)",
                     now is not None and now is d_weight and now is not t_weight)

    checks = [own]
    if op.must_exist:
        checks.append(own_weights_check(op, draft, d_path, ctx))
    if op.tied_to in ("draft_embeddings", "none"):
        own_emb = getattr(get_path(draft, role_path("sglang", draft, "input_embeddings", "draft")), "weight", None)
        t_emb = getattr(get_path(target, role_path("sglang", target, "input_embeddings", "target")), "weight", None)

        def tie() -> Check:
            # SGLang ties by module (`self.lm_head = self.model.embed_tokens`): its set_embed then
            # moves a tied head onto the TARGET's embedding; never allowed here
            w = getattr(get_path(draft, d_path), "weight", None)
            on_target = w is not None and w is t_emb
            on_own = w is not None and w is own_emb
            ok = (on_own if op.tied_to == "draft_embeddings" else w is not None and not on_own) and not on_target
            return Check(op.id, f"draft {op.role} tie as planned (tied_to: {op.tied_to}; never the target's "
                         "embedding weight)", ok, f"on_target={on_target} on_own={on_own}")

        checks.append(tie)
    return Prepared(op, restore, checks, decision="SGLang's init_lm_head had replaced it: restored" if restore else None)
