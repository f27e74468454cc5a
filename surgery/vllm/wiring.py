"""What a live vLLM engine's draft wiring looks like: its attention layers by index, a plain-data
description of how the draft reads the target (KV sharing per layer, cache identity, KV scales in
their three representations, shared embedding / head), and the way to the live objects of an
in-process `vllm.LLM`. Read-only, except `set_kv_sharing_target` (wiring one layer by hand).

Everything here imports vLLM lazily, inside functions, so ``surgery`` stays importable without it.
Findings behind it: ``bench/vllm_probe/FINDINGS.md``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..live.paths import get_path, role_paths
from ..live.vllm import VLLMContext, kv_sharing_mutations, target_language_model
from ..text.diagnostics import diag
from .hooks import target_model_of
from .kv_scales import SCALE_CPU_ATTRS, SCALE_FLOAT_ATTRS, SCALE_TENSOR_ATTRS, scale_info

__all__ = ["LayerMaps", "SCALE_TENSOR_ATTRS", "SCALE_FLOAT_ATTRS", "SCALE_CPU_ATTRS", "get_layer_maps",
           "set_kv_sharing_target", "describe_wiring", "role_module", "find_live_runner", "find_live_drafter",
           "AtLoad", "at_load", "observed", "hint_problems"]
AUDITED_ROLES = ("input_embeddings", "lm_head")  # the roles whose module the audit compares (surgery/vllm/audit.py)

# the KV-scale attributes on vllm.model_executor.layers.attention.Attention, named in
# surgery/vllm/kv_scales.py (the scales' lifecycle) and re-exported here as before


def role_module(model: Any, role: str, side: str, layer: int | None = None) -> Any | None:
    """The live module for a role (paths from the vLLM engine card; `layer` for a per-layer role),
    or None where the model has none."""
    if model is None:
        return None
    for path in role_paths("vllm", role, side, layer) or ():
        try:
            return get_path(model, path)
        except (AttributeError, IndexError, KeyError, TypeError):
            continue
    return None


@dataclass
class LayerMaps:
    """Draft and target attention layers of one live engine, keyed by layer index."""

    draft: dict[int, Any] = field(default_factory=dict)  # index -> Attention
    target: dict[int, Any] = field(default_factory=dict)
    draft_names: dict[int, str] = field(default_factory=dict)  # index -> full layer name
    target_names: dict[int, str] = field(default_factory=dict)
    static_forward_context: dict[str, Any] = field(default_factory=dict)

    def by_name(self, name: str) -> Any:
        return self.static_forward_context[name]


def _attention_modules(module) -> dict[str, Any]:
    """``{layer_name: Attention}`` for every vLLM attention layer under ``module``."""
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase

    out = {}
    for _, sub in module.named_modules():
        if isinstance(sub, AttentionLayerBase) and getattr(sub, "layer_name", None):
            out[sub.layer_name] = sub
    return out


def get_layer_maps(proposer, target_model=None) -> LayerMaps:
    """Draft and target attention layers of a live drafter (after its load_model); without `target_model`, every
    attention layer the engine registered that is not the draft's.

    Names are the ``Attention.layer_name`` strings (= ``static_forward_context``
    keys): target ``model.layers.{i}.self_attn.attn`` (``Gemma4ForCausalLM``) or
    ``language_model.model.layers.{i}.self_attn.attn`` (multimodal wrapper); draft
    ``draft_model.layers.{i}.self_attn.attn`` (``Gemma4MTP`` builds its inner model
    with prefix ``draft_model``).
    """
    from vllm.model_executor.models.utils import extract_layer_index

    sfc = proposer.vllm_config.compilation_config.static_forward_context
    draft_layers = _attention_modules(proposer.model)
    if target_model is not None:
        target_layers = _attention_modules(target_model)
    else:  # everything registered that is not the draft's
        from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase

        target_layers = {
            n: m for n, m in sfc.items() if isinstance(m, AttentionLayerBase) and n not in draft_layers
        }
    maps = LayerMaps(static_forward_context=sfc)
    for names, layers, dst, dst_names in (
        (draft_layers, draft_layers, maps.draft, maps.draft_names),
        (target_layers, target_layers, maps.target, maps.target_names),
    ):
        for name in sorted(names, key=extract_layer_index):
            idx = extract_layer_index(name)
            if idx in dst:
                raise ValueError(f"two attention layers with index {idx}: {dst_names[idx]}, {name}")
            dst[idx] = layers[name]
            dst_names[idx] = name
    return maps


def kv_cache_groups_of(kv_cache_config) -> dict[str, int] | None:
    """``{layer_name: group index}`` of a bound engine's KV-cache groups, or None when this vLLM's
    config has no groups. The group decides the block table (and attention metadata) a layer's
    attention reads: vLLM appends each KV-shared layer to its target layer's group
    (`add_kv_sharing_layers_to_kv_cache_groups`); an engine that files it elsewhere gives the draft
    the right cache tensor read through another group's block table (vllm-ascend#16980: 0 %)."""
    groups = getattr(kv_cache_config, "kv_cache_groups", None)
    if groups is None:
        return None
    out: dict[str, int] = {}
    for i, group in enumerate(groups):
        for name in getattr(group, "layer_names", ()) or ():
            out.setdefault(name, i)
    return out


