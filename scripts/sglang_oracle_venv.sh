#!/usr/bin/env bash
# An SGLang release-oracle venv (issue 65): one SGLang release's own server-argument resolution, model
# configs and model classes, runnable on this 2-core CPU machine with no GPU and no weights. The
# release's wheel is installed --no-deps beside the torch it pins (on this disk), with its pure-Python
# requirements; the GPU kernel packages it also pins (sglang-kernel, flashinfer, deep-gemm, ...) are left
# out: nothing the oracle runs (ServerArgs.resolve_once, ModelConfig, the model classes' constructors on
# the meta device) calls a kernel. surgery/engine/ask/sglang_runner.py runs in it; tests/sglang_oracle/
# holds `surgery validate --engine sglang --engine-version V` to its answers.
#   bash scripts/sglang_oracle_venv.sh 0.5.23     # -> .cache/oracles/sglang-0.5.23 (kept while the stamp matches)
# A release not in the table below is refused: each one needs its torch named here.
set -euo pipefail
cd "$(dirname "$0")/.."
VER=${1:?usage: sglang_oracle_venv.sh VERSION}
case "$VER" in
  # the wheel pins torch==2.14.1 (a CUDA build this disk holds; its CPU path is what the oracle uses)
  # and transformers==5.19.0 (kept: the configs SGLang reads go through it)
  0.5.23) TORCH="torch==2.14.1" ;;
  *) echo "sglang_oracle_venv.sh: no oracle recipe for SGLang $VER (known: 0.5.23)" >&2; exit 2 ;;
esac
DIR=.cache/oracles/sglang-$VER
# the requirements left out: GPU kernels and launch-time services the oracle never imports
SKIP="torch torchvision torchaudio torchcodec cuda-python flash-attn-4 flashinfer_python flashinfer-python humming-kernels
nvidia-cutlass-dsl nvidia-mathdx nvidia-ml-py nvshmem4py-cu13 quack-kernels sgl-deep-ep sgl-deep-gemm sgl-flash-mla
sglang-kernel tilelang torch_memory_saver torch-memory-saver apache-tvm-ffi av decord2 deepseek-recipe tml-renderers
smg-grpc-servicer py-spy kernels modelscope datasets outlines build ninja soundfile"
EXTRA="dill safetensors pyyaml jsonschema"   # imported by SGLang's config modules, not declared by the wheel
STAMP="sglang==$VER | $TORCH | extra=$EXTRA | recipe 1"
. scripts/venv_lib.sh  # venv_cached, venv_fresh, pip_, venv_wheel, venv_stamp (the cd above: any cwd)
venv_cached "oracle venv SGLang $VER"
venv_fresh .cache/sglang
venv_wheel .cache/sglang sglang "$VER"
pip_ install -q $TORCH
"$DIR/bin/python" scripts/wheel_requirements.py "$WHEEL" --skip $SKIP > "$DIR/requirements.txt"
pip_ install -q -r "$DIR/requirements.txt" $EXTRA $TORCH
pip_ install -q --no-deps "$WHEEL"
CUDA_VISIBLE_DEVICES= "$DIR/bin/python" -W ignore -c \
  "import sglang, torch; from sglang.srt.server_args import ServerArgs; print('oracle venv SGLang', sglang.__version__, '| torch', torch.__version__)"
venv_stamp
