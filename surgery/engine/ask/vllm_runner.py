"""Ask vLLM itself (issue 65, "ask the engine where the rules run out"): run inside an environment that has
the judged vLLM release; read cases as JSON on stdin; answer one JSON object on the last line of stdout.

This file imports NOTHING of surgery (it is run by path, `python vllm_runner.py`, by the driver in
surgery/engine/ask/__init__.py and by the CI oracles in tests/release_oracle/): what it reports is the
release's own answer. Per case:

1. stage "config": `EngineArgs(..., load_format="dummy", skip_tokenizer_init=True, enforce_eager=True)
   .create_engine_config()` (vLLM's config layer: ModelConfig, SpeculativeConfig, CacheConfig,
   ParallelConfig validation). `engine_args` and `config_stage` below are shared with the release-oracle
   runner (tests/release_oracle/runner.py imports them from this file).
2. stage "construct": the target model class and the draft model class are constructed on the meta device
   (no weights, no memory for tensors, no GPU) under `set_current_vllm_config`, the way the loaders build
   them (`initialize_model`, the class the registry resolves for the target's and for the draft's model
   config: vLLM rewrites the draft config's architectures to its EAGLE / EAGLE-3 / MTP / DFlash / DSpark /
   draft-model class, so the registry answers as the proposer's `get_model` does). Whatever the release
   raises there (an assert in `__init__`, a `divide()` in a linear layer, an fc sized from a config key, a
   missing config attribute) is the answer, with the raising frame inside the vllm package as `where`.
   The parameter shapes of the constructed modules (meta) are reported.

Tensor / pipeline parallel sizes without N processes: a single-process distributed init (gloo, world 1) is
made once, then the tensor- and pipeline-parallel group coordinators in
`vllm.distributed.parallel_state` (`_TP`, `_PP`, and any other group global that is the same object, e.g.
0.34's engram `_ETP`) are replaced by copies whose `world_size`, `rank_in_group`, `rank` and `ranks` are
the case's tp / pp. Why the globals and not each getter: every getter (`get_tp_group`,
`get_tensor_model_parallel_world_size`, `get_tensor_model_parallel_rank`, `get_pp_group`, ...) reads these
globals at call time, and model files import the getter functions (`from vllm.distributed import
get_tensor_model_parallel_world_size`), not the values; replacing the globals is therefore seen through
every name a module imported, where patching the getter functions would miss the names already bound in
the hundreds of modules that imported them. So `divide(heads, tp)` in QKVParallelLinear raises as on a
real tp-N rank (rank 0), and `make_layers` splits the layers as on each pipeline stage (every stage of the
target is built, then the draft on the last stage, as the proposer runs there). No collective runs while a
model is constructed.

Input: a list of cases, or {"cases": [...]}; a case is {"id", "target": folder with config.json, "draft":
folder, "method", "k", "tp", "pp", "max_model_len", "kv_cache_dtype", "hf_overrides", "spec_extra",
"full_shapes": bool (when tp * pp > 1, also build at tp 1 / pp 1 for the shapes a checkpoint holds)}.
Output (last line): {"engine": "vllm", "version", "peak_rss_kb", "verdicts": [{"id", "stage": null |
"config" | "construct" | "unjudged", "type", "message", "where", "frames", "refusals", "shapes": {"target":
{name: [dims]}, "draft": {...}}, "shapes_at": {"tp", "pp"}, "naming": {"target" / "draft": {"prefix",
"substr", "suffix", "packed"}}, "unconstructed": [...], "seconds"}]}.

Run: VLLM_TARGET_DEVICE=cpu CUDA_VISIBLE_DEVICES= VLLM_ENABLE_V1_MULTIPROCESSING=0 python vllm_runner.py < cases.json
"""
from __future__ import annotations

import contextlib
import copy
import gc
import json
import linecache
import logging
import os
import resource
import socket
import sys
import time
import traceback
from dataclasses import replace

# refusals that say the environment (a CPU build, no GPU) cannot do what a GPU serving run does: not the
# release's verdict for GPU serving, reported as "unjudged" with the reason
CONFIG_UNJUDGED = ("Model Runner V1 does not support", "Model Runner V2 requires Triton")
ENV_UNJUDGED = ("Torch not compiled with CUDA", "No CUDA GPUs", "Found no NVIDIA driver", "CUDA driver",
                "not supported on CPU", "is not supported on the CPU", "CPU backend", "libcuda",
                "undefined symbol", "No module named", "cannot import name",
                # kernel / backend selection for this host's CPU (fp8 block-scaled GEMMs want AMX, MXFP4 MoE a
                # GPU backend): what a GPU build picks is not known here
                "Failed to find a kernel that can implement", "backend supports the deployment configuration",
                "requires AMX", "is not built in this environment", "_OpNamespace")
