#!/usr/bin/env bash
# make_bundle.sh: vLLM 0.34.0 with its own torch 2.14.0 (cu130), triton 3.8.0 and NCCL 2.30.7 for the
# offline H200 machine (Python 3.12, torch 2.11.0+cu130 and transformers 5.17 in its image), as numbered
# part folders, each small enough to travel with the repository in one `run` call.
# Runs on the development machine (x86_64 Linux, pip reaching PyPI, xz, strip). From the repo root:
#
#   bash bench/gpu/vllm034_bundle/make_bundle.sh          # about 10 minutes on 2 cores
#   PART_MIB=34 BUNDLE=$PWD/.gpu-bundle034 bash bench/gpu/vllm034_bundle/make_bundle.sh
#
# PART_MIB: size of one part (default 34): every call also sends the tracked checkout (~27 MiB) and a
#           call takes 64 MiB in all.
# Output: $BUNDLE/p1 .. pN (keep it out of git: /.gpu-bundle034/ in .git/info/exclude) and RUNS.txt.
#
# Size: the wheels are 1.26 GB (torch 555 MB, triton 248, vLLM 239, NCCL 216). What makes it travel:
#  - prune_fatbin.py zeroes every GPU code entry an sm_90 card can never load (cubins of other
#    architectures, PTX newer than compute_90) in torch, NCCL and vLLM: the headers stay, so layout and
#    offsets are unchanged and xz packs the zeros away;
#  - vLLM stripped as ../../../shared/gpu/make_bundle.sh strips 0.26 (FA2 kernels, FA4 'cute' sources so
#    that Gemma 4 runs on TRITON_ATTN, vllm-rs, DeepGEMM, SM100 FMHA);
#  - debug sections stripped (libtriton.so ~250 MiB of them, NCCL); triton without its profiler (proton, CUPTI), Blackwell ptxas,
#    cuobjdump and nvdisasm (a Hopper card compiles with bin/ptxas, kept);
#  - torch without protoc.
# REUSE_ARCH=1 keeps archives already under $WORK/arch (a rebuild after changing one component).
# Not carried: flashinfer (VLLM_USE_FLASHINFER_SAMPLER=0 in env.sh), cuDNN 9.24 (the image has 9.19; no
# cuDNN op on the paths run), transformers (the image's 5.17 is in 0.34's range).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
VLLM_VERSION=${VLLM_VERSION:-0.34.0}
TORCH_VERSION=${TORCH_VERSION:-2.14.0}
TRITON_SPEC=${TRITON_SPEC:-triton==3.8.0}
NCCL_SPEC=${NCCL_SPEC:-nvidia-nccl-cu13==2.30.7}
PART_MIB=${PART_MIB:-34}
WORK=${WORK:-${TMPDIR:-/tmp}/spec-surgery-gpu034}
BUNDLE=${BUNDLE:-$PWD/.gpu-bundle034}
DL=${DL:-$WORK/dl}   # downloaded wheels are kept between builds
PY=${PY:-python3}
XZ=${XZ:-xz -6 -T2}
PLAT=""
for n in 5 17 18 24 27 28 31 34 35; do PLAT="$PLAT --platform manylinux_2_${n}_x86_64"; done
PLAT="$PLAT --platform manylinux2014_x86_64 --platform manylinux1_x86_64"
TGT="--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none $PLAT"

mkdir -p "$DL" "$WORK/arch"
[ -n "${REUSE_ARCH:-}" ] || rm -rf "$WORK/arch"/*   # REUSE_ARCH=1: keep the archives already built
rm -rf "$WORK/deps_whl" "$WORK/pieces" && mkdir -p "$WORK/deps_whl" "$WORK/pieces"
rm -rf "$BUNDLE" && mkdir -p "$BUNDLE"

# 1. wheels ----------------------------------------------------------------------------------
$PY -m pip download -q --no-deps $TGT -d "$DL" "vllm==$VLLM_VERSION" "torch==$TORCH_VERSION" "$TRITON_SPEC" "$NCCL_SPEC"
grep -v '^\s*#' "$HERE/deps.txt" | sed 's/#.*//' | grep . > "$WORK/deps.pins"
$PY -m pip download -q --no-deps $TGT -d "$WORK/deps_whl" -r "$WORK/deps.pins"
whl() { ls "$DL"/$1-*.whl | head -1; }

