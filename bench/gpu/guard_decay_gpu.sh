#!/bin/bash
# guard_decay_gpu.sh: issue 68's GPU row, the guard against a decay that starts late (bench/guard_decay.py), on the
# H100 with the vLLM 0.34 bundle already installed on the warm machine (bench/gpu/vllm034_bundle/README.md), e.g. as
# the EXTRA of bench/gpu/tune66_gpu.sh, or in a call right after it:
#   bash bench/gpu/guard_decay_gpu.sh
# Two in-process engines of the EAGLE-3 miniature, the guard at its defaults (recipe selected), 32 requests in
# flight: each serves 100,000 healthy drafts (the false-trip count: trips before the collapse), then its drafter
# breaks mid-serving (`chain`: position 0 kept, 1.. broken; `lm_head`: every position) and 1,500 more drafts are
# served. Bounded by GUARD_DECAY_S (default 200 s); rows are written as they finish. Two files come back:
# $OUT/guard_decay-h100.json and $OUT/guard_decay_gpu.log (trimmed).
# Dry run here first: python bench/guard_decay.py --cpu; and this script on CPU with
#   GUARD_DECAY_ARGS="--before 1200 --after 600" OUT=/tmp/x PATH=$PWD/.venv/bin:$PATH bash bench/gpu/guard_decay_gpu.sh
set -u
cd "$(dirname "$0")/../.."
export OUT=${OUT:-/tmp/surgery-out} PYTHONUNBUFFERED=1
mkdir -p "$OUT"
if ! python3 -c "import vllm" 2>/dev/null; then
  [ -f /tmp/vbundle/env.sh ] && [ -d /tmp/site/vllm ] || {
    echo "guard_decay_gpu: no vLLM here and the 0.34 bundle is not installed (/tmp/vbundle/env.sh, /tmp/site/vllm)"; exit 3; }
  . /tmp/vbundle/env.sh
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
start=$(date +%s)
tmp=$(mktemp -d)
OUT=$tmp timeout -k 10 "${GUARD_DECAY_S:-200}" python3 bench/guard_decay.py --only eagle3:chain,eagle3:lm_head \
  ${GUARD_DECAY_ARGS:---before 100000 --after 1500} --label h100 > "$tmp/run.log" 2>&1
echo "guard_decay rc=$? $(( $(date +%s) - start )) s"
cp "$tmp/guard_decay-h100.json" "$OUT/" 2>/dev/null
grep -v " INFO \| DEBUG \|^$\|base.py:380" "$tmp/run.log" | tail -60 > "$OUT/guard_decay_gpu.log"
grep "ROW\|rc=" "$tmp/run.log" "$OUT/guard_decay_gpu.log" | tail -4
