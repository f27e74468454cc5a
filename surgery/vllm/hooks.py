"""Hook points into vLLM's speculative-decoding draft loading (legacy V1 runner).

Everything here imports vLLM lazily, inside functions, so ``surgery`` stays
importable without vLLM. Findings behind this module: ``bench/vllm_probe/FINDINGS.md``.

Lifecycle in one worker process (vllm 0.32, CPU / legacy "V1" model runner)::

    WorkerWrapperBase.init_worker        -> load_general_plugins()  (our entry point runs)
    Worker.load_model -> CPUModelRunner.load_model
        get_model(target)                 (target weights + process_weights_after_loading)
        drafter.load_model(target_model)  <- install_load_model_hook wraps this
            Gemma4Proposer.load_model -> SpecDecodeBaseProposer.load_model
                (draft built, embed_tokens shared, lm_head kept)
            -> _setup_gemma4_kv_sharing  (attn.kv_sharing_target_layer_name set)
        >>> "after" callbacks run here, before any KV-cache spec is collected <<<
    EngineCore._initialize_kv_caches -> runner.get_kv_cache_spec()
        (layers with kv_sharing_target_layer_name are skipped and recorded in
         runner.shared_kv_cache_layers)
    Worker.initialize_from_config -> runner.initialize_kv_cache(...)
        initialize_attn_backend (+ drafter.initialize_attn_backend)
        initialize_kv_cache_tensors: kv_caches[shared] = kv_caches[target]; bind_kv_cache
        >>> install_kv_cache_hook callbacks run here (attn.kv_cache is bound) <<<
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "LayerMaps",
    "LOAD_MODEL_TARGETS",
    "KV_CACHE_TARGETS",
    "SCALE_TENSOR_ATTRS",
    "SCALE_FLOAT_ATTRS",
    "SCALE_CPU_ATTRS",
    "install_load_model_hook",
    "install_kv_cache_hook",
    "remove_hook",
    "uninstall_all",
    "installed_targets",
    "get_layer_maps",
    "set_kv_sharing_target",
    "describe_wiring",
    "find_live_runner",
    "find_live_drafter",
]

# (module, class) whose ``load_model(self, target_model)`` loads and wires a draft.
# Missing modules/classes are skipped (e.g. the V2 runner needs Triton; the CPU
# build falls back to the legacy runner, see FINDINGS.md).
LOAD_MODEL_TARGETS: tuple[tuple[str, str], ...] = (
    # legacy V1 runner (used on CPU)
    ("vllm.v1.spec_decode.llm_base_proposer", "SpecDecodeBaseProposer"),
    ("vllm.v1.spec_decode.gemma4", "Gemma4Proposer"),
    # V2 runner (GPU, by name only: not exercised on CPU)
    ("vllm.v1.worker.gpu.spec_decode.speculator", "DraftModelSpeculator"),
    ("vllm.v1.worker.gpu.spec_decode.target_dependent_ar.speculator", "TargetDependentARSpeculator"),
    ("vllm.v1.worker.gpu.spec_decode.gemma4.speculator", "Gemma4Speculator"),
)

# (module, class) whose ``initialize_kv_cache(self, kv_cache_config, ...)`` binds KV caches.
KV_CACHE_TARGETS: tuple[tuple[str, str], ...] = (
    ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner"),
    ("vllm.v1.worker.cpu_model_runner", "CPUModelRunner"),
    ("vllm.v1.worker.gpu.model_runner", "GPUModelRunner"),
)

# KV-scale attributes on vllm.model_executor.layers.attention.Attention
SCALE_TENSOR_ATTRS = ("_k_scale", "_v_scale")  # registered buffers (or nn.Parameter under quant)
SCALE_FLOAT_ATTRS = ("_k_scale_float", "_v_scale_float")  # python floats, read by CPU/FlashInfer kernels
SCALE_CPU_ATTRS = ("_k_scale_cpu", "_v_scale_cpu")  # plain attribute, 0-d float32 CPU tensors

_WRAP_MARK = "__surgery_hook__"
_lock = threading.RLock()
_callbacks: dict[str, list[Callable[..., Any]]] = {"before": [], "after": [], "kv": []}
_tls = threading.local()


_import_errors: dict[str, str] = {}  # "module.Class" -> why it could not be imported (last attempt)


def _import_attr(module: str, name: str):
    """The class, or None when this vLLM lacks it (an optional runner needing Triton / CUDA, or a
    release that moved it); the reason is kept for `missing_targets`, never dropped."""
    import importlib

    try:
        mod = importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - optional runner (e.g. needs Triton / CUDA)
        _import_errors[f"{module}.{name}"] = f"{type(exc).__name__}: {str(exc)[:160]}"
        return None
    cls = getattr(mod, name, None)
    if cls is None:
        _import_errors[f"{module}.{name}"] = f"{module} has no {name}"
    return cls


def missing_targets(targets) -> dict[str, str]:
    """{"module.Class": reason} for each hook target this vLLM does not provide."""
    missing = {}
    for module, name in targets:
        if _import_attr(module, name) is None:
            missing[f"{module}.{name}"] = _import_errors.get(f"{module}.{name}", "not importable")
    return missing


def _depth_key(kind: str, obj: Any) -> tuple[str, int]:
    return (kind, id(obj))


def _enter(kind: str, obj: Any) -> int:
    depths = getattr(_tls, "depths", None)
    if depths is None:
        depths = _tls.depths = {}
    key = _depth_key(kind, obj)
    depths[key] = depths.get(key, 0) + 1
    return depths[key]


def _exit(kind: str, obj: Any) -> int:
    depths = _tls.depths
    key = _depth_key(kind, obj)
    depths[key] -= 1
    if depths[key] == 0:
        del depths[key]
        return 0
    return depths[key]


def _make_load_model_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    def load_model(self, target_model, *args, **kwargs):
        # Subclass load_model calls super().load_model(); both are wrapped. Only the
        # outermost call runs callbacks, so "after" sees the subclass's wiring too
        # (Gemma4Proposer sets kv_sharing_target_layer_name after super()).
        outermost = _enter("load", self) == 1
        try:
            if outermost:
                self._surgery_target_model = target_model
                for cb in list(_callbacks["before"]):
                    cb(self, target_model)
            result = orig(self, target_model, *args, **kwargs)
        finally:
            _exit("load", self)
        if outermost:
            for cb in list(_callbacks["after"]):
                cb(self, target_model)
        return result

    setattr(load_model, _WRAP_MARK, orig)
    return load_model


def _make_kv_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    def initialize_kv_cache(self, kv_cache_config, *args, **kwargs):
        outermost = _enter("kv", self) == 1
        try:
            result = orig(self, kv_cache_config, *args, **kwargs)
        finally:
            _exit("kv", self)
        if outermost:
            is_profiling = bool(kwargs.get("is_profiling", args[0] if args else False))
            for cb in list(_callbacks["kv"]):
                cb(self, kv_cache_config, is_profiling)
        return result

    setattr(initialize_kv_cache, _WRAP_MARK, orig)
    return initialize_kv_cache


def _wrap(targets, method: str, factory) -> list[str]:
    wrapped = []
    for module, name in targets:
        cls = _import_attr(module, name)
        if cls is None:
            continue
        fn = cls.__dict__.get(method)
        if fn is None:  # inherits; the base's wrapper covers it
            continue
        if not getattr(fn, _WRAP_MARK, None):
            setattr(cls, method, factory(fn))
        wrapped.append(f"{module}.{name}.{method}")
    return wrapped


def _unwrap(targets, method: str) -> None:
    for module, name in targets:
        cls = _import_attr(module, name)
        if cls is None:
            continue
        fn = cls.__dict__.get(method)
        orig = getattr(fn, _WRAP_MARK, None) if fn is not None else None
        if orig is not None:
            setattr(cls, method, orig)


def install_load_model_hook(
    callback: Callable[[Any, Any], Any], *, when: str = "after", first: bool = False
) -> list[str]:
    """Run ``callback(proposer, target_model)`` around the drafter's ``load_model``.

    ``when="after"``: right after vLLM's own wiring (draft built, embeddings shared,
    ``kv_sharing_target_layer_name`` set) and before KV-cache specs are collected.
    ``when="before"``: after the target is loaded, before the draft is built.
    Idempotent: classes are wrapped once; the same callback is registered once.
    ``first=True`` runs it before the callbacks already registered (the plugin's).
    Returns the qualified names of the wrapped methods (for logging).
    """
    if when not in ("before", "after"):
        raise ValueError(f"when must be 'before' or 'after', got {when!r}")
    with _lock:
        if callback not in _callbacks[when]:
            if first:  # e.g. to read vLLM's own wiring before the plugin's callback changes it
                _callbacks[when].insert(0, callback)
            else:
                _callbacks[when].append(callback)
        return _wrap(LOAD_MODEL_TARGETS, "load_model", _make_load_model_wrapper)


def install_kv_cache_hook(callback: Callable[[Any, Any, bool], Any]) -> list[str]:
    """Run ``callback(model_runner, kv_cache_config, is_profiling)`` after the
    runner's ``initialize_kv_cache`` returned, i.e. once ``attn.kv_cache`` tensors
    are bound (the drafter is ``model_runner.drafter``). Idempotent."""
    with _lock:
        if callback not in _callbacks["kv"]:
            _callbacks["kv"].append(callback)
        return _wrap(KV_CACHE_TARGETS, "initialize_kv_cache", _make_kv_wrapper)


def remove_hook(callback: Callable[..., Any]) -> None:
    """Unregister a callback (the class wrappers stay; they are cheap no-ops)."""
    with _lock:
        for cbs in _callbacks.values():
            while callback in cbs:
                cbs.remove(callback)


def uninstall_all() -> None:
    """Unregister every callback and restore the original vLLM methods."""
    with _lock:
        for cbs in _callbacks.values():
            cbs.clear()
        _unwrap(LOAD_MODEL_TARGETS, "load_model")
        _unwrap(KV_CACHE_TARGETS, "initialize_kv_cache")


def installed_targets() -> list[str]:
    """Qualified names of methods currently wrapped by this module."""
    out = []
    for targets, method in ((LOAD_MODEL_TARGETS, "load_model"), (KV_CACHE_TARGETS, "initialize_kv_cache")):
        for module, name in targets:
            cls = _import_attr(module, name)
            fn = cls.__dict__.get(method) if cls is not None else None
            if fn is not None and getattr(fn, _WRAP_MARK, None):
                out.append(f"{module}.{name}.{method}")
    return out


# --------------------------------------------------------------------------- layers


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
    """Draft and target attention layers of a live drafter (after its load_model).

    Names are the ``Attention.layer_name`` strings (= ``static_forward_context``
    keys): target ``model.layers.{i}.self_attn.attn`` (``Gemma4ForCausalLM``) or
    ``language_model.model.layers.{i}.self_attn.attn`` (multimodal wrapper); draft
    ``draft_model.layers.{i}.self_attn.attn`` (``Gemma4MTP`` builds its inner model
    with prefix ``draft_model``).
    """
    from vllm.model_executor.models.utils import extract_layer_index

    sfc = proposer.vllm_config.compilation_config.static_forward_context
    draft_layers = _attention_modules(proposer.model)
    if target_model is None:
        target_model = getattr(proposer, "_surgery_target_model", None)
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
    from .adapter import kv_sharing_mutations

    for m in kv_sharing_mutations(attn.layer_name, attn, target_layer_name, sync_impl=sync_impl):
        m.apply()


# --------------------------------------------------------------------------- describe


def _kind(module, name: str) -> str:
    import torch

    if name in module._parameters:
        return "parameter"
    if name in module._buffers:
        return "buffer"
    if not hasattr(module, name):
        return "missing"
    val = getattr(module, name)
    return "tensor_attr" if isinstance(val, torch.Tensor) else "attr"


def _value(v):
    import torch

    if isinstance(v, torch.Tensor):
        v = v.detach().to("cpu", torch.float32)
        return v.item() if v.numel() == 1 and v.dim() == 0 else v.flatten().tolist()
    return v


def _scale_info(attn) -> dict[str, dict[str, Any]]:
    import torch

    out = {}
    for name in SCALE_TENSOR_ATTRS + SCALE_CPU_ATTRS + SCALE_FLOAT_ATTRS:
        v = getattr(attn, name, None)
        info: dict[str, Any] = {"kind": _kind(attn, name), "value": _value(v)}
        if isinstance(v, torch.Tensor):
            info.update(shape=tuple(v.shape), dtype=str(v.dtype), device=str(v.device))
        out[name] = info
    return out


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

    maps = get_layer_maps(proposer, target_model)
    if target_model is None:
        target_model = getattr(proposer, "_surgery_target_model", None)
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
                "scales": _scale_info(attn),
                "target_scales": _scale_info(tattn) if tattn is not None else None,
            }
        )

    draft_model = proposer.model
    draft_inner = getattr(draft_model, "model", None)
    target_lm = target_model
    if target_model is not None and hasattr(target_model, "get_language_model"):
        try:
            target_lm = target_model.get_language_model()
        except Exception:  # noqa: BLE001
            target_lm = target_model
    target_inner = getattr(target_lm, "model", None)
    d_embed = getattr(draft_inner, "embed_tokens", None)
    t_embed = getattr(target_inner, "embed_tokens", None)
    lm_head = getattr(draft_model, "lm_head", None)
    return {
        "proposer_class": type(proposer).__name__,
        "draft_model_class": type(draft_model).__name__,
        "target_model_class": type(target_model).__name__ if target_model is not None else None,
        "draft_layer_names": dict(maps.draft_names),
        "target_layer_names": dict(maps.target_names),
        "layers": layers,
        "embed_tokens_shared": d_embed is not None and d_embed is t_embed,
        "draft_embed_shape": tuple(d_embed.weight.shape) if d_embed is not None else None,
        "draft_lm_head_is_target_lm_head": lm_head is not None and lm_head is getattr(target_lm, "lm_head", None),
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
