#!/usr/bin/env bash
# make_bundle.sh: build SGLang for the offline GPU machine (H100 / H200; Python 3.12, torch 2.11.0+cu130
# in its image) as numbered part folders, each small enough to travel in one `run` call.
# The same scheme as ../vllm034_bundle/make_bundle.sh. Runs on the development machine (x86_64
# Linux, pip reaching PyPI, xz, binutils). README.md beside this file says how the parts are used.
#
#   PART_MIB=54 bash bench/gpu/sglang_bundle/make_bundle.sh                 # 0.5.23, from the repo root
#   SGLANG_VERSION=0.5.17 bash bench/gpu/sglang_bundle/make_bundle.sh       # the 2026-12-04 bundle
#
# SGLANG_VERSION: 0.5.23 (default): pins torch==2.14.1; runs on the vLLM 0.34 bundle's torch 2.14.0
#                 (/tmp/site on the GPU machine: install that bundle first), after abi_check.py
#                 found every torch symbol its compiled extensions import in torch 2.14.0.
#                 0.5.17 / 0.5.16: pin torch==2.11.0, the image's own.
# PART_MIB:       size of one part folder (default 54).
# TORCH_WHEEL:    the torch 2.14.0 wheel abi_check.py reads (default: the 0.34 build's download
#                 cache, else pip download into $WORK).
# REUSE_ARCH=1:   rebuild only the sglang archive (2-sglang) after a change to its stripping or to
#                 patch_site.sh: keeps $WORK's wheels, kernel / flashinfer / deps sites and their
#                 archives from the last full build (no download; ~5 min of xz instead of ~30).
#
# Output: $BUNDLE/p1 .. pN (gitignored; default .gpu-bundle-sgl023 for 0.5.23, .sgl-bundle before)
# and $BUNDLE/RUNS.txt, the command of each run on the GPU machine. p1 also holds install.sh,
# env.sh, the SHA256SUMS and TORCH_SITE (where the torch comes from).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SGLANG_VERSION=${SGLANG_VERSION:-0.5.23}
PART_MIB=${PART_MIB:-54}
WORK=${WORK:-${TMPDIR:-/tmp}/spec-surgery-sgl-build-$SGLANG_VERSION}
case "$SGLANG_VERSION" in
  0.5.16|0.5.17) BUNDLE=${BUNDLE:-$PWD/.sgl-bundle} ;;
  *) BUNDLE=${BUNDLE:-$PWD/.gpu-bundle-sgl$(echo "$SGLANG_VERSION" | awk -F. '{printf "%d%02d", $1, $3}')} ;;
esac
XZ=${XZ:-xz -9e -T2}
PY=${PY:-python3}
PLAT=""
for p in manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1 \
         manylinux_2_26 manylinux_2_31 manylinux_2_34 manylinux_2_35 manylinux_2_5; do
  PLAT="$PLAT --platform ${p}_x86_64"
done
TGT="--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none $PLAT"
pipq() { $PY -m pip "$@" 2>&1 | { grep -v "^WARNING: Location" || true; }; }

REUSE=${REUSE_ARCH:-}
if [ -n "$REUSE" ]; then
  for a in 1-sgl_kernel 3-flashinfer 4-deps; do
    [ -f "$WORK/arch/$a.tar.xz" ] || { echo "make_bundle.sh: REUSE_ARCH=1 needs $WORK/arch/$a.tar.xz (run a full build first)" >&2; exit 1; }
  done
  rm -rf "$WORK/sglang_site" "$WORK/arch/2-sglang.tar.xz" "$WORK/arch/SHA256SUMS" "$WORK/pieces"
  mkdir -p "$WORK/sglang_site"
else
  rm -rf "$WORK" && mkdir -p "$WORK/whl" "$WORK/sglang_site" "$WORK/kernel_site" "$WORK/fi_site" \
    "$WORK/deps_site" "$WORK/arch"
fi
rm -rf "$BUNDLE" && mkdir -p "$BUNDLE"

# 1. wheels -----------------------------------------------------------------------
[ -n "$REUSE" ] || pipq download -q --no-deps $TGT -d "$WORK" "sglang==$SGLANG_VERSION"
SW=$(ls "$WORK"/sglang-"$SGLANG_VERSION"-*.whl)
# the kernel wheel is the one sglang's METADATA pins (sglang-kernel==X, older releases sgl-kernel==X);
# PyPI has one x86_64 build per version, built for CUDA 13 (libcudart.so.13) since 0.4
KPIN=$(unzip -p "$SW" "sglang-$SGLANG_VERSION.dist-info/METADATA" |
       sed -n 's/^Requires-Dist: \(sglang-kernel\|sgl-kernel\)==\([^ ;]*\).*/\1==\2/p' | head -1)
