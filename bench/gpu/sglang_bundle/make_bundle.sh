#!/usr/bin/env bash
# make_bundle.sh: build SGLang for the offline H200 machine (Python 3.12, torch 2.11.0+cu130 there)
# as numbered part folders, each small enough to travel with the repo in one run on the GPU machine.
# The same scheme as ../shared/gpu/make_bundle.sh (vLLM). Runs on the development machine (x86_64
# Linux, pip reaching PyPI, xz). README.md beside this file says how the parts are used.
#
#   bash bench/gpu/sglang_bundle/make_bundle.sh           # from the repo root; a few minutes
#   SGLANG_VERSION=0.5.16 PART_MIB=30 bash bench/gpu/sglang_bundle/make_bundle.sh
#
# SGLANG_VERSION: 0.5.17 (default) or 0.5.16: the newest releases that pin torch==2.11.0.
# PART_MIB:       size of one part folder (default 30); PART_MIB + the repo's size must stay < 64.
#
# Output: ./.sgl-bundle/p1 .. pN (gitignored) and .sgl-bundle/RUNS.txt, the command of each run on
# the GPU machine. p1 also holds install.sh, env.sh and the SHA256SUMS.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SGLANG_VERSION=${SGLANG_VERSION:-0.5.17}
PART_MIB=${PART_MIB:-30}
WORK=${WORK:-${TMPDIR:-/tmp}/spec-surgery-sgl-build}
BUNDLE=${BUNDLE:-$PWD/.sgl-bundle}
PY=${PY:-python3}
PLAT=""
for p in manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1 \
         manylinux_2_26 manylinux_2_31 manylinux_2_34 manylinux_2_35 manylinux_2_5; do
  PLAT="$PLAT --platform ${p}_x86_64"
done
TGT="--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none $PLAT"
pipq() { $PY -m pip "$@" 2>&1 | { grep -v "^WARNING: Location" || true; }; }

rm -rf "$WORK" && mkdir -p "$WORK/whl" "$WORK/sglang_site" "$WORK/kernel_site" "$WORK/fi_site" \
  "$WORK/deps_site" "$WORK/arch"
rm -rf "$BUNDLE" && mkdir -p "$BUNDLE"

# 1. wheels -----------------------------------------------------------------------
pipq download -q --no-deps $TGT -d "$WORK" "sglang==$SGLANG_VERSION"
SW=$(ls "$WORK"/sglang-"$SGLANG_VERSION"-*.whl)
# the kernel wheel is the one sglang's METADATA pins (sglang-kernel==X, older releases sgl-kernel==X);
# PyPI has one x86_64 build per version, built for CUDA 13 (libcudart.so.13) since 0.4
KPIN=$(unzip -p "$SW" "sglang-$SGLANG_VERSION.dist-info/METADATA" |
       sed -n 's/^Requires-Dist: \(sglang-kernel\|sgl-kernel\)==\([^ ;]*\).*/\1==\2/p' | head -1)