MESSAGE_LIMIT = 3000


def engine_args(case: dict, tp: int | None = None, pp: int | None = None):
    """The EngineArgs a user's `vllm serve` builds for the case (dummy load: no weights read)."""
    from vllm.engine.arg_utils import EngineArgs

    spec = {"method": case["method"], "model": case["draft"], "num_speculative_tokens": case.get("k", 2)}
    spec.update(case.get("spec_extra") or {})
    return EngineArgs(model=case["target"], speculative_config=spec,
                      tensor_parallel_size=case["tp"] if tp is None else tp,
                      pipeline_parallel_size=case["pp"] if pp is None else pp,
                      max_model_len=case.get("max_model_len"), kv_cache_dtype=case.get("kv_cache_dtype") or "auto",
                      load_format="dummy", skip_tokenizer_init=True, enforce_eager=True,
                      hf_overrides=case.get("hf_overrides") or {})


def config_stage(case: dict, tp: int | None = None, pp: int | None = None):
    """(the engine config, None) or (None, the verdict: the config layer's refusal or "unjudged")."""
    try:
        return engine_args(case, tp, pp).create_engine_config(), None
    except Exception as exc:  # noqa: BLE001 - the release's refusal is the answer
        text = str(exc)
        if any(n in text for n in CONFIG_UNJUDGED):
            # the CPU build picks the V1 runner (no Triton), a GPU the V2 runner: not the release's verdict
            # for GPU serving, and said as such
            return None, {"id": case["id"], "stage": "unjudged", "message": text[:600]}
        return None, {"id": case["id"], "stage": "config", "type": type(exc).__name__,
                      "message": text[:MESSAGE_LIMIT], **_frames(exc)}


# --- where a refusal was raised ----------------------------------------------------------------------------
def _vllm_root() -> str:
    import vllm

    return os.path.dirname(os.path.dirname(os.path.abspath(vllm.__file__)))


def _frames(exc: BaseException) -> dict:
    """`where`: the innermost frame inside the vllm package ("vllm/.../file.py:line"), `frames`: up to six
    vllm frames, innermost first (the model file's own frame among them)."""
    try:
        root = _vllm_root()
    except Exception:  # noqa: BLE001
        return {"where": None, "frames": []}
    out = []
    for fs in reversed(traceback.extract_tb(exc.__traceback__)):
        path = os.path.abspath(fs.filename)
        if path.startswith(os.path.join(root, "vllm") + os.sep):
            out.append(f"{os.path.relpath(path, root)}:{fs.lineno}")
    return {"where": out[0] if out else None, "frames": out[:6]}


# --- tensor / pipeline parallel seen by the layers -----------------------------------------------------------
_DIST_READY = False


def _init_distributed() -> None:
    """One process, world size 1, gloo: the groups exist, so the getters answer; the sizes are set per build."""
    global _DIST_READY
    if _DIST_READY:
        return
    from vllm.distributed import parallel_state as ps

    if not ps.model_parallel_is_initialized():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        from vllm.config import VllmConfig, set_current_vllm_config

        with set_current_vllm_config(VllmConfig()):  # the groups' own defaults: world 1, no DP / DCP / PCP
            ps.init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                            distributed_init_method=f"tcp://127.0.0.1:{port}")
            ps.ensure_model_parallel_initialized(1, 1)
    _DIST_READY = True


def _as_group(real, size: int, rank: int):
    group = copy.copy(real)
    group.world_size, group.rank_in_group = size, rank
    group.ranks, group.rank = list(range(size)), rank
    if hasattr(group, "local_rank"):
        group.local_rank = rank
    return group


@contextlib.contextmanager
def parallel_as(tp: int, pp: int, pp_rank: int):
    """The layers see tensor-parallel size `tp` (rank 0) and pipeline stage `pp_rank` of `pp` (module doc)."""
    from vllm.distributed import parallel_state as ps

    real_tp, real_pp = ps._TP, ps._PP
    fake_tp, fake_pp = _as_group(real_tp, tp, 0), _as_group(real_pp, pp, pp_rank)
    saved = {}
    for name, value in list(vars(ps).items()):
        if name.startswith("_") and not name.startswith("__") and value is not None and not callable(value):
            if value is real_tp:
                saved[name] = value
                setattr(ps, name, fake_tp)
            elif value is real_pp:
                saved[name] = value
                setattr(ps, name, fake_pp)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(ps, name, value)


# --- construction --------------------------------------------------------------------------------------------
class _MissingOp:
    """A compiled custom op this environment's build lacks (a CUDA wheel on a CPU torch has no working
    `torch.ops._C`): constructors only take a reference to it (`self.op = torch.ops._C.silu_and_mul`), which
    a GPU build resolves; calling it here says so."""

    def __init__(self, name: str):
        self.name = name

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self.name} is not built in this environment (only constructed here, never run)")

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _MissingOp(f"{self.name}.{attr}")


