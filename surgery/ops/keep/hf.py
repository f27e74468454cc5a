"""keep on HF transformers models: the draft's module stays its own; `tied_to` checked on the
weights; `must_exist` from the missing keys surgery's loader recorded (surgery/live/hf.py)."""
from __future__ import annotations

from typing import Any

from ...live.paths import get_path, role_path
from ...live.prepared import Check, Prepared
from . import own_weights_check, require_own_weights


def prepare(op: Any, draft: Any, target: Any, ctx: Any) -> Prepared:
    d_path = ctx.role_path(draft, op, "draft")
    d_mod = get_path(draft, d_path)
    t_mod = get_path(target, ctx.role_path(target, op, "target"))
    require_own_weights(op, draft, d_path, ctx, d_path, "; load the pair with surgery's loader (surgery.hf.loader.load_pair)")
    checks = [lambda: Check(op.id, f"draft {d_path} is still the draft's own module", get_path(draft, d_path) is d_mod
                            and d_mod is not t_mod)]
    if op.must_exist:
        checks.append(own_weights_check(op, draft, d_path, ctx))
    if op.tied_to == "draft_embeddings":
        own_embedding = get_path(draft, role_path("hf", draft, "input_embeddings", "draft"))
        own_weight = own_embedding.weight
        target_weight = get_path(target, role_path("hf", target, "input_embeddings", "target")).weight

        def tie_kept() -> Check:
            w = get_path(draft, d_path).weight
            return Check(op.id, f"draft {op.role} stays tied to the draft's own embedding weight",
                         w is own_weight and w is not target_weight and w.data_ptr() != target_weight.data_ptr(),
                         f"{op.role}.weight {tuple(w.shape)}; own embedding {tuple(own_weight.shape)}")

        checks.append(tie_kept)
    elif op.tied_to == "none":
        own_embedding = get_path(draft, role_path("hf", draft, "input_embeddings", "draft"))

        def untied() -> Check:
            w = getattr(get_path(draft, d_path), "weight", None)
            return Check(op.id, f"draft {op.role} is not tied to the draft's embedding (tied_to: none)",
                         w is not None and w is not own_embedding.weight)

        checks.append(untied)
    return Prepared(op, [], checks)
