#!/usr/bin/env bash
# patch_site.sh SITE: the source edits make_bundle.sh makes to the unpacked sglang (SITE/sglang) because
# the bundle does not carry nvidia-cutlass-dsl (`cutlass`; 4.8.0's cu13 libs alone are a 91.9 MB wheel,
# 237 MB unpacked, 62.4 MB as xz: more than a whole part). Each edit is checked with grep: the build stops when a release's source no longer
# matches, rather than shipping an engine that dies at start-up. STRIPPED.md lists them and says why.
#
# 1. sglang/srt/layers/dual_gemm.py (0.5.23): `DualGemm._select_mode`, run by every LlamaMLP /
#    Qwen2MLP constructor on CUDA, imports `sglang.kernels.ops.gemm.cutedsl_dual_gemm`, whose module
#    level is `import cutlass` (the H100 run of 2026-12-06: "No module named 'cutlass'" in the
#    target-only engine). The kernel is Blackwell-only: `can_use_dual_gemm` returns False unless
#    `is_sm100_supported()`, so on sm_90 the mode is None either way. The edit returns None (the
#    unfused gate_up -> act -> down path) before that import when `cutlass` is not importable.
set -euo pipefail
SITE=${1:?usage: patch_site.sh SITE}
f="$SITE/sglang/srt/layers/dual_gemm.py"
if [ -f "$f" ] && grep -q "cutedsl_dual_gemm import" "$f"; then
  sed -i 's/^        if not is_cuda():$/        if not is_cuda() or __import__("importlib.util").util.find_spec("cutlass") is None:  # bundle: no nvidia-cutlass-dsl/' "$f"
  [ "$(grep -c 'find_spec("cutlass") is None' "$f")" = 1 ] \
    || { echo "patch_site.sh: $f: the cutlass fallback did not apply (DualGemm._select_mode changed?)" >&2; exit 1; }
  echo "patch_site.sh: patched $f (DualGemm._select_mode: None without cutlass)"
fi
