#!/bin/bash
# Issue 56 on one GPU call (< 9 min): the per-round profile (hoisted vs CUDA-graph draft rounds), then
# the headline side by side. Logs and JSON under $OUT; the image's torch / transformers 5.17.
#   bash bench/gpu/hfspeed56.sh                  # from the repository root: profile + headline
#   PROFILE_ONLY=1 bash bench/gpu/hfspeed56.sh   # the profile alone
#   HEADLINE_ONLY=1 bash bench/gpu/hfspeed56.sh  # the headline alone (< 5 min)
#   PEER_STATIC=1 bash bench/gpu/hfspeed56.sh    # second call: + greedy / assisted with cache_implementation=static
#                                                #   ($OUT/hf_generate_headline_peer_static.json; compiles greedy: slower)
set -u
cd "$(dirname "$0")"
export PYTHONPATH="$PWD/../..:${PYTHONPATH:-}:/tmp/js"
export OUT="${OUT:-/tmp/surgery-out}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/card.txt"
run() {  # budget-seconds script args...
  local budget=$1; shift
  local start=$(date +%s)
  timeout "$budget" python3 "$@" > "$OUT/${1%%.py}.log" 2>&1
  echo "$(date -u +%FT%TZ) $* rc=$? $(( $(date +%s) - start ))s" | tee -a "$OUT/run_all.txt"
  grep -v " INFO \| WARNING \|^$\|Loading weights" "$OUT/${1%%.py}.log" | tail -25
}
if [ -n "${PEER_STATIC:-}" ]; then  # a second call: greedy and transformers' assisted with a static cache
  run 500 hf_generate_gpu.py --headline --prompts default --peer-static --repeats 7
  exit 0
fi
[ -z "${HEADLINE_ONLY:-}" ] && run 200 hf_round_profile_gpu.py
if [ -z "${PROFILE_ONLY:-}" ]; then
  run 300 hf_generate_gpu.py --headline --prompts default
fi
