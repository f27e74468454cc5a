"""Run inside the SGLang venv (scripts/sglang_venv.sh): SGLang's IMPORTED wiring functions beside
surgery's rules (surgery/sglang/rules.py) on the oracle inputs; prints one JSON line, exit 1 on a
mismatch. The CI oracle (tests/sglang_engine/test_oracle.py) runs the same functions cut from the
wheel's source; this is the cross-check that the cut code is what the package runs.

    PYTHONPATH=.:tools/sglang_cpu_stubs SGLANG_USE_CPU_ENGINE=1 /tmp/sgl/bin/python tools/sglang_imported_oracle.py
"""
from __future__ import annotations

import json
import sys
import types

IDS = [None, [0, 7, 8], [1, 3, 4], [2, 4, 5], [1, 15, 28], [3]]


def capture_cases(cases, mismatches):
    from sglang.srt.models.deepseek_v2 import DeepseekV2ForCausalLM
    from sglang.srt.models.llama import LlamaForCausalLM

    from surgery.sglang import rules

    for cls, model_type in ((LlamaForCausalLM, "llama"), (DeepseekV2ForCausalLM, "deepseek_v3")):
        for n in (8, 32):
            for ids in IDS:
                t = types.SimpleNamespace(pp_group=types.SimpleNamespace(is_last_rank=True),
                                          config=types.SimpleNamespace(num_hidden_layers=n),
                                          model=types.SimpleNamespace(layers_to_capture=[]))
                cls.set_eagle3_layers_to_capture(t, None if ids is None else list(ids))
                cases.append(1)
                if t.model.layers_to_capture != rules.layers_to_capture(model_type, n, ids):
                    mismatches.append(f"{cls.__name__} L={n} ids={ids}: {t.model.layers_to_capture}")


def head_cases(cases, mismatches):
    from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
    from sglang.srt.speculative.standalone_worker_v2 import StandaloneDraftWorker

    from surgery.sglang import rules

    for cls, algorithms in ((EagleDraftWorker, ("EAGLE3", "EAGLE", "NEXTN")), (StandaloneDraftWorker, ("STANDALONE",))):
        for algorithm in algorithms:
            for flag in (False, True):
                calls = []
                draft = types.SimpleNamespace(load_lm_head_from_target=flag, hot_token_id=None,
                                              set_embed_and_head=lambda e, h: calls.append("set_embed_and_head"),
                                              set_embed=lambda e: calls.append("set_embed"))
                w = types.SimpleNamespace(
                    _resolve_shared_embed_and_head=lambda: ("embed", "head"), hot_token_id=None,
                    target_worker=types.SimpleNamespace(model_runner=types.SimpleNamespace(
                        model=types.SimpleNamespace(lm_head=None))),
                    draft_runner=types.SimpleNamespace(model=draft),
                    speculative_algorithm=types.SimpleNamespace(is_eagle3=lambda a=algorithm: a == "EAGLE3"))
                cls.init_lm_head(w)
                expected = rules.head_calls(algorithm, flag)
                cases.append(1)
                if calls != ([] if expected == "none" else [expected]):
                    mismatches.append(f"{cls.__name__}.init_lm_head {algorithm} load_from_target={flag}: {calls}")


def main() -> int:
    import sglang

    cases, mismatches = [], []
    capture_cases(cases, mismatches)
    head_cases(cases, mismatches)
    print(json.dumps({"sglang": sglang.__version__, "cases": len(cases), "mismatches": mismatches}))
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
