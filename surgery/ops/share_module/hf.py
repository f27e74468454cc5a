"""share_module on HF transformers models.

Besides the shared decision (decide.py): an input embedding the draft takes from the target must
have the draft's vocabulary, and a Gemma 4 assistant's `pre_projection` consumes
[embedding ; target hidden state], so the embedding width must be half its input width."""
from __future__ import annotations

from typing import Any

from ...text.diagnostics import SurgeryError, diag
from ...live.prepared import Prepared
from .decide import prepare_module_share


def prepare(op: Any, draft: Any, target: Any, ctx: Any) -> Prepared:
    def fits(d_mod: Any, t_mod: Any) -> None:
        if op.role != "input_embeddings":
            return
        t_vocab, t_width = t_mod.weight.shape
        d_vocab = d_mod.weight.shape[0]
        if t_vocab != d_vocab:
            raise SurgeryError(diag("SRG405", f"{op.id}: target embedding has {t_vocab} rows, draft {d_vocab}"))
        pre = getattr(draft, "pre_projection", None)
        if pre is not None and pre.in_features % 2 == 0 and pre.in_features // 2 != t_width:
            raise SurgeryError(diag("SRG405", f"{op.id}: draft pre_projection expects embeddings of width "
                                    f"{pre.in_features // 2}, the target's are {t_width}"))

    return prepare_module_share(op, draft, target, ctx, fits)
