"""`surgery validate --engine-check` at real size (issue 65): the 8B pair (Llama-3.1-8B-Instruct + EAGLE-3)
and the 70B pair (Llama-3.1-70B-Instruct + an EAGLE-3 head of its width) constructed on the meta device by a
vLLM release, at tp 1 and tp 8; one runner process per row, so each row's time and peak resident set are
its own (the child's rusage, through the driver). Figures: docs/engine_check.md.

    nice python bench/engine_check_size.py --python .cache/oracles/vllm-0.34.0/bin/python
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
from pathlib import Path

from surgery.engine.ask import ask_run

ROOT = Path(__file__).resolve().parents[1]
PAIRS = {
    "8B": (ROOT / "tests/data/configs/Llama-3.1-8B-Instruct.json", ROOT / "tests/data/configs/EAGLE3-LLaMA3.1-Instruct-8B.json"),
    "70B": (ROOT / "tests/data/engine_check/Llama-3.1-70B-Instruct.json",
            ROOT / "tests/data/engine_check/EAGLE3-LLaMA3.3-Instruct-70B.json"),
}


def published(src: Path, folder: Path) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    cfg = {k: v for k, v in json.loads(src.read_text(encoding="utf-8")).items() if not k.startswith("_")}
    (folder / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return str(folder)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", required=True, help="the interpreter of a vLLM environment")
    ap.add_argument("--tp", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--full-shapes", action="store_true", help="also the tp 1 whole-tensor build (--weights)")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="engine-check-size-"))
    print("pair tp | version | verdict | target params | draft params | runner wall s (the case's own) | runner CPU s "
          "| peak RSS MiB")
    for name, (target, draft) in PAIRS.items():
        for tp in args.tp:
            case = {"id": f"{name} tp={tp}", "target": published(target, root / name / "t"),
                    "draft": published(draft, root / name / "d"), "method": "eagle3", "tp": tp, "pp": 1,
                    "full_shapes": args.full_shapes}
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            run = ask_run("vllm", args.python, [case], timeout_s=600, max_rss_mb=16384)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the reaped runner's CPU (and its probe's)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            if run.failure:
                print(f"{name} tp={tp}: {run.failure}: {run.detail[-400:]}")
                continue
            v = run.verdicts[0]
            shapes = v.get("shapes") or {}
            print(f"{name} tp={tp} | {run.version} | {v.get('stage') or 'constructs'} "
                  f"{(v.get('message') or '')[:80]} | {len(shapes.get('target') or {})} | {len(shapes.get('draft') or {})} "
                  f"| {run.seconds} ({v.get('seconds')}) | {cpu:.1f} | {run.peak_rss_kb // 1024}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
