"""One vLLM engine start (MTP speculation on the tiny pair), with or without the plugin + recipe.
Run in a fresh process per measurement, interleaved (see docs/gpu.md for the loop):

    python3 bench/gpu/vllm_start.py plugin|plain
"""
from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
from common import OUT, ROOT, tiny_pair_dirs  # noqa: E402


def main(mode: str) -> None:
    from pathlib import Path

    t_import = time.perf_counter()
    from vllm import LLM

    if mode == "plugin":
        os.environ["SURGERY_RECIPE"] = str(ROOT / "recipes" / "gemma4-mtp.yaml")
        from surgery.vllm import plugin

        plugin.register()
    import_s = time.perf_counter() - t_import
    target, draft = tiny_pair_dirs(Path("/tmp/tiny_vllm_start"))
    t = time.perf_counter()
    llm = LLM(model=str(target), skip_tokenizer_init=True, enforce_eager=True, dtype="bfloat16", max_model_len=512,
              max_num_seqs=8, gpu_memory_utilization=0.25, seed=0, enable_prefix_caching=False,
              speculative_config={"method": "mtp", "model": str(draft), "num_speculative_tokens": 3})
    start_s = time.perf_counter() - t
    row = {"mode": mode, "import_s": round(import_s, 3), "engine_start_s": round(start_s, 3)}
    with open(OUT / "vllm_start.jsonl", "a") as fh:
        fh.write(json.dumps(row) + "\n")
    print(row, flush=True)
    del llm


if __name__ == "__main__":
    main(sys.argv[1])
