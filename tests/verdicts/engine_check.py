"""Put the corpus cases that carry `engine_check:` to vLLM's own config layer, and print what it says.

Not a test (minutes of CPU, and the engine-start oracle of issue 42 is its own test): run it by hand after
changing a case, and compare with the case's `engine_check` text.

    PYTHONPATH=. VLLM_ENABLE_V1_MULTIPROCESSING=0 .venv/bin/python tests/verdicts/engine_check.py [ID ...]

Each pair is written as two folders holding the config (keys starting with `_` removed: they are our
annotations) and given to `EngineArgs(..., load_format="dummy").create_engine_config()`, which runs vLLM's
ModelConfig / SpeculativeConfig / CacheConfig / ParallelConfig checks without weights or a device.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
# surgery recipe -> vLLM speculative method (surgery/data/vllm_methods.yaml has the full table)
METHOD = {"eagle3": "eagle3", "eagle": "eagle", "draft-model": "draft_model", "dflash": "dflash", "dspark": "dspark",
          "peagle": "eagle3", "mtp": "mtp", "deepseek-mtp": "mtp", "mimo-v2-mtp": "mtp", "gemma4-mtp": "mtp"}
FLAGS = {"--tp": "tensor_parallel_size", "--pp": "pipeline_parallel_size", "--max-model-len": "max_model_len",
         "--kv-cache-dtype": "kv_cache_dtype"}


def _folder(path: str, into: Path) -> str:
    p = ROOT / path
    cfg = json.loads((p / "config.json" if p.is_dir() else p).read_text(encoding="utf-8"))

    def strip(o):
        return {k: strip(v) for k, v in o.items() if not k.startswith("_")} if isinstance(o, dict) else o

    into.mkdir()
    (into / "config.json").write_text(json.dumps(strip(cfg)), encoding="utf-8")
    return str(into)


def engine_answer(case: dict) -> str:
    from vllm.engine.arg_utils import EngineArgs

    kwargs = {}
    args = [str(a) for a in case.get("args", [])]
    for flag, value in zip(args[::2], args[1::2]):
        kwargs[FLAGS[flag]] = value if flag == "--kv-cache-dtype" else int(value)
    with tempfile.TemporaryDirectory() as td:
        target = _folder(case["target"], Path(td) / "target")
        spec = {"method": METHOD[case["recipe"]], "num_speculative_tokens": 2}
        if case["draft"] != case["target"]:
            spec["model"] = _folder(case["draft"], Path(td) / "draft")
        if case["recipe"] == "peagle":
            spec["parallel_drafting"] = True
        try:
            EngineArgs(model=target, skip_tokenizer_init=True, load_format="dummy", enforce_eager=True,
                       speculative_config=spec, **kwargs).create_engine_config()
        except Exception as e:  # noqa: BLE001 - any refusal is the answer
            msg = " | ".join(line for line in str(e).splitlines() if line.strip())
            return f"refuses: {type(e).__name__}: {msg[:300]}"
    return "accepts"


def main(ids: list[str]) -> None:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    logging.disable(logging.WARNING)
    cases = yaml.safe_load((HERE / "cases.yaml").read_text(encoding="utf-8"))
    for case in cases:
        if "engine_check" in case and (not ids or case["id"] in ids):
            print(f"{case['id']}: {engine_answer(case)}\n    recorded: {case['engine_check']}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
