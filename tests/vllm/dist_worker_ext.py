"""Test-only code that runs INSIDE every vLLM worker process of a multi-process (TP / PP) engine.

vLLM imports this module in each worker through ``parallel_config.worker_extension_cls``
("dist_worker_ext.SurgeryTestWorkerExtension"), after the general plugins (our entry point) are
loaded and before the model is built. Importing it installs, in that process only, what the
distributed tests need and what an in-process hook cannot reach from the test process:

- ``SURGERY_TEST_SCALES=1``: a ``before`` load_model hook that gives every target attention layer
  distinctive KV scales before the draft is wired (the plugin then copies them): 0-d scales equal on
  every rank, per-head scales (``PER_HEAD``, global over all KV heads) as THIS rank's shard.
- ``SURGERY_TEST_FAULT_RANK=r``: on rank r only, the plugin's apply gets a fault after
  ``FAULT_AFTER`` mutations (apply_plan's own ``fault`` argument): the plan must roll back.
- ``SURGERY_TEST_STATE_DIR=dir``: each rank writes ``rank<r>.json`` after the plugin's draft
  callback (success or failure): the error text and the draft's wiring as the rank left it. The
  failing rank waits (bounded) for the others' files so the engine's teardown cannot race them.
- ``SURGERY_TEST_TIMINGS_DIR=dir`` (bench): each rank appends its plugin callbacks' seconds.

Nothing here changes surgery's modules; it wraps them in the worker process.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from procenv import exception_text

ENV_SCALES = "SURGERY_TEST_SCALES"
ENV_FAULT_RANK = "SURGERY_TEST_FAULT_RANK"
ENV_STATE_DIR = "SURGERY_TEST_STATE_DIR"
ENV_TIMINGS_DIR = "SURGERY_TEST_TIMINGS_DIR"
FAULT_AFTER = 5  # mutations applied before the injected fault (so the rollback has work to do)

# target layer -> global per-head scales (2 KV heads; rank r of TP 2 holds head r)
PER_HEAD = {
    3: {"_k_scale": [0.13, 0.23], "_v_scale": [0.33, 0.43], "_k_scale_cpu": [0.17, 0.27], "_v_scale_cpu": [0.37, 0.47]},
    2: {"_k_scale": [0.12, 0.22], "_v_scale": [0.32, 0.42]},
}
SCALAR_BASE = {"_k_scale": 0.50, "_v_scale": 0.70, "_k_scale_float": 0.30, "_v_scale_float": 0.60,
               "_k_scale_cpu": 0.40, "_v_scale_cpu": 0.90}


def scalar_value(attr: str, layer: int) -> float:
    return round(SCALAR_BASE[attr] + 0.01 * layer, 6)


def tp_rank() -> int:
    from vllm.distributed import get_tensor_model_parallel_rank

    return get_tensor_model_parallel_rank()


def global_rank() -> int:
    from vllm.distributed import get_world_group

    return get_world_group().rank


def _set_scales(proposer, target_model) -> None:
    """``before`` hook: the target is loaded (its scales reset to 1.0), the draft is not built yet."""
    import torch
    from vllm.model_executor.models.utils import extract_layer_index

    from surgery.vllm import hooks, wiring

    rank = tp_rank()
    for name, attn in wiring._attention_modules(target_model).items():
        i = extract_layer_index(name)
        with torch.no_grad():
            for a in ("_k_scale", "_v_scale", "_k_scale_cpu", "_v_scale_cpu"):
                getattr(attn, a).fill_(scalar_value(a, i))
        for a in ("_k_scale_float", "_v_scale_float"):
            setattr(attn, a, scalar_value(a, i))
        for a, values in PER_HEAD.get(i, {}).items():
            n = attn.num_kv_heads  # heads held by this rank
            shard = torch.tensor(values[rank * n:(rank + 1) * n], dtype=torch.float32)
            if a.endswith("_cpu"):
                setattr(attn, a, shard)
            else:
                delattr(attn, a)  # drop the 0-d buffer, register this rank's shard in its place
                attn.register_buffer(a, shard)


def _jsonable(obj):
    return json.loads(json.dumps(obj, default=lambda o: repr(o)))


def _wrap_plugin_callbacks() -> None:
    """Replace the plugin's registered callbacks, in place in the hook lists, by wrappers that
    time them and (with ENV_STATE_DIR) record each rank's outcome and wiring."""
    from surgery.vllm import hooks, live_apply, wiring

    state_dir = os.environ.get(ENV_STATE_DIR)
    timings_dir = os.environ.get(ENV_TIMINGS_DIR)

    def record_timing(name: str, seconds: float) -> None:
        if timings_dir:
            with open(Path(timings_dir) / f"rank{global_rank()}.jsonl", "a") as f:
                f.write(json.dumps({"rank": global_rank(), "callback": name, "seconds": seconds}) + "\n")

    def after(proposer, target_model, _orig=live_apply.after_draft_loaded):
        t = time.perf_counter()
        error = None
        try:
            _orig(proposer, target_model)
        except BaseException as exc:  # noqa: BLE001 - recorded, then re-raised
            error = exc
        record_timing("after_draft_loaded", time.perf_counter() - t)
        if state_dir:
            rank = global_rank()
            state = {"rank": rank, "tp_rank": tp_rank(), "error": None if error is None else exception_text(error),
                     "wiring": _jsonable(wiring.describe_wiring(proposer, target_model))}
            (Path(state_dir) / f"rank{rank}.json").write_text(json.dumps(state))
            if error is not None:  # let the other ranks record theirs before the engine tears down
                from vllm.distributed import get_world_group

                deadline = time.monotonic() + 60
                others = [Path(state_dir) / f"rank{r}.json" for r in range(get_world_group().world_size)]
                while time.monotonic() < deadline and not all(p.exists() for p in others):
                    time.sleep(0.1)
        if error is not None:
            raise error

    def kv(runner, kv_cache_config, is_profiling, _orig=live_apply.after_kv_cache_bound):
        t = time.perf_counter()
        try:
            return _orig(runner, kv_cache_config, is_profiling)
        finally:
            record_timing("after_kv_cache_bound", time.perf_counter() - t)

    for kind, orig, wrapper in (("after", live_apply.after_draft_loaded, after), ("kv", live_apply.after_kv_cache_bound, kv)):
        lst = hooks._callbacks[kind]
        if orig not in lst:
            raise RuntimeError(f"surgery plugin callback {orig.__name__} is not registered in this worker")
        lst[lst.index(orig)] = wrapper