@contextlib.contextmanager
def _stand_in_missing_custom_ops():
    """While a constructor runs (its modules already imported, so their import-time feature checks such as
    `hasattr(torch.ops._C, "scaled_fp4_quant")` saw the real build), torch.ops.<vllm extension
    namespace>.<op> resolves to a _MissingOp where the extension did not load: a constructor that only
    references a kernel builds as on a GPU build (the 0.26 oracle venv runs the CUDA wheel on a CPU
    torch). Namespaces of other libraries are untouched."""
    import torch._ops as ops

    original = ops._OpNamespace.__getattr__

    def getattr_(self, name):
        try:
            return original(self, name)
        except (AttributeError, RuntimeError):
            ns = getattr(self, "name", "")
            if name.startswith("__") or not (ns.startswith("_C") or ns.endswith("_C")):
                raise
            return _MissingOp(f"torch.ops.{ns}.{name}")

    ops._OpNamespace.__getattr__ = getattr_
    try:
        yield
    finally:
        ops._OpNamespace.__getattr__ = original


def _forward_context(config) -> dict | None:
    return getattr(getattr(config, "compilation_config", None), "static_forward_context", None)


def _build(vllm_config, model_config, prefix: str):
    import torch
    from vllm.model_executor.model_loader.utils import get_model_architecture, initialize_model
    from vllm.utils.torch_utils import set_default_torch_dtype

    get_model_architecture(model_config)  # the class and its modules imported before the stand-ins
    with set_default_torch_dtype(model_config.dtype), torch.device("meta"), _stand_in_missing_custom_ops():
        return initialize_model(vllm_config=vllm_config, model_config=model_config, prefix=prefix)


def _shapes(model) -> dict:
    return {name: [int(d) for d in p.shape] for name, p in model.named_parameters()}


def _naming(model) -> dict:
    """How the class names checkpoint tensors: its `hf_to_vllm_mapper` (WeightsMapper: prefix / substring /
    suffix renames, string keys only; None drops the tensor) and `packed_modules_mapping` (the fused
    projections: qkv_proj <- q_proj, k_proj, v_proj), so the caller can match checkpoint names to
    parameters the way the class's loader does."""
    out: dict = {}
    mapper = getattr(model, "hf_to_vllm_mapper", None)
    for kind in ("prefix", "substr", "suffix"):
        table = getattr(mapper, f"orig_to_new_{kind}", None)
        if isinstance(table, dict):
            out[kind] = {k: v for k, v in table.items() if isinstance(k, str) and (v is None or isinstance(v, str))}
    packed = getattr(model, "packed_modules_mapping", None)
    if isinstance(packed, dict):
        out["packed"] = {k: [str(x) for x in v] for k, v in packed.items()
                         if isinstance(k, str) and isinstance(v, (list, tuple))}
    return out


def _draft_vllm_config(config):
    """The config the proposer builds its model with: the draft-model method's own parallel config and
    model config (draft_model.py / standalone_ar), else the target's config with the draft overrides."""
    spec = config.speculative_config
    if spec.method == "draft_model":
        parallel = replace(spec.draft_parallel_config, rank=config.parallel_config.rank)
        return replace(config, quant_config=None, parallel_config=parallel, model_config=spec.draft_model_config), \
            "draft_model"
    if hasattr(spec, "apply_draft_overrides"):
        config = spec.apply_draft_overrides(config)
    return config, ""


def _refusal(model: str, exc: BaseException) -> dict:
    text = f"{exc}"
    row = {"model": model, "type": type(exc).__name__, **_frames(exc)}
    if isinstance(exc, AssertionError) and not text:  # a bare assert: its own source line says what it checks
        text = "assertion failed: " + _source_line(exc)
    row["message"] = text[:MESSAGE_LIMIT]
    if any(n in text for n in ENV_UNJUDGED) or any(f.startswith("vllm/platforms/") for f in row["frames"][:1]):
        row["unjudged"] = True
    return row


def _source_line(exc: BaseException) -> str:
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return linecache.getline(tb.tb_frame.f_code.co_filename, tb.tb_lineno).strip() if tb is not None else ""


@contextlib.contextmanager
def _global_rank(config, rank: int):
    """ParallelConfig.rank as on that stage's rank 0 (ModelConfig.get_layers_start_end_indices reads it)."""
    parallel = config.parallel_config
    saved = parallel.rank
    try:
        object.__setattr__(parallel, "rank", rank)
        yield
    finally:
        object.__setattr__(parallel, "rank", saved)


