"""Hook points into vLLM: wrapping the methods where a draft is loaded, KV caches are bound and
weights are reloaded, and running the registered callbacks there. (What the wired models look
like afterwards: surgery/vllm/wiring.py.)

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
    EngineCore._initialize_kv_caches -> executor.compile_or_warm_up_model
        Worker.compile_or_warm_up_model (GPU: compile sizes, kernel warm-up, CUDA-graph capture;
        CPU: warming_up_model where the KV cache is empty); the profile run (GPU:
        determine_available_memory -> profile_run) already ran before the KV caches were bound:
        with calculate_kv_scales=True every Attention layer computed its scales there
        (Attention.calc_kv_scales, from its own inputs, once)
        >>> install_warm_up_hook callbacks run here, before the first request <<<

Under ``load_format="dummy"`` the dummy loader initialises every declared parameter and calls no
``load_weights``, so a draft's has-own flags keep their class default (False): install_dummy_load_hook
lets the plugin say "every declared parameter is present" where vLLM decides what to share.
"""

from __future__ import annotations

import functools
import importlib
import threading
from collections.abc import Callable
from typing import Any

from . import state

__all__ = [
    "LOAD_MODEL_TARGETS",
    "RUNNER_TARGETS",
    "install_load_model_hook",
    "install_kv_cache_hook",
    "install_reload_hook",
    "install_warm_up_hook",
    "install_dummy_load_hook",
    "WORKER_TARGETS",
    "DUMMY_LOADER_TARGETS",
    "remove_hook",
    "uninstall_all",
    "installed_targets",
    "missing_targets",
    "engine_version",
    "target_model_of",
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

# The model-runner classes, the one list of them: (module, class) whose
# ``initialize_kv_cache(self, kv_cache_config, ...)`` binds KV caches and whose
# ``reload_weights(self, ...)`` reloads weights (where the class defines it; a subclass that
# inherits it is covered by its base's wrapper).
RUNNER_TARGETS: tuple[tuple[str, str], ...] = (
    ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner"),
    ("vllm.v1.worker.cpu_model_runner", "CPUModelRunner"),
    ("vllm.v1.worker.gpu.model_runner", "GPUModelRunner"),
)

# The workers whose ``compile_or_warm_up_model(self)`` is the last step of engine start: after the
# profile run, the KV-cache binding and the warm-up / compile / CUDA-graph capture, before the first
# request (vllm/v1/engine/core.py EngineCore._initialize_kv_caches -> executor.compile_or_warm_up_model).
WORKER_TARGETS: tuple[tuple[str, str], ...] = (
    ("vllm.v1.worker.gpu_worker", "Worker"),
    ("vllm.v1.worker.cpu_worker", "CPUWorker"),
)

def worker_targets() -> tuple[tuple[str, str], ...]:
    """This platform's worker only. Importing `vllm.v1.worker.cpu_worker` is not free: it imports
    `vllm.v1.worker.cpu.shm` first ("must be imported firstly"), which changes process-wide state a
    GPU worker relies on; on the H200 every engine then failed its profile run in the v2 sampler
    ("Pointer argument cannot be accessed from Triton (cpu tensor?)"). So the CPU worker is wrapped
    on CPU, the GPU worker elsewhere, and neither module is imported on the other platform."""
    from vllm.platforms import current_platform

    cpu = current_platform.is_cpu()
    return tuple(t for t in WORKER_TARGETS if (t[0].endswith("cpu_worker")) == cpu)


# ``load_weights(self, model, model_config)`` of the loader that serves ``load_format="dummy"``.
DUMMY_LOADER_TARGETS: tuple[tuple[str, str], ...] = (
    ("vllm.model_executor.model_loader.dummy_loader", "DummyModelLoader"),
)

_WRAP_MARK = "__surgery_hook__"
_lock = threading.RLock()
_callbacks: dict[str, list[Callable[..., Any]]] = {"before": [], "after": [], "kv": [], "reload": [], "warm": [],
                                                  "dummy": []}
_tls = threading.local()


_import_errors: dict[str, str] = {}  # "module.Class" -> why it could not be imported (last attempt)


def _import_attr(module: str, name: str):
    """The class, or None when this vLLM lacks it (an optional runner needing Triton / CUDA, or a
    release that moved it); the reason is kept for `missing_targets`, never dropped."""

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


def engine_version() -> str:
    """The installed vLLM's version (ImportError when there is none)."""
    import vllm

    return str(getattr(vllm, "__version__", "unknown"))


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
                state.of(self).load_started(target_model)
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


def _make_reload_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    def reload_weights(self, *args, **kwargs):
        result = orig(self, *args, **kwargs)
        for cb in list(_callbacks["reload"]):
            cb(self)
        return result

    setattr(reload_weights, _WRAP_MARK, orig)
    return reload_weights


def _make_warm_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    def compile_or_warm_up_model(self, *args, **kwargs):
        outermost = _enter("warm", self) == 1  # a subclass calling super() runs the callbacks once
        try:
            result = orig(self, *args, **kwargs)
        finally:
            _exit("warm", self)
        if outermost:
            for cb in list(_callbacks["warm"]):
                cb(self)
        return result

    setattr(compile_or_warm_up_model, _WRAP_MARK, orig)
    return compile_or_warm_up_model


def _make_dummy_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    def load_weights(self, model, *args, **kwargs):
        result = orig(self, model, *args, **kwargs)
        for cb in list(_callbacks["dummy"]):
            cb(model)
        return result

    setattr(load_weights, _WRAP_MARK, orig)
    return load_weights


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
        return _wrap(RUNNER_TARGETS, "initialize_kv_cache", _make_kv_wrapper)


def install_reload_hook(callback: Callable[[Any], Any]) -> list[str]:
    """Run ``callback(model_runner)`` after the runner's ``reload_weights`` returned (the runners
    that define it). Idempotent."""
    with _lock:
        if callback not in _callbacks["reload"]:
            _callbacks["reload"].append(callback)
        return _wrap(RUNNER_TARGETS, "reload_weights", _make_reload_wrapper)


def install_warm_up_hook(callback: Callable[[Any], Any], *, first: bool = False) -> list[str]:
    """Run ``callback(worker)`` after the worker's ``compile_or_warm_up_model`` returned: the engine
    ran its profile and warm-up forwards and bound its KV caches; no request has run yet
    (``worker.model_runner`` holds the drafter). Idempotent; ``first=True`` runs it before the
    callbacks already registered. Returns the wrapped methods."""
    with _lock:
        if callback not in _callbacks["warm"]:
            if first:
                _callbacks["warm"].insert(0, callback)
            else:
                _callbacks["warm"].append(callback)
        return _wrap(worker_targets(), "compile_or_warm_up_model", _make_warm_wrapper)


def install_dummy_load_hook(callback: Callable[[Any], Any]) -> list[str]:
    """Run ``callback(model)`` after the dummy loader initialised a model's weights
    (``load_format="dummy"``), before the proposer decides what to share. Idempotent."""
    with _lock:
        if callback not in _callbacks["dummy"]:
            _callbacks["dummy"].append(callback)
        return _wrap(DUMMY_LOADER_TARGETS, "load_weights", _make_dummy_wrapper)


def remove_hook(callback: Callable[..., Any]) -> None:
    """Unregister a callback (the class wrappers stay; they are cheap no-ops)."""
    with _lock:
        for cbs in _callbacks.values():
            while callback in cbs:
                cbs.remove(callback)


def uninstall_all() -> None:
    """Unregister every callback and restore the original vLLM methods (the acceptance guard's and its
    canary's too)."""
    from . import canary, guard

    guard.uninstall()
    canary.uninstall()
    with _lock:
        for cbs in _callbacks.values():
            cbs.clear()
        _unwrap(LOAD_MODEL_TARGETS, "load_model")
        _unwrap(RUNNER_TARGETS, "initialize_kv_cache")
        _unwrap(RUNNER_TARGETS, "reload_weights")
        _unwrap(worker_targets(), "compile_or_warm_up_model")
        _unwrap(DUMMY_LOADER_TARGETS, "load_weights")


def installed_targets() -> list[str]:
    """Qualified names of methods currently wrapped by this module."""
    out = []
    for targets, method in ((LOAD_MODEL_TARGETS, "load_model"), (RUNNER_TARGETS, "initialize_kv_cache"),
                            (RUNNER_TARGETS, "reload_weights"), (worker_targets(), "compile_or_warm_up_model"),
                            (DUMMY_LOADER_TARGETS, "load_weights")):
        for module, name in targets:
            cls = _import_attr(module, name)
            fn = cls.__dict__.get(method) if cls is not None else None
            if fn is not None and getattr(fn, _WRAP_MARK, None):
                out.append(f"{module}.{name}.{method}")
    return out


def target_model_of(proposer: Any) -> Any:
    """The target model the wrapped ``load_model`` was called with (None before it ran)."""
    st = state.get(proposer)
    return st.target_model if st is not None else None
