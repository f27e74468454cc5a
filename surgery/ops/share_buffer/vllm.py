"""share_buffer inside a vLLM worker, as vLLM's proposer does it (llm_base_proposer.py, after
`_maybe_share_lm_head`): the draft's inner model gets the target's object (whether it had one or
not), and with `all_modules` every submodule holding the attribute too (indexers, sparse-attention
backends)."""
from __future__ import annotations

from typing import Any

from ...live.mutations import SetAttr
from ...live.prepared import Check, NotApplicable, Prepared


def prepare(op: Any, draft: Any, target: Any, ctx: Any) -> Prepared:
    attr = op.attr
    source = next((m for m in (getattr(target, "model", None), target) if m is not None and hasattr(m, attr)), None)
    if source is None and hasattr(target, "named_modules"):
        source = next((m for _, m in target.named_modules() if hasattr(m, attr)), None)
    if source is None:
        raise NotApplicable(f"the target holds no {attr}")
    value = getattr(source, attr)
    root = getattr(draft, "model", draft)
    holders = [root]
    if op.scope == "all_modules" and hasattr(root, "named_modules"):
        holders += [m for _, m in root.named_modules() if m is not root and hasattr(m, attr)]
    muts = [SetAttr(f"{op.id}:{i}", m, attr, value) for i, m in enumerate(holders)]

    def shared() -> Check:
        same = sum(getattr(m, attr) is value for m in holders)
        return Check(op.id, f"every draft module holding {attr} ({op.scope}) uses the target's object",
                     same == len(holders), f"{same}/{len(holders)}")

    return Prepared(op, muts, [shared])
