"""Run inside an environment that has SGLang (an oracle venv, scripts/sglang_oracle_venv.sh, or a user's
own): read cases as JSON on stdin, answer one verdict per case as ONE JSON object on the last line of
stdout (the protocol of surgery/engine/ask/__init__.py).

This file imports nothing of surgery: what it reports is SGLang's own answer, made by SGLang's own code
in the order `python -m sglang.launch_server` makes it:

1. stage "config", step "argparse": the command line a user types, parsed by SGLang's own parser
   (`ServerArgs.add_cli_args`: the `choices=` of --kv-cache-dtype, --attention-backend,
   --speculative-algorithm ... are the release's own);
2. step "server_args": `ServerArgs.from_cli_args(...).resolve_once()`, the resolution pipeline with every
   hook (arg_groups/*_hook.py: speculative, parallel, attention, validation ...);
3. step "target_config": `ModelConfig.from_server_args(server_args)` (context length, quantization,
   architecture checks);
4. step "draft_config": the draft's ModelConfig as the draft worker builds it
   (managers/tp_worker.py _init_model_config: `is_draft_model=True`, at the TARGET's context length,
   speculative/eagle_worker_v2.py), which renames MTP drafts (DeepseekV3ForCausalLM -> ...NextN);
5. stage "construct", steps "target_class" / "draft_class": the class SGLang's loader resolves
   (model_loader/utils.get_model_architecture) constructed on the meta device, no weights, under a
   runtime context whose parallel widths are the case's (tp_size, attn_tp_size, ...), so an `assert
   heads % tp_size == 0` or a `divide()` in a linear layer raises as on a real tp-N rank. Process groups
   are stand-ins that only carry sizes and ranks (no collective runs while constructing); the platform
   is SGLang's CPU platform (SGLANG_USE_CPU_ENGINE=1), so a CUDA-only kernel constraint (e.g. a fused
   norm's supported widths) is not seen here: those stay rules, with their source.

`--device cuda` is what the server arguments are resolved for (the GPU serving a user asks about), while
the process itself has no GPU.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import logging
import os
import re
import resource
import sys
import time
import traceback
import warnings

os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")  # the model classes' CPU paths (no CUDA kernels)
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
_STUBS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sglang_stubs")


def _stub_kernels() -> None:
    """sgl-kernel has no CPU build on PyPI; SGLang's CPU platform imports it at module level. The stand-in
    imports and raises on any call (construction calls none)."""
    if importlib.util.find_spec("sgl_kernel") is None:
        sys.path.append(_STUBS)


class _Refused(Exception):
    pass


def _parser_refusing() -> argparse.ArgumentParser:
    """SGLang's own parser, raising instead of exiting (its message is the refusal)."""
    from sglang.srt.server_args import ServerArgs

    class Parser(argparse.ArgumentParser):
        def error(self, message):  # noqa: D401 - argparse's hook
            raise _Refused(message)

    parser = Parser(prog="sglang.launch_server")
    ServerArgs.add_cli_args(parser)
    return parser


def _argv(case: dict) -> list[str]:
    argv = ["--model-path", case["target"], "--device", "cuda", "--skip-tokenizer-init",
            "--tp-size", str(case.get("tp", 1)), "--pp-size", str(case.get("pp", 1))]
    method = case.get("method")
    if method:
        argv += ["--speculative-algorithm", method]
    if case.get("draft") and case.get("draft") != case.get("target"):
        argv += ["--speculative-draft-model-path", case["draft"]]
    elif case.get("draft") and method not in (None, "EAGLE", "NEXTN"):
        argv += ["--speculative-draft-model-path", case["draft"]]
    k = case.get("k")
    if k is not None and method in ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE"):
        argv += ["--speculative-num-steps", str(k), "--speculative-eagle-topk", "1",
                 "--speculative-num-draft-tokens", str(k + 1)]
    if case.get("max_model_len") is not None:
        argv += ["--context-length", str(case["max_model_len"])]
    if case.get("kv_cache_dtype") not in (None, "auto"):
        argv += ["--kv-cache-dtype", case["kv_cache_dtype"]]
    if case.get("attention_backend"):
        argv += ["--attention-backend", case["attention_backend"]]
    if case.get("hf_overrides"):
        argv += ["--json-model-override-args", json.dumps(case["hf_overrides"])]
    return argv + [str(a) for a in case.get("args") or []]


def _where(exc: BaseException) -> tuple[str, list[str]]:
    """(file:line of the innermost frame inside the sglang package, the last frames, each with its source
    line: a bare `assert` says what it checked only there)."""
    frames = traceback.extract_tb(exc.__traceback__)
    inside = [f for f in frames if f"{os.sep}sglang{os.sep}" in f.filename]
    shown = [f"{f.filename.split(os.sep + 'sglang' + os.sep, 1)[-1]}:{f.lineno} {f.name}: {(f.line or '').strip()[:160]}"
             for f in frames[-6:]]
    if not inside:
        return "", shown
    last = inside[-1]
    return f"sglang/{last.filename.split(os.sep + 'sglang' + os.sep, 1)[-1]}:{last.lineno}", shown


