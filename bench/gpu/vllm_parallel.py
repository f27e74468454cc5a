"""Two GPUs (nvidia-h200-x2): the recipe under tensor and pipeline parallelism in real vLLM.
Ready to run; NOT run yet (no 2-GPU machine was lent when it was written; see docs/gpu.md).

    . /tmp/vbundle/env.sh && PYTHONPATH=$PWD:$PYTHONPATH python3 bench/gpu/vllm_parallel.py

Before running: `pip install --no-deps --no-build-isolation --user .` so that every worker process
(TP/PP use the multiprocessing executor) loads the plugin through the `vllm.general_plugins` entry
point; the recipe is selected with SURGERY_RECIPE, inherited by the workers. Runs:
  tp1        TP 1, recipe, FP8 cache with calibrated per-head target scales  (reference)
  tp2        TP 2, same: each rank's draft layers must read that rank's cache shard and hold that
             rank's shard of per-head scales; generation identical to tp1 (greedy)
  pp2        PP 2 with the recipe: engine start must fail with SRG311 (embedding share impossible,
             `otherwise: error`) / SRG316 (target layers 5/4 on stage 0, the draft on the last)
Wiring per rank is read with surgery.vllm.inspect.wiring(llm) (collective_rpc). Results in
$OUT/vllm_parallel.json.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from common import ROOT, guarded, save, tiny_pair_dirs

K = 3


def run(label, target, draft, prompts, **kw):
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from surgery.vllm.inspect import wiring

    t = time.perf_counter()
    llm = LLM(model=str(target), skip_tokenizer_init=True, enforce_eager=True, dtype="bfloat16", max_model_len=512,
              gpu_memory_utilization=0.25, seed=0, enable_prefix_caching=False, disable_log_stats=False,
              speculative_config={"method": "mtp", "model": str(draft), "num_speculative_tokens": K}, **kw)
    start = time.perf_counter() - t
    params = SamplingParams(temperature=0.0, max_tokens=64, ignore_eos=True, detokenize=False)
    t = time.perf_counter()
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    gen = time.perf_counter() - t
    tokens = [list(o.outputs[0].token_ids) for o in outs]
    return {"label": label, "engine_start_s": start, "generate_s": gen,
            "tokens_per_s": sum(map(len, tokens)) / gen, "tokens": tokens, "wiring": wiring(llm)}


def main():
    from surgery.tinymodels.bytevocab import encode
    from surgery.pairs import DEFAULT_PROMPTS

    os.environ["SURGERY_RECIPE"] = str(ROOT / "recipes" / "gemma4-mtp.yaml")
    target, draft = tiny_pair_dirs(Path("/tmp/tiny_vllm_par"))
    prompts = [encode(p) for p in DEFAULT_PROMPTS]
    results = {"date": time.strftime("%Y-%m-%d %H:%M")}
    for label, kw in (("tp1", {}), ("tp2", {"tensor_parallel_size": 2}),
                      ("tp1_plain", {"_plain": True}), ("tp2_plain", {"tensor_parallel_size": 2, "_plain": True})):
        if kw.pop("_plain", False):
            os.environ.pop("SURGERY_RECIPE", None)
        else:
            os.environ["SURGERY_RECIPE"] = str(ROOT / "recipes" / "gemma4-mtp.yaml")
        guarded(results, label, run, label, target, draft, prompts, **kw)
        save("vllm_parallel", results)
    os.environ["SURGERY_RECIPE"] = str(ROOT / "recipes" / "gemma4-mtp.yaml")
    guarded(results, "pp2", run, "pp2", target, draft, prompts, pipeline_parallel_size=2)
    pp = results["pp2"]
    results["pp2_refused_with_code"] = isinstance(pp, dict) and any(c in pp.get("error", "") for c in ("SRG311", "SRG316"))
    if "tokens" in results.get("tp2", {}) and "tokens" in results.get("tp1", {}):
        results["tp2_identical_to_tp1"] = results["tp2"]["tokens"] == results["tp1"]["tokens"]
    save("vllm_parallel", results)


if __name__ == "__main__":
    main()