def set_kv_sharing_target(attn, target_layer_name: str, static_forward_context=None, *, sync_impl: bool = True) -> None:
    """Point ``attn`` at ``target_layer_name`` the way ``Attention.__init__`` would.

    Re-runs vLLM's constructor check ``validate_kv_sharing_target`` (not the same
    layer; target registered in the static forward context; same ``attn_type``),
    sets ``attn.kv_sharing_target_layer_name`` and, unless ``sync_impl=False``, the
    backend impl's own copy ``attn.impl.kv_sharing_target_layer_name`` (vLLM's
    legacy Gemma4 proposer leaves the impl copy at ``None``). Must run before
    ``get_kv_cache_spec`` (i.e. in a load_model hook) to affect cache allocation.
    """
    from vllm.model_executor.layers.attention.attention import validate_kv_sharing_target

    if static_forward_context is None:
        from vllm.config import get_current_vllm_config

        static_forward_context = get_current_vllm_config().compilation_config.static_forward_context
    validate_kv_sharing_target(attn.layer_name, target_layer_name, static_forward_context)
    for m in kv_sharing_mutations(attn.layer_name, attn, target_layer_name, sync_impl=sync_impl):
        m.apply()


# --------------------------------------------------------------------------- at draft load


@dataclass
class AtLoad:
    """What the draft-load stage needs of the live engine, found once (surgery/vllm/live_apply.py
    `after_draft_loaded`) and handed to its stages: the draft and the target's language model; in apply mode
    the engine context and the recipe's engine hints checked against the live engine (SRG324); in audit mode
    the attention layer maps and the modules of the roles the audit compares (`unreadable`: why the maps could
    not be read)."""

    draft: Any
    target_lm: Any
    context: Any = None  # the engine context the plan is applied and verified with (apply mode)
    hint_problems: list = field(default_factory=list)
    maps: LayerMaps | None = None
    modules: dict = field(default_factory=dict)  # role -> (draft's module, target's module), AUDITED_ROLES
    unreadable: str | None = None


def at_load(proposer: Any, target_model: Any, selected: Any) -> AtLoad:
    """The live engine as the draft-load stage's steps need it, read once (`selected`: surgery/vllm/selection.py
    `read`). Nothing is read without a plan; audit mode reads what the audit compares, apply mode checks the
    hints and builds the engine context (the applier finds its paths through it)."""
    plan = selected.plan
    if plan is not None and selected.audit:
        return observed(proposer, target_model)
    draft, target_lm = proposer.model, target_language_model(target_model)
    live = AtLoad(draft, target_lm)
    if plan is not None:
        live.hint_problems = hint_problems(plan, proposer, draft, target_lm)
        live.context = VLLMContext.of(proposer.vllm_config, dummy_load=selected.load_info["dummy"])
    return live