# 2. per component: unpack, strip, prune, pack (one tar.xz each; all extract into one site folder) --
S=$WORK/site
touch "$WORK/pruned.txt"
component() {  # component NAME ARCHIVE: unpack_NAME fills $S/NAME
  local name=$1 arch=$WORK/arch/$2.tar.xz
  if [ -s "$arch" ]; then echo "reusing $arch"; return; fi
  rm -rf "$S/$name" && mkdir -p "$S/$name"
  (cd "$S/$name" && "unpack_$name")
  # debug sections: libtriton.so carries ~250 MiB of them, NCCL ~45 MiB
  find "$S/$name" -name '*.so*' -type f -size +1M -print0 | xargs -0 -r file | { grep 'with debug_info' || true; } | cut -d: -f1 \
    | while read -r f; do strip --strip-debug "$f"; done
  find "$S/$name" -name '*.so*' -type f -size +1M -print0 | sort -z \
    | xargs -0 -r $PY "$HERE/prune_fatbin.py" --keep 90 | sed "s|$S/||" | tee -a "$WORK/pruned.txt"
  find "$S/$name" -name __pycache__ -prune -exec rm -rf {} +
  tar -C "$S/$name" -cf - . | $XZ > "$arch.tmp" && mv "$arch.tmp" "$arch"
  rm -rf "$S/$name"
}
unpack_torch() { unzip -q "$(whl torch)" -x 'torch/bin/protoc*'; }
unpack_nccl() { unzip -q "$(whl nvidia_nccl_cu13)"; }
unpack_triton() { unzip -q "$(whl triton)" -x 'triton/_C/libproton.so' 'triton/backends/nvidia/lib/cupti*' \
   'triton/backends/nvidia/bin/ptxas-blackwell' 'triton/backends/nvidia/bin/cuobjdump' 'triton/backends/nvidia/bin/nvdisasm' \
   'triton/profiler/*' 'triton/instrumentation/libGPUInstrumentationTestLib.so'; }
unpack_vllm() { unzip -q "$(whl vllm)" -x \
   'vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so' 'vllm/vllm_flash_attn/cute/*' \
   'vllm/vllm-rs' 'vllm/third_party/deep_gemm/*' 'vllm/third_party/fmha_sm100/*'
   # 0.34's kernel_warmup imports the MiniMax-M3 MSA warm-up on every CUDA engine, and that imports
   # `cutlass` (nvidia-cutlass-dsl, not carried): "No module named 'cutlass'" at the end of every engine
   # start. Skip that warm-up when cutlass is absent (it warms only MiniMax-M3 kernels).
   sed -i "s/^    if current_platform.is_cuda():$/    if current_platform.is_cuda() and __import__('importlib.util').util.find_spec('cutlass') is not None:  # bundle: no nvidia-cutlass-dsl/" \
     vllm/model_executor/warmup/kernel_warmup.py
   grep -q "find_spec('cutlass')" vllm/model_executor/warmup/kernel_warmup.py; }
unpack_deps() { $PY -m pip install -q --no-deps --no-index --no-compile --target . $TGT "$WORK"/deps_whl/*.whl
   rm -rf bin xgrammar/lib; }
component torch 1-torch; component nccl 2-nccl; component triton 3-triton; component vllm 4-vllm; component deps 5-deps
(cd "$WORK/arch" && sha256sum *.tar.xz > SHA256SUMS && ls -l)

# 4. parts ------------------------------------------------------------------------------------
CAP=$((PART_MIB * 1024 * 1024))
for a in "$WORK"/arch/*.tar.xz; do split -b $((CAP - 256 * 1024)) -d -a 2 "$a" "$WORK/pieces/$(basename "$a")."; done
mkdir -p "$BUNDLE/p1"
cp "$HERE/install.sh" "$HERE/env.sh" "$WORK/arch/SHA256SUMS" "$WORK/deps.pins" "$BUNDLE/p1/"
cp "$WORK/pruned.txt" "$BUNDLE/"
echo "$VLLM_VERSION" > "$BUNDLE/p1/VLLM_VERSION"
# first-fit decreasing: every archive's last piece is short, so fill the parts with them (fewer calls)
part=$($PY - "$WORK/pieces" "$BUNDLE" "$CAP" <<'PYEOF'
import os, shutil, sys
src, bundle, cap = sys.argv[1], sys.argv[2], int(sys.argv[3])
used = [sum(os.path.getsize(os.path.join(bundle, "p1", f)) for f in os.listdir(os.path.join(bundle, "p1")))]
for f in sorted(os.listdir(src), key=lambda f: -os.path.getsize(os.path.join(src, f))):
    sz = os.path.getsize(os.path.join(src, f))
    k = next((i for i, u in enumerate(used) if u + sz <= cap), None)
    if k is None:
        used.append(0)
        k = len(used) - 1
        os.makedirs(os.path.join(bundle, f"p{k + 1}"), exist_ok=True)
    shutil.move(os.path.join(src, f), os.path.join(bundle, f"p{k + 1}", f))
    used[k] += sz
print(len(used))
PYEOF
)
{
  echo "# vLLM $VLLM_VERSION + torch $TORCH_VERSION in $part parts of <= $PART_MIB MiB; one run per part, each within"
  echo "# ~30 s of the previous one (the machine's /tmp is lost once it goes idle); run K carries .gpu-bundle034/pK:"
  for i in $(seq 1 "$part"); do
    if [ "$i" -lt "$part" ]; then echo "run $i: mkdir -p /tmp/vbundle && cp .gpu-bundle034/p$i/* /tmp/vbundle/"
    else echo "run $i: mkdir -p /tmp/vbundle && cp .gpu-bundle034/p$i/* /tmp/vbundle/ && bash /tmp/vbundle/install.sh && . /tmp/vbundle/env.sh && <command>"; fi
  done
} > "$BUNDLE/RUNS.txt"
for d in "$BUNDLE"/p*; do echo "$(basename "$d") $(du -sb "$d" | cut -f1) bytes"; done
cat "$BUNDLE/RUNS.txt"
