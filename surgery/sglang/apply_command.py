"""`surgery apply RECIPE --engine sglang`: where SGLang cannot run speculative decoding, a coded
error (SRG360) naming the blocker, never a traceback.

Measured here (docs/sglang.md, engine card `limits.speculative_fails_on_devices`): sglang 0.5.21
runs a plain engine on this CPU, but a speculative engine stops at start on CPU ops that only
sgl-kernel's CPU build has. On a CUDA device surgery has not run SGLang yet: the hook
(surgery.sglang.hooks.install) is what a launcher calls; this command does not pretend to have run."""
from __future__ import annotations

import importlib.util

from ..diagnostics import SurgeryError, diag
from ..engines import card


def blocker(device: str | None = None) -> str:
    """Why `--engine sglang` cannot run here, in one sentence."""
    release = card("sglang")["release"]
    if importlib.util.find_spec("sglang") is None:
        installed = f"sglang is not installed (surgery pins {release}, beside torch 2.13.0, in its own venv)"
    else:
        installed = "sglang is installed"
    if device is None:
        try:
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
        except Exception:  # noqa: BLE001 - no torch: a CPU-only question anyway
            device = "cpu"
    if device in (card("sglang").get("limits") or {}).get("speculative_fails_on_devices", ()):
        return (f"{installed}; and on {device} SGLang {release} cannot start a speculative engine: the KV pool's "
                "warm-up calls sgl_kernel.copy_all_layer_kv_cache_cpu, EAGLE needs an attention backend other than "
                "torch_native (intel_amx falls back to torch_native without AMX) and the tree ops "
                "build_tree_kernel_efficient_cpu / verify_tree_greedy_cpu, all from sgl-kernel's CPU build, which "
                "PyPI does not ship")
    return (f"{installed}; on {device} `surgery apply --engine sglang` has not been run (no device time was spent "
            "on SGLang); the hook surgery.sglang.hooks.install() is the integration")


def run_apply_sglang(args, out) -> int:
    raise SurgeryError(diag("SRG360", f"cannot run {args.recipe} in SGLang here: {blocker()}",
                            hint="docs/sglang.md: the install attempts, the errors, and the plan-level comparison "
                                 "with vLLM (`python -m surgery.sglang.compare`); run the recipe with --engine vllm "
                                 "or hf meanwhile"))
