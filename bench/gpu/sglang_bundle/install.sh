#!/usr/bin/env bash
# install.sh: on the H200 machine, after every part folder was copied into /tmp/sbundle: joins the
# pieces of each archive, checks them, unpacks them into /tmp/ssite, checks the requirements, prints
# the versions and runs an import smoke check that names every sgl_kernel module / op that does
# not load.  Afterwards, in the same shell:  . /tmp/sbundle/env.sh
#   SB=DIR SITE=DIR  where the parts are / where to unpack (defaults /tmp/sbundle, /tmp/ssite)
#   SKIP_SMOKE=1     unpack and check only (for a check on a machine without CUDA / Python 3.12)
set -uo pipefail
SB=${SB:-/tmp/sbundle}
SITE=${SITE:-/tmp/ssite}
ORIG=$PWD   # the repo root: the smoke check imports surgery.sglang.hooks from there
mkdir -p "$SITE"
fail() { echo "install.sh: $*" >&2; exit 1; }
cd "$SB" || fail "no $SB"
# join the pieces (NAME.tar.xz.00, .01, ...) back into NAME.tar.xz
for first in *.tar.xz.00; do
  [ -e "$first" ] || continue
  name=${first%.00}
  cat "$name".[0-9][0-9] > "$name" && rm -f "$name".[0-9][0-9]
done
[ -f SHA256SUMS ] || fail "SHA256SUMS missing (part p1 not copied?)"
# a release pinning torch 2.14 runs on the vLLM 0.34 bundle's torch (TORCH_SITE, env.sh): it must be there
TSITE=$(cat TORCH_SITE 2>/dev/null || true)
if [ -n "$TSITE" ] && [ "${SKIP_SMOKE:-0}" != 1 ]; then
  [ -f "$TSITE/torch/version.py" ] || fail "no torch in $TSITE: this SGLang runs on the vLLM 0.34 bundle's torch 2.14.0; run that bundle's parts and its install.sh first (bench/gpu/vllm034_bundle/README.md), on the same warm machine"
  echo "install.sh: torch from $TSITE: $(sed -n "s/^__version__ = '\(.*\)'/\1/p" "$TSITE/torch/version.py")"
fi
missing=$(awk '{print $2}' SHA256SUMS | while read -r f; do [ -f "$f" ] || echo "$f"; done)
[ -z "$missing" ] || fail "archives missing: $missing (a part was not copied, or /tmp was lost between calls)"
sha256sum -c --quiet SHA256SUMS || fail "checksum mismatch"
n=0
for f in *.tar.xz; do
  tar -C "$SITE" -xJf "$f" || fail "failed on $f"
  n=$((n + 1))
done
echo "install.sh: unpacked $n archives into $SITE ($(du -sh "$SITE" | cut -f1)); $(cat VERSIONS 2>/dev/null)"
[ "${SKIP_SMOKE:-0}" = 1 ] && { echo "install.sh: SKIP_SMOKE=1, no import check"; exit 0; }
. "$SB/env.sh"
cd "$ORIG" || true

# requirement check of the bundled distributions against what is importable now (sglang and its
# kernel are skipped: their requirement lists name many CUDA packages deliberately left out, README.md)
python3 - "$SITE" <<'EOF'
import sys, importlib.metadata as md
from packaging.requirements import Requirement
LEFT_OUT = {"jedi"}  # IPython imports it lazily, for completion only (deps.txt)
bad = []
for d in md.distributions(path=[sys.argv[1]]):
    if d.metadata["Name"] in ("sglang", "sglang-kernel", "sgl-kernel", "flashinfer-python", "flashinfer_python"):
        continue
    for r in d.requires or []:
        req = Requirement(r)
        if req.name in LEFT_OUT:
            continue
        if req.marker and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            v = md.version(req.name)
        except md.PackageNotFoundError:
            v = None
        if v is None or (req.specifier and not req.specifier.contains(v, prereleases=True)):
            bad.append(f"{d.metadata['Name']} needs {req} (have {v})")
print("install.sh: requirement check:", "all satisfied" if not bad else "")
for b in sorted(set(bad)):
    print("   unsatisfied:", b)
EOF

# smoke check: versions, then every sgl_kernel submodule and the engine / worker / model modules,
# each import on its own so that a failure is named; the FA3 wrapper (sgl_kernel.flash_attn) is
# expected to fail (flash_ops stripped, STRIPPED.md)
python3 - <<'EOF'
import importlib, importlib.metadata as md, pkgutil, time
t0 = time.time()
import torch
print(f"install.sh: torch {torch.__version__} ({torch.__file__.rsplit('/torch/', 1)[0]}) cuda {torch.version.cuda} gpu "
      f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}")
for dist in ("sglang", "sglang-kernel", "flashinfer-python", "transformers", "tokenizers",
             "xgrammar", "apache-tvm-ffi", "triton"):
    try:
        print(f"   {dist} {md.version(dist)}")
    except md.PackageNotFoundError:
        print(f"   {dist} MISSING")
