#!/bin/bash
# The vLLM part of one GPU session, scripts in the order given, each with its own log under $OUT
# (the tool returns only the last 12,000 characters of output; the logs come back whole):
#   . /tmp/vbundle/env.sh && bash bench/gpu/run_all.sh vllm_gpu.py vllm_audit_gpu.py
# Python path: the repository, the bundle's, and /tmp/js (jsonschema wheels unpacked there).
set -u
cd "$(dirname "$0")"
export PYTHONPATH="$PWD/../..:${PYTHONPATH:-}:/tmp/js"
export OUT="${OUT:-/tmp/surgery-out}"
mkdir -p "$OUT"
for script in "$@"; do
  start=$(date +%s)
  python3 $script > "$OUT/${script%%.py*}.log" 2>&1
  rc=$?
  echo "$(date -u +%FT%TZ) $script rc=$rc $(( $(date +%s) - start ))s" | tee -a "$OUT/run_all.txt"
  grep -v " INFO \| WARNING \|^$" "$OUT/${script%%.py*}.log" | tail -15
done