def observed(proposer: Any, target_model: Any) -> AtLoad:
    """What the audit compares with the plan, read from the live engine: the attention layer maps and the modules
    of AUDITED_ROLES on both sides. An audit must never stop the engine it observes: maps that cannot be read
    are said in `unreadable` (not applicable)."""
    draft, target_lm = proposer.model, target_language_model(target_model)
    live = AtLoad(draft, target_lm)
    try:
        live.maps = get_layer_maps(proposer, target_model)
    except Exception as exc:  # noqa: BLE001
        live.unreadable = f"{type(exc).__name__}: {exc}"
    live.modules = {role: (role_module(draft, role, "draft"), role_module(target_lm, role, "target"))
                    for role in AUDITED_ROLES}
    return live


def hint_problems(plan: Any, proposer: Any, draft: Any, target: Any) -> list:
    """The recipe's vLLM `engine:` hints checked against the live engine (SRG324)."""
    hints = plan.engine_hints.get("vllm") or {}
    problems = []
    method = getattr(getattr(proposer, "speculative_config", None), "method", None)
    if "method" in hints and method is not None and method != hints["method"]:
        problems.append(diag("SRG324", f"recipe {plan.recipe} is for vLLM method {hints['method']!r} but the engine "
                             f"runs speculative_config.method {method!r}"))
    if hints.get("attention_backend") == "inherit_target":
        def backends(model):
            return {getattr(m, "attn_backend", None) for _, m in model.named_modules()
                    if getattr(m, "attn_backend", None) is not None} if hasattr(model, "named_modules") else set()

        d, t = backends(draft), backends(target)
        if d and t and not d <= t:
            problems.append(diag("SRG324", "attention_backend: inherit_target, but the draft's attention backend "
                                 f"({', '.join(sorted(getattr(b, '__name__', str(b)) for b in d))}) is not the "
                                 f"target's ({', '.join(sorted(getattr(b, '__name__', str(b)) for b in t))})"))
    if "advance_draft_positions" in hints:
        constant = getattr(proposer, "constant_draft_positions", None)
        if isinstance(constant, bool) and constant == hints["advance_draft_positions"]:
            problems.append(diag("SRG324", f"advance_draft_positions: {hints['advance_draft_positions']}, but the "
                                 f"proposer {type(proposer).__name__} has constant_draft_positions={constant}"))
    if "parallel_drafting" in hints:
        live = getattr(proposer, "parallel_drafting", None)
        if isinstance(live, bool) and live != hints["parallel_drafting"]:
            problems.append(diag("SRG324", f"parallel_drafting: {hints['parallel_drafting']}, but the proposer "
                                 f"{type(proposer).__name__} has parallel_drafting={live} (speculative_config."
                                 "parallel_drafting; a P-EAGLE head needs it, a speculators `peagle` file sets it)"))
    return problems


# --------------------------------------------------------------------------- describe


def _view_key(t) -> tuple | None:
    import torch

    if not isinstance(t, torch.Tensor) or t.numel() == 0:
        return None
    return (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype)