class _Group:
    """A process-group stand-in: sizes and ranks only (construction runs no collective)."""

    def __init__(self, size: int, rank: int = 0):
        self.world_size, self.rank_in_group, self.rank = size, rank, rank
        self.ranks, self.local_rank, self.first_rank, self.last_rank = list(range(size)), 0, 0, size - 1
        self.device_group = self.cpu_group = None

    @property
    def is_first_rank(self):
        return self.rank_in_group == 0

    @property
    def is_last_rank(self):
        return self.rank_in_group == self.world_size - 1

    def __getattr__(self, name):
        raise AttributeError(f"process-group stand-in has no {name!r} (a collective at construction?)")


def _parallel(tp: int, pp: int, pp_rank: int) -> dict:
    return dict(tp_group=_Group(tp), pp_group=_Group(pp, pp_rank), attn_tp_group=_Group(tp), attn_cp_group=_Group(1),
                moe_ep_group=_Group(1), moe_tp_group=_Group(tp), moe_dp_group=_Group(1), dcp_group=_Group(1),
                world_group=_Group(tp * pp), shared_experts_tp_group=_Group(tp), tp_size=tp, pp_size=pp, tp_rank=0,
                pp_rank=pp_rank,
                attn_tp_rank=0, attn_cp_rank=0, attn_dp_rank=0, moe_ep_rank=0, moe_tp_rank=0, moe_dp_rank=0,
                dcp_rank=0, attn_dcp_rank=0, dp_rank=0)


def _construct(model_config, tp: int, pp: int, pp_rank: int, full_shapes: bool):
    import torch
    from sglang.srt.model_loader.utils import get_model_architecture
    from sglang.srt.runtime_context import get_parallel

    cls, arch = get_model_architecture(model_config)
    with get_parallel().override(**_parallel(tp, pp, pp_rank)), torch.device("meta"):
        model = cls(config=model_config.hf_config, quant_config=None)
    params = list(model.named_parameters())
    shapes = {n: list(p.shape) for n, p in params} if full_shapes else {}
    return {"class": f"{cls.__module__}.{cls.__name__}", "arch": arch, "parameters": len(params),
            "numel": int(sum(p.numel() for _, p in params)), "shapes": shapes}


#: the machine the arguments are resolved for: an H100 (sm90, CUDA, FlashInfer present), through SGLang's own
#: `override_platform` ("say what kind of machine this is, once, for every reader"); the platform's
#: defaults (attention backend, Mamba cache buffers) are then a GPU's, not this CPU's
H100 = dict(is_cuda=True, is_hip=False, is_npu=False, is_xpu=False, is_musa=False, is_mps=False, is_sm90=True,
            is_sm100=False, is_sm100_or_sm110=False, is_sm110=False, is_sm120=False, is_blackwell=False,
            is_hopper_with_cuda_12_3=True, has_amx=False, has_flashinfer=True, device_sm=90, device_capability=(9, 0))


def _gpu_platform():
    from sglang.srt.runtime_context import override_platform

    return override_platform(**H100)


@contextlib.contextmanager
def _h100_torch():
    """The device queries a few hooks make through torch directly (model_hook.py's DSA branch calls
    torch.cuda.get_device_capability()), answered as on an H100 while the arguments resolve."""
    import torch

    saved = torch.cuda.get_device_capability, torch.cuda.get_device_name
    torch.cuda.get_device_capability = lambda *a, **k: H100["device_capability"]
    torch.cuda.get_device_name = lambda *a, **k: "NVIDIA H100 80GB HBM3"
    try:
        yield
    finally:
        torch.cuda.get_device_capability, torch.cuda.get_device_name = saved


def _configs(case: dict, out: dict):
    """SGLang's own steps up to the model configs, as launch_server takes them: (resolved view, target
    ModelConfig, draft ModelConfig or None). `out["step"]` names the step running, for a refusal."""
    from sglang.srt.arg_groups.model_override_base import resolved_view
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    platform = _gpu_platform()
    platform.install()
    _h100 = _h100_torch()
    _h100.__enter__()
    try:
        out["step"] = "argparse"
        ns = _parser_refusing().parse_args(_argv(case))
        out["step"] = "server_args"
        server_args = ServerArgs.from_cli_args(ns)
        server_args.resolve_once()
        view = resolved_view(server_args)
        set_global_server_args_for_scheduler(server_args)
        out["step"] = "target_config"
        target = ModelConfig.from_server_args(server_args)
        draft = None
        if view.speculative_algorithm and view.speculative_draft_model_path:
            out["step"] = "draft_config"
            draft = ModelConfig.from_server_args(server_args, model_path=view.speculative_draft_model_path,
                                                 model_revision=view.speculative_draft_model_revision,
                                                 is_draft_model=True, context_length=target.context_len)
        return view, target, draft
    finally:
        _h100.__exit__(None, None, None)
        platform.restore()