[ -n "$KPIN" ] || { echo "make_bundle.sh: no sglang-kernel pin in sglang $SGLANG_VERSION" >&2; exit 1; }
TORCH_PIN=$(unzip -p "$SW" "sglang-$SGLANG_VERSION.dist-info/METADATA" | sed -n 's/^Requires-Dist: torch==\(.*\)/\1/p')
echo "make_bundle.sh: sglang $SGLANG_VERSION pins torch==$TORCH_PIN, $KPIN"
[ "$TORCH_PIN" = "2.11.0" ] || echo "make_bundle.sh: WARNING: the H200 has torch 2.11.0, not $TORCH_PIN" >&2
pipq download -q --no-deps $TGT -d "$WORK/kwhl" "$KPIN"
KW=$(ls "$WORK"/kwhl/*.whl)
# deps.txt lines may carry a guard: "name==x ; sglang=0.5.17" applies to that release only
$PY - "$HERE/deps.txt" "$SGLANG_VERSION" > "$WORK/deps.pins" <<'EOF'
import sys
ver = sys.argv[2]
for line in open(sys.argv[1]):
    line = line.split("#", 1)[0].strip()
    if not line:
        continue
    pin, _, guard = line.partition(";")
    guard = guard.strip()
    if guard and guard != f"sglang={ver}":
        continue
    print(pin.strip())
EOF
pipq download -q --no-deps $TGT -d "$WORK/whl" -r "$WORK/deps.pins"

# 2. sglang and its kernel, stripped (STRIPPED.md says why for each) ----------------------
(cd "$WORK/sglang_site" && unzip -q "$SW" -x 'sglang/multimodal_gen/*' 'sglang/test/*' \
   'sglang/srt/server/_core.*.so' 'sglang/srt/grpc/_core.*.so' 'sglang/srt/multimodal/_core.*.so' \
   "sglang-$SGLANG_VERSION.dist-info/RECORD")
(cd "$WORK/kernel_site" && unzip -q "$KW" -x 'sgl_kernel/flash_ops.*so' 'sgl_kernel/sm100/*' \
   'sgl_kernel/infllm_ops.*so' 'sgl_kernel/flashmla_ops.*so')
# sgl_kernel/__init__ globs sm100/ only when the GPU is not sm90; keep the folder so that a clear
# "could not load common_ops" comes from load_utils on other GPUs rather than a missing path
mkdir -p "$WORK/kernel_site/sgl_kernel/sm100"

# 3. deps, installed (not compiled) for cp312; flashinfer with its JIT sources --------------
$PY -m pip install -q --no-deps --no-index --no-compile --target "$WORK/deps_site" \
   $TGT "$WORK"/whl/*.whl 2>&1 | { grep -v "^WARNING: Location" || true; }
mv "$WORK/deps_site/flashinfer" "$WORK"/deps_site/flashinfer_python-*.dist-info "$WORK/fi_site/"
# flashinfer's JIT sources stay (the first H200 run stopped at the first forward without them:
# sgl_kernel.rmsnorm hands bf16 to flashinfer.norm, compiled on first use, and SGLang's own JIT
# kernels include flashinfer's headers); of CUTLASS only what a compile includes (STRIPPED.md)
rm -rf "$WORK/fi_site/flashinfer/data/cutlass/"{examples,python,docs,media,test}
rm -rf "$WORK/deps_site/bin" "$WORK/deps_site/xgrammar/lib"   # console scripts; static libxgrammar.a
# tvm_ffi's vendored sources (libbacktrace, dlpack: include/ has the headers a JIT build uses).
# Not lib/libtvm_ffi_testing.so: tvm_ffi/core.abi3.so links it (NEEDED), `import tvm_ffi` fails without.
rm -rf "$WORK/deps_site/tvm_ffi/3rdparty"
# debug sections only (xgrammar's binding carries 50 MB of DWARF); code and symbols stay
find "$WORK/deps_site" -name '*.so' -type f -exec strip --strip-debug {} +
find "$WORK" -name __pycache__ -prune -exec rm -rf {} +

# 4. the static import closure: what the start-up modules import that neither the image nor
#    the bundle provides (NEEDED must be empty, or each name accounted for in README.md)
$PY "$HERE/import_closure.py" --site "$WORK/sglang_site" --site "$WORK/kernel_site" \
   --site "$WORK/fi_site" --site "$WORK/deps_site" --follow sglang,sgl_kernel,flashinfer \
   | tee "$WORK/closure.txt"

# 5. archives (independent tar.xz files; all extract into one site dir) ---------------------
mkarch() {  # mkarch NAME SRCDIR PATHS...
  local n=$1 s=$2; shift 2
  tar -C "$s" -cf - "$@" | xz -9e -T2 > "$WORK/arch/$n.tar.xz"
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
{
  echo "# SGLang $SGLANG_VERSION + $KPIN in $part part(s) of <= $PART_MIB MiB. One run on the GPU machine per part,"
  echo "# each within ~30 s of the previous one (the machine's /tmp is lost once it goes idle); run K brings .sgl-bundle/pK:"
  for i in $(seq 1 "$part"); do
    if [ "$i" -lt "$part" ]; then echo "run $i (brings .sgl-bundle/p$i): mkdir -p /tmp/sbundle && cp .sgl-bundle/p$i/* /tmp/sbundle/"
    else echo "run $i (brings .sgl-bundle/p$i): mkdir -p /tmp/sbundle && cp .sgl-bundle/p$i/* /tmp/sbundle/ && bash /tmp/sbundle/install.sh && . /tmp/sbundle/env.sh && <your command>"; fi
  done
} > "$BUNDLE/RUNS.txt"
ls -l "$WORK/arch"
for d in "$BUNDLE"/p*; do echo "$(basename "$d") $(du -sb "$d" | cut -f1) bytes: $(ls "$d" | tr '\n' ' ')"; done
echo "total $(du -scb "$BUNDLE"/p* | tail -1 | cut -f1) bytes"
cat "$BUNDLE/RUNS.txt"
