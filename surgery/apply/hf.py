"""The HF transformers adapter: plan operations on live `PreTrainedModel`s.

KV sharing in transformers' Gemma 4: a KV-shared attention layer reads
`shared_kv_states[self.layer_type]` (modeling_gemma4.py, Gemma4TextAttention.forward); the target
publishes there. surgery/hf/kvrouting.py `prepare_share_kv` wires a map under that contract (no
rebinding for transformers' default map), so a wired pair runs in transformers' own `generate`.
"""
from __future__ import annotations

from typing import Any

from ..diagnostics import SurgeryError, diag
from ..plan import Operation, Plan
from .core import Adapter, Check, Prepared
from .mutations import SetAttr
from .paths import get_path, layers_path, role_path, split_parent


class HFAdapter(Adapter):
    engine = "hf"

    def applicable(self, op: Operation) -> str | None:
        if op.op == "copy_attr":
            return f"HF attention layers hold no {op.attr} (KV-cache quantisation scales are a vLLM concept)"
        if op.op == "share_module" and op.role not in ("input_embeddings", "lm_head", "final_norm", "rotary_emb",
                                                       "per_layer_embeddings"):
            return f"role {op.role} has no HF module"
        return None

    def static_checks(self, plan: Plan, draft: Any, target: Any) -> list:
        problems = []
        for side, model, facts in (("draft", draft, plan.draft), ("target", target, plan.target)):
            n = len(get_path(model, layers_path("hf", model, side)))
            if n != facts["num_layers"]:
                problems.append(diag("SRG402", f"live {side} has {n} decoder layers but its config says "
                                     f"{facts['num_layers']}"))
        return problems

    # -- share_kv ------------------------------------------------------------------------------
    def _prepare_share_kv(self, op: Operation, draft: Any, target: Any) -> Prepared:
        from ..hf.kvrouting import prepare_share_kv

        return prepare_share_kv(op, draft, target)

    # -- share_module / keep ---------------------------------------------------------------------
    def _prepare_share_module(self, op: Operation, draft: Any, target: Any) -> Prepared:
        d_path = role_path("hf", draft, op.role, "draft")
        t_path = role_path("hf", target, op.role, "target")
        t_mod = get_path(target, t_path)
        d_mod = get_path(draft, d_path)
        if op.role == "input_embeddings":
            self._check_embedding_fits(op, draft, d_mod, t_mod)
        parent, name = split_parent(draft, d_path)

        def identical() -> Check:
            now = get_path(draft, d_path)
            return Check(op.id, f"draft {d_path} is the target's {t_path} (same object, no copy)", now is t_mod,
                         f"id(draft)={id(now):#x} id(target)={id(t_mod):#x}")

        return Prepared(op, [SetAttr(op.id, parent, name, t_mod)], [identical])

    @staticmethod
    def _check_embedding_fits(op: Operation, draft: Any, d_mod: Any, t_mod: Any) -> None:
        t_vocab, t_width = t_mod.weight.shape
        d_vocab = d_mod.weight.shape[0]
        if t_vocab != d_vocab:
            raise SurgeryError(diag("SRG405", f"{op.id}: target embedding has {t_vocab} rows, draft {d_vocab}"))
        pre = getattr(draft, "pre_projection", None)
        if pre is not None and pre.in_features % 2 == 0 and pre.in_features // 2 != t_width:
            raise SurgeryError(diag("SRG405", f"{op.id}: draft pre_projection expects embeddings of width "
                                    f"{pre.in_features // 2}, the target's are {t_width}"))

    def _prepare_keep(self, op: Operation, draft: Any, target: Any) -> Prepared:
        d_path = role_path("hf", draft, op.role, "draft")
        d_mod = get_path(draft, d_path)
        t_mod = get_path(target, role_path("hf", target, op.role, "target"))
        checks = [lambda: Check(op.id, f"draft {d_path} is still the draft's own module", get_path(draft, d_path) is d_mod
                                and d_mod is not t_mod)]
        if op.tied_to == "draft_embeddings" and op.role == "lm_head":
            own_embedding = get_path(draft, role_path("hf", draft, "input_embeddings", "draft"))
            own_weight = own_embedding.weight
            target_weight = get_path(target, role_path("hf", target, "input_embeddings", "target")).weight

            def tie_kept() -> Check:
                w = get_path(draft, d_path).weight
                return Check(op.id, "draft lm_head stays tied to the draft's own embedding weight",
                             w is own_weight and w is not target_weight and w.data_ptr() != target_weight.data_ptr(),
                             f"lm_head.weight {tuple(w.shape)}; own embedding {tuple(own_weight.shape)}")

            checks.append(tie_kept)
        return Prepared(op, [], checks)
