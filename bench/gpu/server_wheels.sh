#!/bin/bash
# The OpenAI server's dependencies that the offline vLLM bundle (../shared/gpu/make_bundle.sh) does not
# carry: pure-Python cp312 wheels (~0.4 MB) into .gpu-bundle/srv, carried with the last bundle chunk and
# unpacked next to the jsonschema wheels (docs/gpu.md section 10):
#   bash bench/gpu/server_wheels.sh
#   run (carry .gpu-bundle/srv): for w in .gpu-bundle/srv/*.whl; do python3 -m zipfile -e $w /tmp/js; done
# 2026-12-03 the server stopped at `import uvicorn` (vllm/entrypoints/launcher.py:10), then, with these wheels, at
# `watchfiles` (entrypoints/serve/utils/ssl.py) and `model_hosting_container_standards` (serve/sagemaker,
# with its jmespath / supervisor / httpx); the other names are
# the third-party imports of vllm/entrypoints/ (0.26.0) that neither the bundle nor, as far as known, the
# image has. bench/gpu/vllm_serve_gpu.py records which server modules import before it starts the server.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .gpu-bundle/srv
.venv/bin/pip download -q --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --abi abi3 \
  --abi none --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --no-deps \
  uvicorn h11 click prometheus_client prometheus-fastapi-instrumentator python-multipart watchfiles \
  model-hosting-container-standards jmespath supervisor httpx httpcore certifi idna -d .gpu-bundle/srv
ls .gpu-bundle/srv
