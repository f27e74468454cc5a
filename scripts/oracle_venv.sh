#!/usr/bin/env bash
# A release-oracle venv: one vLLM release's own config layer and model classes, runnable on this
# 2-core CPU machine with no GPU and no weights (issue 53). The release's CUDA wheel is installed
# --no-deps beside a torch this disk holds, with its pure-Python requirements (the METADATA list up to
# numba; the GPU kernel packages after it are left out). tests/release_oracle/ runs
# EngineArgs(..., load_format="dummy").create_engine_config() in it, and reads its model classes.
#   bash scripts/oracle_venv.sh 0.34.0     # -> .cache/oracles/vllm-0.34.0 (kept while the stamp matches)
#   bash scripts/oracle_venv.sh 0.26.0
# A release not in the table below is refused: each one needs its torch named here.
set -euo pipefail
cd "$(dirname "$0")/.."
VER=${1:?usage: oracle_venv.sh VERSION}
case "$VER" in
  0.34.0) TORCH="torch==2.14.1 torchvision==0.29.1"; PLATFORM=""; DROP="" ;;   # 0.34 has VLLM_TARGET_DEVICE=cpu
  # transformers of the release's time: from 5.12 Gemma 4's head_dim is per layer, which 0.26's config
  # layer reads globally (an environment failure, not the release's verdict); without the `kernels`
  # package, whose newer API that transformers cannot call
  0.26.0) TORCH="torch==2.13.0 transformers==5.8.1"; PLATFORM="tools/vllm_cpu_platform"; DROP="kernels" ;;
  *) echo "oracle_venv.sh: no oracle recipe for vLLM $VER (known: 0.26.0, 0.34.0)" >&2; exit 2 ;;
esac
DIR=.cache/oracles/vllm-$VER
STAMP="vllm==$VER | $TORCH | plugin=$PLATFORM | drop=$DROP | recipe 2"
. scripts/venv_lib.sh  # venv_cached, venv_fresh, pip_, venv_wheel, venv_stamp (the cd above: any cwd)
venv_cached "oracle venv vLLM $VER"
venv_fresh .cache/oracles/wheels
venv_wheel .cache/oracles/wheels vllm "$VER"
pip_ install -q $TORCH
# the wheel's own requirements, up to numba (the CUDA kernel packages follow it); markers kept for pip
"$DIR/bin/python" scripts/wheel_requirements.py "$WHEEL" --until numba > "$DIR/requirements.txt"
pip_ install -q -r "$DIR/requirements.txt" $TORCH
pip_ install -q --no-deps "$WHEEL"
[ -z "$PLATFORM" ] || pip_ install -q --no-deps "./$PLATFORM"
[ -z "$DROP" ] || pip_ uninstall -y -q $DROP
VLLM_TARGET_DEVICE=cpu CUDA_VISIBLE_DEVICES= "$DIR/bin/python" -c "import vllm, torch; print('oracle venv vLLM', vllm.__version__, '| torch', torch.__version__)"
venv_stamp
