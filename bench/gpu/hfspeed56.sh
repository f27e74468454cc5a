#!/bin/bash
# Issues 56 and 69 on one GPU call (< 7 min of command): the HF headline side by side (default greedy, greedy
# with a static cache compiled by transformers, transformers' assisted generation, ours with the verify step
# and the draft round in CUDA graphs, ours with the verify forward on a DynamicCache), 1 warm-up + 9
# interleaved repeats, with the round-cost model; then, if asked, the per-round profile. Logs and JSON
# under $OUT; the image's torch / transformers.
#   bash bench/gpu/hfspeed56.sh                  # from the repository root: the headline (the acceptance run)
#   PROFILE=1 bash bench/gpu/hfspeed56.sh        # + the per-round profile (graph+dynamic vs graph+graph)
#   PROFILE_ONLY=1 bash bench/gpu/hfspeed56.sh   # the profile alone
#   PEER_STATIC=1 bash bench/gpu/hfspeed56.sh    # the headline + transformers' assisted with a static cache
#   HEADLINE_BUDGET_S=300                        # no timed repeat starts past this (default 300 s)
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
if [ -z "${PROFILE_ONLY:-}" ]; then
  run 420 hf_generate_gpu.py --headline --prompts default --repeats 9 --budget-s "${HEADLINE_BUDGET_S:-300}" \
    ${PEER_STATIC:+--peer-static}
fi
if [ -n "${PROFILE:-}${PROFILE_ONLY:-}" ]; then
  run 200 hf_round_profile_gpu.py
fi