def construct(config, case: dict, tp: int, pp: int) -> tuple[list[dict], dict, dict, list[str]]:
    """(refusals, shapes, naming, unconstructed): the target on every pipeline stage, then the draft on the
    last."""
    _init_distributed()
    refusals, shapes, naming, unconstructed = [], {"target": {}, "draft": {}}, {}, []
    ctx = _forward_context(config)
    for rank in range(pp):
        if ctx is not None:
            ctx.clear()  # each stage is its own process: its own layer registry
        try:
            with parallel_as(tp, pp, rank), _global_rank(config, rank * tp):
                model = _build(config, config.model_config, "")
            shapes["target"].update(_shapes(model))
            naming["target"] = _naming(model)
            del model
        except Exception as exc:  # noqa: BLE001 - the release's refusal is the answer
            refusals.append(_refusal("target", exc) | ({"pp_rank": rank} if pp > 1 else {}))
            break
    spec = config.speculative_config
    if spec is None or spec.draft_model_config is None:
        unconstructed.append(f"draft: method {getattr(spec, 'method', None)!r} builds no draft model")
        return refusals, shapes, naming, unconstructed
    try:
        draft_config, prefix = _draft_vllm_config(config)
        draft_tp = spec.draft_parallel_config.tensor_parallel_size if spec.draft_parallel_config else tp
        with parallel_as(draft_tp, pp, pp - 1), _global_rank(config, (pp - 1) * tp), \
                _global_rank(draft_config, (pp - 1) * tp):
            model = _build(draft_config, spec.draft_model_config, prefix)
        shapes["draft"], naming["draft"] = _shapes(model), _naming(model)
        del model
    except Exception as exc:  # noqa: BLE001
        refusals.append(_refusal("draft", exc))
    return refusals, shapes, naming, unconstructed


def verdict(case: dict) -> dict:
    started = time.perf_counter()
    config, refused = config_stage(case)
    if refused is not None:
        return {**refused, "seconds": round(time.perf_counter() - started, 3)}
    out = {"id": case["id"], "stage": None, "type": None, "message": None, "where": None, "frames": [],
           "refusals": [], "shapes": {}, "shapes_at": {"tp": case["tp"], "pp": case["pp"]}, "naming": {},
           "unconstructed": []}
    refusals, shapes, naming, unconstructed = construct(config, case, case["tp"], case["pp"])
    out.update(refusals=refusals, shapes=shapes, naming=naming, unconstructed=unconstructed)
    judged = [r for r in refusals if not r.get("unjudged")]
    for r in refusals:
        if r.get("unjudged"):
            out["unconstructed"].append(f"{r['model']}: this environment cannot build it ({r['type']}: "
                                        f"{r['message'][:300]}) at {r['where']}")
    if judged:
        first = judged[0]
        out.update(stage="construct", type=first["type"], message=f"{first['model']}: {first['message']}",
                   where=first["where"], frames=first["frames"])
    elif refusals:
        first = refusals[0]
        out.update(stage="unjudged", type=first["type"], message=f"{first['model']}: {first['message'][:600]}",
                   where=first["where"], frames=first["frames"])
    if not refusals and case.get("full_shapes") and case["tp"] * case["pp"] > 1:
        full, why = config_stage(case, 1, 1)
        if full is None:
            out["unconstructed"].append(f"shapes at tp 1 / pp 1: the config layer refused ({why.get('message', '')[:200]})")
        else:
            more, full_shapes, _, _ = construct(full, case, 1, 1)
            if more:
                out["unconstructed"].append(f"shapes at tp 1 / pp 1: {more[0]['model']} refused "
                                            f"({more[0]['message'][:200]})")
            else:
                out["shapes"], out["shapes_at"] = full_shapes, {"tp": 1, "pp": 1}
    del config
    gc.collect()
    out["seconds"] = round(time.perf_counter() - started, 3)
    return out


def main() -> int:
    logging.disable(logging.WARNING)
    payload = json.load(sys.stdin)
    cases = payload["cases"] if isinstance(payload, dict) else payload
    # whatever the engine prints (Python or C, some of it through sys.stdout.fileno()) goes to stderr; the
    # answer alone is written to the real stdout, as its last line
    sys.stdout.flush()
    answer_fd = os.dup(1)
    os.dup2(2, 1)
    import vllm

    out = {"engine": "vllm", "version": vllm.__version__, "verdicts": []}
    for case in cases:
        try:
            out["verdicts"].append(verdict(case))
        except Exception as exc:  # noqa: BLE001 - one case's failure is its answer, not the run's
            out["verdicts"].append({"id": case.get("id"), "stage": "unjudged", "type": type(exc).__name__,
                                    "message": f"the runner failed: {exc}"[:600], **_frames(exc)})
    sys.stdout.flush()
    out["peak_rss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    data = ("\n" + json.dumps(out) + "\n").encode("utf-8")
    while data:
        data = data[os.write(answer_fd, data):]
    return 0


if __name__ == "__main__":
    sys.exit(main())