[ -n "$KPIN" ] || { echo "make_bundle.sh: no sglang-kernel pin in sglang $SGLANG_VERSION" >&2; exit 1; }
TORCH_PIN=$(unzip -p "$SW" "sglang-$SGLANG_VERSION.dist-info/METADATA" | sed -n 's/^Requires-Dist: torch==\(.*\)/\1/p')
echo "make_bundle.sh: sglang $SGLANG_VERSION pins torch==$TORCH_PIN, $KPIN"
[ -n "$REUSE" ] || pipq download -q --no-deps $TGT -d "$WORK/kwhl" "$KPIN"
KW=$(ls "$WORK"/kwhl/*.whl)
# where the torch comes from on the GPU machine: the image's 2.11.0, or the vLLM 0.34 bundle's 2.14.0
# (/tmp/site) for a release pinning 2.14.x, once abi_check.py (step 2) finds every torch symbol the
# compiled extensions import in it. Any other pin: no torch here to run it with.
case "$TORCH_PIN" in
  2.11.0) TORCH_SITE="" ;;
  2.14.*) TORCH_SITE=/tmp/site ;;
  *) echo "make_bundle.sh: sglang $SGLANG_VERSION pins torch==$TORCH_PIN: neither the image (2.11.0) nor the vLLM 0.34 bundle (2.14.0) has it" >&2; exit 1 ;;
esac
# deps.txt lines may carry a guard: "name==x ; sglang=0.5.16,0.5.17" applies to those releases only
$PY - "$HERE/deps.txt" "$SGLANG_VERSION" > "$WORK/deps.pins" <<'EOF'
import sys
ver = sys.argv[2]
for line in open(sys.argv[1]):
    line = line.split("#", 1)[0].strip()
    if not line:
        continue
    pin, _, guard = line.partition(";")
    guard = guard.strip()
    if guard and ver not in guard.removeprefix("sglang=").replace(" ", "").split(","):
        continue
    print(pin.strip())
EOF
[ -n "$REUSE" ] || pipq download -q --no-deps $TGT -d "$WORK/whl" -r "$WORK/deps.pins"

# 2. sglang and its kernel, stripped (STRIPPED.md says why for each) ----------------------
# (patterns of other releases that match nothing only make unzip say "caution: ... not matched")
(cd "$WORK/sglang_site" && unzip -q "$SW" -x 'sglang/multimodal_gen/*' 'sglang/test/*' \
   'sglang/srt/server/_core.*.so' 'sglang/srt/grpc/_core.*.so' 'sglang/srt/multimodal/_core.*.so' \
   'sglang/srt/rust_extensions/_server.*.so' 'sglang/srt/rust_extensions/_grpc.*.so' \
   'sglang/srt/rust_extensions/_multimodal.*.so' 'sglang/srt/rust_extensions/_bench.*.so' \
   "sglang-$SGLANG_VERSION.dist-info/RECORD" 2>&1 | { grep -v "caution: excluded filename not matched" || true; })
# source edits for what the bundle does not carry (patch_site.sh: 0.5.23's DualGemm without cutlass)
bash "$HERE/patch_site.sh" "$WORK/sglang_site"
[ -n "$REUSE" ] || (cd "$WORK/kernel_site" && unzip -q "$KW" -x 'sgl_kernel/flash_ops.*so' 'sgl_kernel/sm100/*' \
   'sgl_kernel/infllm_ops.*so' 'sgl_kernel/flashmla_ops.*so')
# device code an sm_90 card can never load (other architectures' cubins, PTX newer than compute_90)
# zeroed in place, as the vLLM 0.34 bundle does for torch and NCCL (layout and offsets unchanged)
# (REUSE_ARCH=1: the kernel site was pruned by the full build)
PRUNE_DIRS=("$WORK/sglang_site"); [ -n "$REUSE" ] || PRUNE_DIRS=("$WORK/kernel_site" "$WORK/sglang_site")
find "${PRUNE_DIRS[@]}" -name '*.so' -type f -size +1M -print0 | sort -z \
   | xargs -0 -r $PY "$HERE/../vllm034_bundle/prune_fatbin.py" --keep 90 | sed "s|$WORK/||" | tee "$WORK/pruned.txt"
if [ -n "$TORCH_SITE" ]; then
  # the extensions that link torch, against the torch they will run with (abi_check.py says why)
  TORCH_WHEEL=${TORCH_WHEEL:-$(ls /tmp/spec-surgery-gpu034/dl/torch-2.14.0-cp312-*.whl 2>/dev/null | head -1)}
  if [ -z "$TORCH_WHEEL" ]; then
    pipq download -q --no-deps $TGT -d "$WORK/twhl" "torch==2.14.0"; TORCH_WHEEL=$(ls "$WORK"/twhl/torch-*.whl)
  fi
  mapfile -t EXTS < <(find "$WORK/kernel_site" "$WORK/sglang_site" -name '*.so' -type f \
     -exec sh -c 'readelf -d "$1" 2>/dev/null | grep -qE "NEEDED.*\[lib(torch|c10)" && echo "$1"' _ {} \;)
  $PY "$HERE/abi_check.py" --torch-wheel "$TORCH_WHEEL" "${EXTS[@]}" | tee "$WORK/abi_check.txt" \
    || { echo "make_bundle.sh: the extensions import torch symbols torch 2.14.0 lacks: bundle torch $TORCH_PIN instead" >&2; exit 1; }
fi
# sgl_kernel/__init__ globs sm100/ only when the GPU is not sm90; keep the folder so that a clear
# "could not load common_ops" comes from load_utils on other GPUs rather than a missing path
mkdir -p "$WORK/kernel_site/sgl_kernel/sm100"

# 3. deps, installed (not compiled) for cp312; flashinfer with its JIT sources --------------
# (REUSE_ARCH=1: the sites of the last full build stay as they are)
if [ -z "$REUSE" ]; then
$PY -m pip install -q --no-deps --no-index --no-compile --target "$WORK/deps_site" \
   $TGT "$WORK"/whl/*.whl 2>&1 | { grep -v "^WARNING: Location" || true; }
mv "$WORK/deps_site/flashinfer" "$WORK"/deps_site/flashinfer_python-*.dist-info "$WORK/fi_site/"
# flashinfer's JIT sources stay (the first H200 run stopped at the first forward without them:
# sgl_kernel.rmsnorm hands bf16 to flashinfer.norm, compiled on first use, and SGLang's own JIT
# kernels include flashinfer's headers); of CUTLASS only what a compile includes (STRIPPED.md)
rm -rf "$WORK/fi_site/flashinfer/data/cutlass/"{examples,python,docs,media,test}
# flashinfer 0.7 ships 264 MB of CUDA sources in data/csrc; keep the #include closure of the JIT
# builds the engines reach (prune_csrc.py says which). The 0.5.16 / 0.5.17 bundles (flashinfer
# 0.6.x, run on the H200 as they are) keep all of it. PRUNE_CSRC=0 keeps it for any release.
case "$SGLANG_VERSION" in 0.5.16|0.5.17) PRUNE_CSRC=${PRUNE_CSRC:-0} ;; *) PRUNE_CSRC=${PRUNE_CSRC:-1} ;; esac
if [ "$PRUNE_CSRC" = 1 ]; then
  $PY "$HERE/prune_csrc.py" --flashinfer "$WORK/fi_site/flashinfer" --seed-dir "$WORK/sglang_site/sglang/kernels/jit" \
    | tee "$WORK/prune_csrc.txt"
fi
rm -rf "$WORK/deps_site/bin" "$WORK/deps_site/xgrammar/lib"   # console scripts; static libxgrammar.a
# tvm_ffi's vendored sources (libbacktrace, dlpack: include/ has the headers a JIT build uses).
# Not lib/libtvm_ffi_testing.so: tvm_ffi/core.abi3.so links it (NEEDED), `import tvm_ffi` fails without.
rm -rf "$WORK/deps_site/tvm_ffi/3rdparty"
# debug sections only (xgrammar's binding carries 50 MB of DWARF); code and symbols stay
find "$WORK/deps_site" -name '*.so' -type f -exec strip --strip-debug {} +
fi
find "$WORK" -name __pycache__ -prune -exec rm -rf {} +

# 4. the static import closure: what the start-up modules import that neither the image nor
#    the bundle provides (NEEDED must be empty, or each name accounted for in README.md)
# With the 0.34 bundle's torch 2.14, the image's torch-ABI packages built for 2.11 do not load:
# torchvision comes from /tmp/site (0.29.0, built for 2.14), torchaudio from nowhere (so listed).
grep -vxE "${TORCH_SITE:+torchaudio}" "$HERE/image_packages.txt" > "$WORK/image.txt"
$PY "$HERE/import_closure.py" --site "$WORK/sglang_site" --site "$WORK/kernel_site" \
   --site "$WORK/fi_site" --site "$WORK/deps_site" --follow sglang,sgl_kernel,flashinfer --image "$WORK/image.txt" \
   | tee "$WORK/closure.txt"
[ "${STOP:-}" = closure ] && { echo "make_bundle.sh: STOP=closure: no archives"; exit 0; }

# 5. archives (independent tar.xz files; all extract into one site dir) ---------------------
mkarch() {  # mkarch NAME SRCDIR PATHS...
  local n=$1 s=$2; shift 2
  [ -f "$WORK/arch/$n.tar.xz" ] && { echo "make_bundle.sh: $n.tar.xz kept (REUSE_ARCH)"; return; }
  tar -C "$s" -cf - "$@" | $XZ > "$WORK/arch/$n.tar.xz"
}
mkarch 1-sgl_kernel "$WORK/kernel_site" .
mkarch 2-sglang "$WORK/sglang_site" .
mkarch 3-flashinfer "$WORK/fi_site" .
mkarch 4-deps "$WORK/deps_site" .

# 6. parts: every archive cut into pieces, packed into folders of at most PART_MIB -----------
CAP=$((PART_MIB * 1024 * 1024))
(cd "$WORK/arch" && sha256sum *.tar.xz > SHA256SUMS)
mkdir -p "$WORK/pieces"
for a in "$WORK"/arch/*.tar.xz; do
  split -b $((CAP - 1024 * 1024)) -d -a 2 "$a" "$WORK/pieces/$(basename "$a")."
done
mkdir -p "$BUNDLE/p1"
cp "$HERE/install.sh" "$HERE/env.sh" "$WORK/arch/SHA256SUMS" "$WORK/deps.pins" "$WORK/closure.txt" "$BUNDLE/p1/"
echo "$SGLANG_VERSION $KPIN" > "$BUNDLE/p1/VERSIONS"
echo "$TORCH_SITE" > "$BUNDLE/p1/TORCH_SITE"   # empty: the image's torch; else the site env.sh takes torch from
[ -f "$WORK/abi_check.txt" ] && cp "$WORK/abi_check.txt" "$BUNDLE/p1/"
part=1; used=$(du -sb "$BUNDLE/p1" | cut -f1)
# largest pieces first into the first part that has room (few parts; order does not matter,
# install.sh joins by name)
for f in $(cd "$WORK/pieces" && ls -S); do
  sz=$(stat -c %s "$WORK/pieces/$f"); placed=""
  for d in "$BUNDLE"/p*; do
    if [ $(( $(du -sb "$d" | cut -f1) + sz )) -le "$CAP" ]; then mv "$WORK/pieces/$f" "$d/"; placed=1; break; fi
  done
  if [ -z "$placed" ]; then part=$((part + 1)); mkdir -p "$BUNDLE/p$part"; mv "$WORK/pieces/$f" "$BUNDLE/p$part/"; fi
done
part=$(ls -d "$BUNDLE"/p* | wc -l)
B=$(basename "$BUNDLE")
{
  echo "# SGLang $SGLANG_VERSION + $KPIN in $part part(s) of <= $PART_MIB MiB. One run on the GPU machine per part,"
  echo "# each within ~30 s of the previous one (the machine's /tmp is lost once it goes idle); run K carries $B/pK."
  [ -n "$TORCH_SITE" ] && echo "# First: the vLLM 0.34 bundle's runs (its torch 2.14.0 / triton 3.8.0 / NCCL in $TORCH_SITE; bench/gpu/vllm034_bundle/README.md), on the same warm machine."
  for i in $(seq 1 "$part"); do
    if [ "$i" -lt "$part" ]; then echo "run $i (carry $B/p$i): mkdir -p /tmp/sbundle && cp $B/p$i/* /tmp/sbundle/"
    else echo "run $i (carry $B/p$i): mkdir -p /tmp/sbundle && cp $B/p$i/* /tmp/sbundle/ && bash /tmp/sbundle/install.sh && . /tmp/sbundle/env.sh && <your command>"; fi
  done
} > "$BUNDLE/RUNS.txt"
ls -l "$WORK/arch"
for d in "$BUNDLE"/p*; do echo "$(basename "$d") $(du -sb "$d" | cut -f1) bytes: $(ls "$d" | tr '\n' ' ')"; done
echo "total $(du -scb "$BUNDLE"/p* | tail -1 | cut -f1) bytes"
cat "$BUNDLE/RUNS.txt"
