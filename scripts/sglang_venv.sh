#!/usr/bin/env bash
# A SEPARATE venv with SGLang 0.5.21 beside torch 2.13.0+cpu, for the opt-in checks against SGLang's
# imported code (tests/sglang_engine/test_imported_oracle.py, -m slow) and the plain-engine runs of
# docs/sglang.md. Never touches .venv. SGLang pins CUDA packages, so it is installed --no-deps with
# the pure-Python dependencies its engine and model modules import; tools/sglang_cpu_stubs/ stands in
# for torchvision and sgl_kernel (docs/sglang.md says why).
#   bash scripts/sglang_venv.sh [DIR]      # default /tmp/sgl; then:
#   SURGERY_SGLANG_PYTHON=DIR/bin/python .venv/bin/python -m pytest -q -m slow tests/sglang_engine
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-/tmp/sgl}
PY=${PYTHON:-python3}
[ -x "$DIR/bin/python" ] || "$PY" -m venv "$DIR"
pip_() { "$DIR/bin/pip" "$@" 2>&1 | { grep -v '^WARNING: Location' || true; }; }
pip_ install -q torch==2.13.0
[ -n "$(ls .cache/sglang/sglang-0.5.21-*.whl 2>/dev/null)" ] || pip_ download -q --no-deps -d .cache/sglang sglang==0.5.21
pip_ install -q --no-deps .cache/sglang/sglang-0.5.21-*.whl
pip_ install -q transformers==5.12.1 tokenizers==0.22.2 numpy scipy pydantic fastapi uvicorn uvloop orjson pyzmq \
  psutil requests aiohttp packaging pillow einops msgspec xxhash setproctitle partial_json_parser interegular \
  pybase64 python-multipart prometheus-client tqdm regex sentencepiece==0.2.1 tiktoken openai==2.6.1 \
  openai-harmony==0.0.4 xgrammar==0.2.7 'llguidance>=1.7.6,<2' compressed-tensors==0.18.0 blobfile==3.0.0 distro \
  easydict gguf IPython numba==0.65.1 zstandard watchfiles anthropic 'mistral_common>=1.11.5' safetensors dill \
  pyyaml jsonschema
pip_ install -q --no-deps timm==1.0.16
PYTHONPATH="$PWD/tools/sglang_cpu_stubs" SGLANG_USE_CPU_ENGINE=1 "$DIR/bin/python" -c \
  "import sglang, sglang.srt.models.llama, sglang.srt.speculative.eagle_worker_v2; print('sglang', sglang.__version__, 'imports on CPU')"