def _install() -> None:
    from surgery.vllm import hooks

    if os.environ.get(ENV_SCALES) == "1":
        hooks.install_load_model_hook(_set_scales, when="before")
    if os.environ.get(ENV_STATE_DIR) or os.environ.get(ENV_TIMINGS_DIR):
        _wrap_plugin_callbacks()
    fault_rank = os.environ.get(ENV_FAULT_RANK)
    if fault_rank is not None:
        import surgery.applier as sa  # the plugin imports apply_plan from here at call time

        sa.apply_plan = _fault_dispatch(sa.apply_plan, fault_rank)


def _fault_dispatch(orig, fault_rank: str):
    """apply_plan with a fault after FAULT_AFTER mutations on global rank `fault_rank` only (the
    rank is known only once the worker's distributed state exists: decided at apply time)."""
    def apply_plan(plan, draft, target, context=None, fault=None, **kwargs):
        if str(global_rank()) != fault_rank:
            return orig(plan, draft, target, context, fault=fault, **kwargs)
        count = {"n": 0}

        def boom(op, mutation):
            count["n"] += 1
            if count["n"] > FAULT_AFTER:
                raise RuntimeError(f"injected fault on rank {global_rank()} at {op.id}")

        return orig(plan, draft, target, context, fault=boom, **kwargs)

    return apply_plan


class SurgeryTestWorkerExtension:
    """Mixed into vLLM's worker class; its import (this module) is what matters."""


_install()