failed = {}
def try_import(name):
    try:
        importlib.import_module(name)
        return True
    except BaseException as e:  # noqa: BLE001 - report everything, by name
        failed[name] = f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:200] if str(e).strip() else ''}"
        return False
sgl_kernel = importlib.import_module("sgl_kernel") if try_import("sgl_kernel") else None
EXPECTED = {"sgl_kernel.flash_attn", "sgl_kernel.metal", "sgl_kernel.musa"}  # FA3 stripped; other platforms
for m in pkgutil.walk_packages(sgl_kernel.__path__ if sgl_kernel else [], "sgl_kernel."):
    if m.name.rsplit(".", 1)[-1].endswith("_ops") or m.name.startswith("sgl_kernel.testing"):
        continue
    try_import(m.name)
ops = sorted(n.split("::", 1)[1].split(".")[0] for n in torch._C._dispatch_get_all_op_names()
             if n.startswith("sgl_kernel::"))
print(f"install.sh: sgl_kernel {getattr(sgl_kernel, '__version__', 'NOT IMPORTED')}: {len(ops)} torch ops registered, common_ops from "
      f"{getattr(getattr(sgl_kernel, 'common_ops', None), '__file__', '?')}")
# sglang-kernel 0.4.5 (SGLang 0.5.17) has the speculative tree ops; 0.4.10 (0.5.23) has none: SGLang 0.5.23
# runs them as triton / its own JIT kernels (sglang/kernels/ops/speculative). An op is required when
# sgl_kernel has a Python wrapper of that name.
for op in ("rmsnorm", "fused_add_rmsnorm", "silu_and_mul", "build_tree_kernel_efficient", "verify_tree_greedy",
           "tree_speculative_sampling_target_only", "segment_packbits", "top_k_renorm_probs", "top_p_renorm_probs"):
    if op not in ops and (op in ("rmsnorm", "fused_add_rmsnorm", "silu_and_mul") or hasattr(sgl_kernel, op)):
        print(f"   sgl_kernel op MISSING: {op}")
        failed[f"torch.ops.sgl_kernel.{op}"] = "not registered"
for mod in ("flashinfer", "flashinfer.sampling", "sglang", "sglang.srt.server_args",
            "sglang.srt.entrypoints.engine", "sglang.srt.managers.scheduler",
            "sglang.srt.model_executor.model_runner", "sglang.srt.layers.attention.triton_backend",
            "sglang.srt.layers.sampler", "sglang.srt.speculative.spec_registry",
            "sglang.srt.speculative.eagle_worker_v2", "sglang.srt.speculative.multi_layer_eagle_worker_v2",
            "sglang.srt.speculative.standalone_worker_v2",
            "sglang.srt.models.llama", "sglang.srt.models.llama_eagle", "sglang.srt.models.llama_eagle3",
            "sglang.srt.models.mimo", "sglang.srt.models.mimo_mtp", "sglang.srt.models.deepseek_v2",
            "sglang.srt.models.deepseek_nextn", "surgery.sglang.hooks"):
    try_import(mod)
# modules of one release only: imported when this SGLang has them
import importlib.util
for mod in ("sglang.kernels.ops.speculative.spec_tree", "sglang.kernels.ops.speculative.tree",
            "sglang.srt.mem_cache.rust_tree_core.mem_cache"):
    try:
        present = importlib.util.find_spec(mod) is not None
    except Exception:  # noqa: BLE001 - a parent package that fails is reported by try_import
        present = True
    if present:
        try_import(mod)
# 0.5.23: DualGemm._select_mode runs in every Llama / Qwen2 MLP constructor on CUDA; without cutlass it
# must give None (make_bundle.sh's patch_site.sh), not import the CuTe-DSL kernel (the H100 run of
# 2026-12-06 died there). Called on a bare instance: the patched method returns before using its args.
try:
    if importlib.util.find_spec("cutlass") is None and importlib.util.find_spec("sglang.srt.layers.dual_gemm"):
        from sglang.srt.layers.dual_gemm import DualGemm
        print(f"install.sh: DualGemm mode without cutlass: {DualGemm._select_mode(object.__new__(DualGemm), None, 4096)}")
except Exception as e:  # noqa: BLE001 - named below like an import failure
    failed["sglang.srt.layers.dual_gemm.DualGemm._select_mode"] = f"{type(e).__name__}: {e}"
for name, err in sorted(failed.items()):
    print(f"   {'expected: ' if name in EXPECTED else ''}FAILED import {name}: {err}")
bad = sorted(set(failed) - EXPECTED)
print(f"install.sh: smoke check {'PASS' if not bad else 'FAIL (' + str(len(bad)) + ' modules)'} in {time.time() - t0:.1f} s")
EOF
