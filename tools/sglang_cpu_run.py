"""Start SGLang's offline Engine on this CPU, as docs/sglang.md did: the plain target, or with a
speculative algorithm and a draft. Run inside the SGLang venv (scripts/sglang_venv.sh):

    PYTHONPATH=tools/sglang_cpu_stubs SGLANG_USE_CPU_ENGINE=1 timeout 240 /tmp/sgl/bin/python \\
        tools/sglang_cpu_run.py none PAIR_DIR            # plain: greedy ids printed as RESULT ...
    ... tools/sglang_cpu_run.py EAGLE3 PAIR_DIR 1        # speculative (steps 1): fails at start

PAIR_DIR is a `surgery pair export NAME DIR` folder (DIR/target, DIR/draft). When the scheduler dies
at start, SGLang's Engine() waits: the `timeout` ends it.
"""
from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> int:
    import sglang as sgl

    algorithm, pair = argv[0], argv[1]
    steps = int(argv[2]) if len(argv) > 2 else 1
    kw = dict(model_path=f"{pair}/target", device="cpu", attention_backend="torch_native", disable_cuda_graph=True,
              mem_fraction_static=0.3, max_total_tokens=2048, log_level="info", skip_tokenizer_init=True,
              dtype="float32", tp_size=1, random_seed=0)
    if algorithm != "none":
        kw.update(speculative_algorithm=algorithm, speculative_draft_model_path=f"{pair}/draft",
                  speculative_num_steps=steps, speculative_eagle_topk=1, speculative_num_draft_tokens=steps + 1)
    engine = sgl.Engine(**kw)
    out = engine.generate(input_ids=[[2, 40, 41, 42, 43]], sampling_params={"temperature": 0, "max_new_tokens": 8})
    print("RESULT", json.dumps([o["output_ids"] for o in out]))
    engine.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
