"""The acceptance guard on every family HF runs (CPU): healthy pairs must trip nothing, each ablation row
the rules should catch must trip; the built-in pairs' measured HF acceptance for `expect.hf`.

    python bench/guard_hf.py                       # gemma4-mtp and draft-model, writes bench/results/guard_hf.json
    python bench/guard_hf.py --write-expect        # also writes expect.hf of both pairs in surgery/data/pairs/index.yaml

HF runs two families: gemma4-mtp (the tiny Gemma 4 pair, our MTP loop, surgery/hf/generate.py) and
draft-model (the built-in Llama pair, transformers' assisted generation). Each is decoded on its pair's 8
held-out prompts, 48 tokens, k = 3, exactly as `surgery apply RECIPE --engine hf --ablate` does (the
ablation rows are surgery/commands/hf_ablation.py's: each recipe step removed, the wrong KV map, the
field rows of surgery/data/pairs/ablations_hf.yaml).

False positives are counted two ways on the healthy rows: the whole run (what the CLI judges: support
bound 30 drafts) and each prompt on its own with the support bound lowered to 10 (rows x prompts;
the per-prompt verdicts are a stress test, not what the CLI does), once as judged (the expectation needs
100 drafts: not judged there) and once with the expectation forced at 10 drafts (why that bound exists).
The healthy rows are judged with the expectation this script measures, the ablation rows likewise.
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from surgery.guard.run import judge  # noqa: E402
from surgery.pairs import INDEX, builtin_pair  # noqa: E402

FAMILIES = ("gemma4-mtp", "draft-model")
MAX_NEW, K = 48, 3
PER_PROMPT_MIN = 10
BY = "python bench/guard_hf.py --write-expect"


def _load(recipe: str):
    """(target, draft, prompts, check, plan, report) wired as `surgery apply RECIPE --engine hf` wires them."""
    import torch

    from surgery import applier
    from surgery.tinymodels.bytevocab import encode
    from surgery.facts import read_facts
    from surgery.hf.loader import load_pair
    from surgery.hf.specdec import decode_check
    from surgery.hf.standalone import assisted_check, load_standalone_pair
    from surgery.plan import Runtime
    from surgery.recipe import load_recipe
    from surgery.resolver import resolve
    from surgery.tinymodels.tinypair import ensure_tiny_pair

    torch.set_num_threads(1)
    pair = builtin_pair(recipe)
    if recipe == "gemma4-mtp":
        t_dir, d_dir = ensure_tiny_pair()
        target, draft = load_pair(t_dir, d_dir, device="cpu", dtype=torch.float32)
        check = decode_check
    else:
        t_dir, d_dir = pair.target, pair.draft
        target, draft = load_standalone_pair(t_dir, d_dir)
        check = assisted_check
    plan = resolve(load_recipe(recipe), read_facts(d_dir), read_facts(t_dir), Runtime(engine="hf"))
    report = applier.apply_plan(plan, draft, target, strict=True)
    assert applier.verify_plan(plan, draft, target, report=report).ok
    return target, draft, [encode(p) for p in pair.prompts], check, plan, report, pair


def expectation(d: dict, release: str, prompts: int) -> dict:
    counts = judge([tuple(x) for p in d["per_draft"] for x in p], {"min_drafts": 1}, K)
    return {"per_position": [round(x, 3) for x in counts["per_position"]], "mean_length": round(counts["mean_length"], 2),
            "source": {"kind": "measured", "engine": "hf", "release": release, "card": "CPU",
                       "prompts": f"builtin ({prompts} held-out, {MAX_NEW} tokens, k={K})",
                       "date": datetime.date.today().isoformat(), "by": BY}}


def family(recipe: str, progress) -> dict:
    import transformers

    from surgery.commands.hf_ablation import ablation
    from surgery.options import ApplyOptions

    target, draft, prompts, check, plan, report, pair = _load(recipe)
    progress(f"{recipe}: healthy")
    d = check(target, draft, prompts, MAX_NEW, K)
    expect = expectation(d, transformers.__version__, len(prompts))
    guard = {"expect": expect}
    whole = judge([tuple(x) for p in d["per_draft"] for x in p], guard, K, pair.method)
    per_prompt = [judge([tuple(x) for x in p], {**guard, "min_drafts": PER_PROMPT_MIN}, K, pair.method)
                  for p in d["per_draft"]]
    forced = [judge([tuple(x) for x in p], {**guard, "min_drafts": PER_PROMPT_MIN, "expect_min_drafts": PER_PROMPT_MIN},
                    K, pair.method) for p in d["per_draft"]]
    keys = ("status", "drafts", "codes", "per_position")
    healthy = {"acceptance_rate": d["acceptance_rate"], "identical": d["identical"], "whole": whole,
               "per_prompt": [{k: v[k] for k in keys} for v in per_prompt],
               "per_prompt_expectation_forced": [{k: v[k] for k in keys} for v in forced]}
    options = ApplyOptions(recipe=recipe, max_new_tokens=MAX_NEW, num_draft_tokens=K, prompts=len(prompts))
    rows = ablation(plan, draft, target, report, prompts, options, progress, check,
                    guard=lambda r: judge([tuple(x) for p in r["per_draft"] for x in p], guard, K, pair.method))
    return {"expect": expect, "healthy": healthy,
            "ablations": [{k: r.get(k) for k in ("variant", "runs", "acceptance_rate", "guard", "note", "error")
                           if r.get(k) is not None} for r in rows]}


def write_expect(results: dict, index: Path = INDEX) -> None:
    """Replace / add `expect: {hf: ...}` as the last key of each measured pair's entry (a line edit: the
    index's other lines, written by the builders, stay as they are). An `expect:` block with other
    engines keeps them."""
    import yaml

    lines = index.read_text(encoding="utf-8").splitlines()
    for recipe, res in results.items():
        start = lines.index(f"  {recipe}:")
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("  ") and not lines[i].startswith("    ")
                    and lines[i].strip()), len(lines))
        entry = yaml.safe_load("\n".join(lines[start:end]))[recipe]
        expect = dict(entry.get("expect") or {})
        expect["hf"] = res["expect"]
        block = yaml.safe_dump({"expect": expect}, sort_keys=False, default_flow_style=None, width=200).splitlines()
        body = lines[start + 1:end]
        # drop the old expect block (its key line and the deeper lines under it)
        kept, skip = [], False
        for ln in body:
            if ln.startswith("    expect:"):
                skip = True
                continue
            if skip and ln.startswith("      "):
                continue
            skip = False
            kept.append(ln)
        lines[start + 1:end] = kept + ["    " + b for b in block]
    index.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipes", nargs="*", default=list(FAMILIES))
    ap.add_argument("--write-expect", action="store_true", help="write expect.hf into surgery/data/pairs/index.yaml")
    ap.add_argument("--cpu", action="store_true", help="accepted for symmetry with bench/gpu/ (this bench is CPU-only)")
    args = ap.parse_args(argv)

    def progress(msg):
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    results = {}
    for recipe in args.recipes:
        t = time.perf_counter()
        results[recipe] = family(recipe, progress)
        results[recipe]["wall_s"] = round(time.perf_counter() - t, 1)
        h = results[recipe]["healthy"]
        print(f"{recipe}: healthy {h['acceptance_rate']:.1%} whole run {h['whole']['status']} "
              f"{h['whole']['codes']}; per prompt {[v['status'] for v in h['per_prompt']]}")
        for row in results[recipe]["ablations"]:
            g = row.get("guard") or {}
            print(f"  {row['variant'][:55]:<55} {row.get('acceptance_rate', float('nan')):6.1%} "
                  f"{g.get('status', 'did not run')} {g.get('codes', '')}")
    fp_whole = sum(r["healthy"]["whole"]["status"] == "tripped" for r in results.values())
    fp_prompt = sum(v["status"] == "tripped" for r in results.values() for v in r["healthy"]["per_prompt"])
    judged_prompt = sum(v["status"] != "not judged" for r in results.values() for v in r["healthy"]["per_prompt"])
    fp_forced = sum(v["status"] == "tripped" for r in results.values()
                    for v in r["healthy"]["per_prompt_expectation_forced"])
    summary = {"max_new_tokens": MAX_NEW, "k": K, "per_prompt_min_drafts": PER_PROMPT_MIN,
               "false_positives": {"whole_runs": fp_whole, "of_whole_runs": len(results),
                                   "prompts": fp_prompt, "of_prompts_judged": judged_prompt,
                                   "prompts_expectation_forced": fp_forced},
               "results": results}
    out = ROOT / "bench" / "results" / "guard_hf.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"false positives: {fp_whole} of {len(results)} whole healthy runs, {fp_prompt} of {judged_prompt} "
          f"healthy prompts judged ({fp_forced} with the expectation judged under its bound); wrote {out.relative_to(ROOT)}")
    if args.write_expect:
        write_expect(results)
        print(f"wrote expect.hf of {', '.join(results)} into {INDEX.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
