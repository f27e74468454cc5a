"""The HF transformers adapter: plan operations on live `PreTrainedModel`s.

KV sharing in transformers' Gemma 4: a KV-shared attention layer reads
`shared_kv_states[self.layer_type]` (modeling_gemma4.py, Gemma4TextAttention.forward); the target
publishes there. surgery/hf/kvrouting.py `prepare_share_kv` wires a map under that contract (no
rebinding for transformers' default map), so a wired pair runs in transformers' own `generate`.
"""
from __future__ import annotations

from typing import Any

from ..applier.core import Adapter, Check, NotApplicable, Prepared
from ..applier.paths import get_path, layers_path, role_path, role_paths
from ..applier.sharing import decide_share, must_exist_problem, prepare_module_share
from ..diagnostics import SurgeryError, diag
from ..plan import Operation, Plan


def _role_path(model: Any, op: Operation, side: str) -> str:
    """The role's module path on this side; a role HF models do not have is not applicable here."""
    if role_paths("hf", op.role, side, op.layer) is None:
        raise NotApplicable(f"role {op.role} has no HF module (surgery/hf/engine.yaml)")
    return role_path("hf", model, op.role, side, op.layer)


def draft_has_own(draft: Any, module_path: str) -> bool | None:
    """Whether the draft checkpoint brought weights under `module_path`: surgery's loader
    (surgery/hf/pair.py load_pair) records the checkpoint's missing keys on the model; a model
    loaded elsewhere carries no record (None: cannot tell)."""
    missing = getattr(draft, "_surgery_missing_keys", None)
    if missing is None:
        return None
    return not any(k == module_path or k.startswith(module_path + ".") for k in missing)


class HFAdapter(Adapter):
    engine = "hf"

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
        d_path = _role_path(draft, op, "draft")
        t_path = _role_path(target, op, "target")
        t_mod = get_path(target, t_path)
        d_mod = get_path(draft, d_path)
        if op.role == "input_embeddings":
            self._check_embedding_fits(op, draft, d_mod, t_mod)
        decision = decide_share(op.if_draft_has_own, d_mod, t_mod, draft_has_own(draft, d_path))
        return prepare_module_share(op, draft, d_path, t_path, d_mod, t_mod, decision)

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
        d_path = _role_path(draft, op, "draft")
        d_mod = get_path(draft, d_path)
        t_mod = get_path(target, _role_path(target, op, "target"))
        if op.must_exist:
            has_own = draft_has_own(draft, d_path)
            problem = must_exist_problem(op.role, has_own)
            if has_own is False:
                raise SurgeryError(diag("SRG407", f"{op.id}: {problem} ({d_path})"))
            if problem is not None:
                raise NotApplicable(problem + "; load the pair with surgery's loader (surgery.hf.pair.load_pair)")
        checks = [lambda: Check(op.id, f"draft {d_path} is still the draft's own module", get_path(draft, d_path) is d_mod
                                and d_mod is not t_mod)]
        if op.must_exist:
            checks.append(lambda: Check(op.id, f"the draft checkpoint brought its own {op.role} (must_exist)",
                                        draft_has_own(draft, d_path) is True))
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
