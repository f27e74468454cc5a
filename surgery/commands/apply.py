"""`surgery apply`: the optional dependencies checked first (SRG070), then the engine's runner, by name."""
from __future__ import annotations

from ..extras import require
from ..options import ApplyOptions, fields_from
from . import load_entry


#: `apply --engine E` -> the runner, "module:function", imported when that engine is asked for (the vLLM and
#: SGLang runners import their engine packages)
RUNNERS = {"hf": "surgery.commands.hf_apply:run_apply_hf", "vllm": "surgery.commands.vllm_apply:run_apply_vllm",
           "sglang": "surgery.commands.sglang_apply:run_apply_sglang"}


def cmd_apply(args, out) -> int:
    if args.engine in ("hf", "vllm"):  # sglang: its own coded blocker (SRG360) names what is missing
        require(f"apply --engine {args.engine}")
    options = fields_from(ApplyOptions, args, strict=not args.no_strict, progress=not args.no_progress)
    return load_entry(RUNNERS[options.engine])(options, out)
