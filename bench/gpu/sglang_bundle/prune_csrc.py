#!/usr/bin/env python3
"""Remove from flashinfer's JIT sources (`flashinfer/data/csrc`) every file no JIT build the engine
reaches can read: what stays is the `#include` closure of the seeds.

Why: flashinfer 0.7.x ships 264 MB of CUDA sources in `data/csrc` (DeepSeek-V4, KDA, fused MoE,
"cake" kernels for sm100 / sm120 ...), ~4x what 0.6.15 shipped, and the bundle must travel in
54 MiB parts. The engines here (triton attention, pytorch sampling, SGLANG_IS_FLASHINFER_AVAILABLE=
false) compile two kinds of JIT code (README.md, "Found by the GPU calls"): flashinfer's own norm
module (`flashinfer/jit/norm.py`: csrc/norm.cu + csrc/flashinfer_norm_binding.cu, reached through
`sgl_kernel.rmsnorm` for bf16 / fp16), and SGLang's own JIT kernels (`sglang/kernels/jit`), which
put `data/include`, `data/csrc`, CUTLASS's and spdlog's include folders on their include path
(`sglang/kernels/jit/utils/deps.py`). The seeds are those two .cu files and every source file under
the given SGLang JIT folders; the closure follows `#include "..."` and `#include <...>` through the
including file's folder and the include folders. Includes that resolve nowhere (CUDA, the C++
library, tvm_ffi) are left alone. Everything under the other include folders stays; so do the
csrc folder itself, its top-level headers (115 kB), `csrc/nv_internal` whole (3.4 MB: SGLang's
"flashinfer_nv_internal" dependency puts it and its include/ on the path for its NVFP4 / Marlin JIT
kernels) and every file the closure reaches, so a JIT build of the kept modules sees exactly the
files it saw before.

    prune_csrc.py --flashinfer SITE/flashinfer --seed-dir SITE/sglang/kernels/jit [--dry-run]

Prints what it kept and removed (files, bytes); exit 1 when a seed is missing (a renamed source:
re-read flashinfer/jit/norm.py).
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
SOURCE_SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".hh", ".cc", ".cpp", ".inc", ".inl", ".jinja")
NORM_SEEDS = ("norm.cu", "flashinfer_norm_binding.cu")  # flashinfer/jit/norm.py gen_norm_module


KEEP_WHOLE = ("nv_internal",)  # csrc subfolders kept as they are (module doc)


def include_dirs(fi: Path, seed_dirs=()) -> list[Path]:
    """The include folders SGLang's JIT adds for flashinfer (deps.py get_flashinfer_include_paths,
    get_flashinfer_nv_internal_include_paths), and each seed folder's own include/."""
    d = fi / "data"
    nv = d / "csrc" / "nv_internal"
    return [d / "include", d / "csrc", d / "cutlass" / "include", d / "cutlass" / "tools" / "util" / "include",
            d / "spdlog" / "include", nv, nv / "include", nv / "tensorrt_llm" / "cutlass_extensions" / "include",
            *(Path(s) / "include" for s in seed_dirs)]


def closure(seeds: list[Path], dirs: list[Path]) -> set[Path]:
    seen: set[Path] = set()
    todo = [s.resolve() for s in seeds]
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        try:
            text = f.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for name in INCLUDE.findall(text):
            for base in (f.parent, *dirs):
                cand = base / name
                if cand.is_file():
                    todo.append(cand.resolve())
                    break
    return seen


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flashinfer", required=True, type=Path, help="the unpacked flashinfer package folder")
    ap.add_argument("--seed-dir", action="append", default=[], type=Path,
                    help="a folder whose every source file is a seed (SGLang's kernels/jit)")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    csrc = (a.flashinfer / "data" / "csrc").resolve()
    seeds = [csrc / s for s in NORM_SEEDS]
    missing = [str(s) for s in seeds if not s.is_file()]
    if missing:
        print(f"prune_csrc.py: seed missing: {', '.join(missing)}", file=sys.stderr)
        return 1
    for d in a.seed_dir:
        seeds += [p for p in d.rglob("*") if p.is_file() and p.suffix in SOURCE_SUFFIXES]
    keep = closure(seeds, [p.resolve() for p in include_dirs(a.flashinfer, a.seed_dir)])
    keep |= {p.resolve() for p in csrc.iterdir() if p.is_file() and p.suffix in (".h", ".cuh", ".hpp")}
    for sub in KEEP_WHOLE:
        keep |= {p.resolve() for p in (csrc / sub).rglob("*") if p.is_file()}
    kept = removed = kept_b = removed_b = 0
    for root, _, files in os.walk(csrc):
        for name in files:
            p = Path(root, name).resolve()
            size = p.stat().st_size
            if p in keep:
                kept, kept_b = kept + 1, kept_b + size
                continue
            removed, removed_b = removed + 1, removed_b + size
            if not a.dry_run:
                p.unlink()
    if not a.dry_run:  # empty folders left behind
        for root, dirs, files in sorted(os.walk(csrc), key=lambda t: -len(t[0])):
            if not os.listdir(root) and Path(root) != csrc:
                os.rmdir(root)
    print(f"prune_csrc.py: {len(seeds)} seeds; csrc kept {kept} files ({kept_b / 1e6:.1f} MB), "
          f"removed {removed} ({removed_b / 1e6:.1f} MB){' (dry run)' if a.dry_run else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