def _refused(out: dict, stage: str, exc: BaseException) -> dict:
    where, frames = _where(exc)
    out.update(stage=stage, type=type(exc).__name__, message=(str(exc) or type(exc).__name__)[:3000], where=where,
               frames=frames)
    return out


def _environment_limit(exc: BaseException, message: str) -> bool:
    """This CPU environment's limit, not SGLang's verdict: said (`unconstructed`), never taken as a pass. A
    `*_cpu` config field is the CPU platform's own path (qwen3_next.py reads linear_num_value_heads_cpu, which
    configs/update_config.py adds on CPU only)."""
    cpu_only = isinstance(exc, AttributeError) and re.search(r"'[a-z0-9_]+_cpu'", message)
    # a constructor that touches the GPU (a CUDA stream for LongCat's DSA handlers): no GPU here
    no_gpu = re.search(r"CUDA error:|cudaError|No CUDA GPUs|Torch not compiled with CUDA|CUDA driver|no NVIDIA driver", message)
    return isinstance(exc, (ImportError, NotImplementedError)) or "stand-in" in message or bool(cpu_only or no_gpu)


def _construct_sides(case: dict, target, draft, out: dict) -> dict:
    """The target's first stage, then the draft on the last stage's runner with the pipeline hidden
    (eagle_worker_v2.py draft_pp_context), as SGLang builds them."""
    tp, pp = int(case.get("tp", 1)), int(case.get("pp", 1))
    for side, config, stage_pp in (("target", target, pp), ("draft", draft, 1)):
        if config is None:
            continue
        out["step"] = f"{side}_class"
        try:
            built = _construct(config, tp, stage_pp, 0, True)  # every shape: the count is the answer's size
        except BaseException as exc:  # noqa: BLE001 - SGLang's refusal is the answer
            if isinstance(exc, KeyboardInterrupt):
                raise
            message = (str(exc) or type(exc).__name__)[:3000]
            if _environment_limit(exc, message):
                out["unconstructed"].append(f"{side}: {type(exc).__name__}: {message[:300]} ({_where(exc)[0]})")
                continue
            refused = _refused(out, "construct", exc)
            # the driver's form for a construction refusal (surgery/engine/ask/check.py SRG760)
            refused["refusals"] = [{"model": side, "type": refused["type"], "message": refused["message"],
                                    "where": refused["where"]}]
            return refused
        out["shapes"][side] = built.pop("shapes")
        out["observed"][f"{side}_class"] = built
    out["shapes_at"] = {"tp": tp, "pp": pp}
    return out


def verdict(case: dict) -> dict:
    """SGLang's answer for one case: the first refusal (stage, step, message, where), else what it built."""
    start = time.monotonic()
    out = {"id": case["id"], "stage": None, "observed": {}, "shapes": {}, "unconstructed": []}
    env = {k: str(v) for k, v in (case.get("env") or {}).items()}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        try:
            view, target, draft = _configs(case, out)
        except BaseException as exc:  # noqa: BLE001 - SGLang's refusal is the answer
            if isinstance(exc, KeyboardInterrupt):
                raise
            refused = _refused(out, "config", exc)
            if _environment_limit(exc, refused["message"]):
                refused["stage"] = "unjudged"  # a hook that needs a GPU this machine lacks: not SGLang's verdict
            return refused
        out["observed"] = {"algorithm": view.speculative_algorithm, "attention_backend": view.attention_backend,
                           "kv_cache_dtype": view.kv_cache_dtype, "target_context_len": target.context_len,
                           "draft_context_len": draft.context_len if draft else None,
                           "target_architecture": (target.hf_config.architectures or [None])[0],
                           "draft_architecture": (draft.hf_config.architectures or [None])[0] if draft else None,
                           "num_steps": view.speculative_num_steps}
        if not case.get("construct", True):
            return out
        return _construct_sides(case, target, draft, out)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        out.pop("step", None) if out.get("stage") is None else None
        out["seconds"] = round(time.monotonic() - start, 3)


def facts() -> dict:
    """The release's own lists, imported: the parser's choices and the registered model classes."""
    from sglang.srt.models.registry import ModelRegistry

    parser = _parser_refusing()
    choices = {a.dest: list(a.choices) for a in parser._actions if a.choices and a.dest in
               ("kv_cache_dtype", "attention_backend", "speculative_algorithm", "speculative_draft_attention_backend")}
    return {"choices": choices, "architectures": sorted(ModelRegistry.get_supported_archs())}


def main() -> int:
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    _stub_kernels()
    cases = json.load(sys.stdin)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        import sglang

        if isinstance(cases, dict) and cases.get("facts"):
            answer = {"engine": "sglang", "version": sglang.__version__, "verdicts": [], "facts": facts()}
        else:
            answer = {"engine": "sglang", "version": sglang.__version__, "verdicts": [verdict(c) for c in cases]}
    answer["peak_rss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    sys.stdout.write("\n" + json.dumps(answer) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