def describe_wiring(proposer, target_model=None) -> dict[str, Any]:
    """Plain-data snapshot of how the draft is wired into the target.

    Per draft layer: its ``kv_sharing_target_layer_name`` (layer and impl copy), the
    target index it points at, whether its bound ``kv_cache`` *is* the target
    layer's tensor (and, weaker, the same view: data_ptr/shape/stride/dtype; note
    ``data_ptr`` alone is NOT evidence: with the hybrid allocator all KV-cache
    groups' layers can start at the same pointer), and the KV-scale attributes of
    both layers with their registration kind (buffer/parameter/...).
    """
    import torch

    if target_model is None:
        target_model = target_model_of(proposer)
    maps = get_layer_maps(proposer, target_model)
    sfc = maps.static_forward_context
    target_name_to_idx = {n: i for i, n in maps.target_names.items()}

    layers = []
    for idx, attn in maps.draft.items():
        tname = getattr(attn, "kv_sharing_target_layer_name", None)
        tattn = sfc.get(tname) if tname else None
        kv = getattr(attn, "kv_cache", None)
        tkv = getattr(tattn, "kv_cache", None) if tattn is not None else None
        layers.append(
            {
                "draft_index": idx,
                "draft_layer_name": maps.draft_names[idx],
                "sliding_window": getattr(attn, "sliding_window", None),
                "head_size": getattr(attn, "head_size", None),
                "num_kv_heads": getattr(attn, "num_kv_heads", None),
                "kv_cache_dtype": getattr(attn, "kv_cache_dtype", None),
                "kv_sharing_target_layer_name": tname,
                "impl_kv_sharing_target_layer_name": getattr(
                    getattr(attn, "impl", None), "kv_sharing_target_layer_name", None
                ),
                "target_index": target_name_to_idx.get(tname),
                "target_sliding_window": getattr(tattn, "sliding_window", None),
                "kv_cache_bound": isinstance(kv, torch.Tensor) and kv.numel() > 0,
                "kv_cache_is_target": tkv is not None and kv is tkv,
                "kv_cache_same_view": _view_key(kv) is not None and _view_key(kv) == _view_key(tkv),
                "kv_cache_data_ptr": kv.data_ptr() if isinstance(kv, torch.Tensor) and kv.numel() else None,
                "scales": scale_info(attn),
                "target_scales": scale_info(tattn) if tattn is not None else None,
            }
        )

    draft_model = proposer.model
    target_lm = target_language_model(target_model)
    d_embed = role_module(draft_model, "input_embeddings", "draft")
    t_embed = role_module(target_lm, "input_embeddings", "target")
    lm_head, t_head = role_module(draft_model, "lm_head", "draft"), role_module(target_lm, "lm_head", "target")
    return {
        "proposer_class": type(proposer).__name__,
        "draft_model_class": type(draft_model).__name__,
        "target_model_class": type(target_model).__name__ if target_model is not None else None,
        "draft_layer_names": dict(maps.draft_names),
        "target_layer_names": dict(maps.target_names),
        "layers": layers,
        "embed_tokens_shared": d_embed is not None and d_embed is t_embed,
        "draft_embed_shape": tuple(d_embed.weight.shape) if d_embed is not None else None,
        "draft_lm_head_is_target_lm_head": lm_head is not None and lm_head is t_head,
        "draft_lm_head_shape": tuple(lm_head.weight.shape) if lm_head is not None else None,
    }


# --------------------------------------------------------------------------- live objects


def find_live_runner(llm):
    """The model runner of an in-process ``vllm.LLM`` (``VLLM_ENABLE_V1_MULTIPROCESSING=0``).

    Path: ``llm.llm_engine.engine_core`` (InprocClient) ``.engine_core`` (EngineCore)
    ``.model_executor`` (UniProcExecutor) ``.driver_worker`` (WorkerWrapperBase)
    ``.worker`` (CPUWorker) ``.model_runner`` (CPUModelRunner). With multiprocessing
    use ``llm.collective_rpc(fn)`` instead: ``fn(worker)`` runs in each worker.
    """
    client = llm.llm_engine.engine_core
    core = getattr(client, "engine_core", None)
    if core is None:
        raise RuntimeError(
            f"{type(client).__name__} is not in-process; set VLLM_ENABLE_V1_MULTIPROCESSING=0 "
            "or use LLM.collective_rpc"
        )
    return core.model_executor.driver_worker.worker.model_runner


def find_live_drafter(llm):
    return find_live_runner(llm).drafter
