#!/bin/bash
# tune66_gpu.sh: issue 66's device work, run from the repo root on the H100 in the call that copies the last part
# of the vLLM 0.34 bundle (bench/gpu/vllm034_bundle/README.md: one `run` per part, the last one then runs this):
#   mkdir -p /tmp/vbundle && cp .gpu-bundle034/pN/* /tmp/vbundle/ && bash bench/gpu/tune66_gpu.sh
# install.sh, env.sh, the k sweep against `surgery probe --tune` (bench/gpu/tune_sweep_gpu.py), then $EXTRA
# (another helper's command, its files under $OUT too). Logs under $OUT (at most 8 files come back).
set -u
cd "$(dirname "$0")/../.."
export OUT=${OUT:-/tmp/surgery-out} PYTHONUNBUFFERED=1
mkdir -p "$OUT"
start=$(date +%s)
bash /tmp/vbundle/install.sh > "$OUT/install.log" 2>&1 || { tail -20 "$OUT/install.log"; exit 1; }
tail -3 "$OUT/install.log"
. /tmp/vbundle/env.sh
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
echo "install $(( $(date +%s) - start )) s"
timeout -k 10 "${SWEEP_S:-330}" python3 bench/gpu/tune_sweep_gpu.py --out "$OUT/tune_sweep.json" ${SWEEP_ARGS:-} \
  > "$OUT/tune_sweep.log" 2>&1
echo "sweep rc=$? $(( $(date +%s) - start )) s"
grep -v " INFO \| WARNING \|^$\|^(EngineCore" "$OUT/tune_sweep.log" | tail -30
if [ -n "${EXTRA:-}" ]; then bash -c "$EXTRA"; echo "extra rc=$? $(( $(date +%s) - start )) s"; fi
