"""Apply overhead and memory of the wired pair, measured against model load in the same run.

    python bench/apply_overhead.py                       # built-in tiny pair, CPU
    python bench/apply_overhead.py --target T --draft D --device cuda --dtype bfloat16

Reports (median of --repeat runs): load time (from_pretrained of both models), resolve, apply,
verify, and (resolve + apply + verify) / load. Memory: unique bytes of parameters and buffers of
the wired pair (storage shared between the models counted once) against the two models counted
separately, and what a copying applier would add (a private copy of every shared module).
Writes bench/results/apply_overhead[-<label>].json.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def unique_bytes(*models) -> int:
    seen, total = set(), 0
    for m in models:
        for t in list(m.parameters()) + list(m.buffers()):
            key = (t.untyped_storage().data_ptr(), t.device.type)
            if key in seen:
                continue
            seen.add(key)
            total += t.untyped_storage().nbytes()
    return total


def shared_module_bytes(plan, draft, target) -> int:
    from surgery.live.paths import get_path, role_path

    total = 0
    for op in plan.ops("share_module"):
        mod = get_path(target, role_path("hf", target, op.role, "target"))
        total += sum(p.numel() * p.element_size() for p in mod.parameters())
    return total


def main(argv=None) -> int:
    import torch

    from surgery import Runtime, load_recipe, read_facts, resolve
    from surgery.applier import apply_plan, rollback, verify_plan
    from surgery.hf.loader import load_pair
    from surgery.tinymodels.tinypair import ensure_tiny_pair

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipe", default=str(ROOT / "recipes" / "gemma4-mtp.yaml"))
    ap.add_argument("--target")
    ap.add_argument("--draft")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--label", default="")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    if args.target:
        target_dir, draft_dir = Path(args.target), Path(args.draft)
    else:
        target_dir, draft_dir = ensure_tiny_pair()

    rows = {k: [] for k in ("load_s", "resolve_s", "apply_s", "verify_s")}
    mem = None
    for _ in range(args.repeat):
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        t = time.perf_counter()
        target, draft = load_pair(target_dir, draft_dir, device=args.device, dtype=dtype)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        rows["load_s"].append(time.perf_counter() - t)
        t = time.perf_counter()
        plan = resolve(load_recipe(args.recipe), read_facts(draft_dir), read_facts(target_dir), Runtime(engine="hf"))
        rows["resolve_s"].append(time.perf_counter() - t)
        separate = unique_bytes(target) + unique_bytes(draft)
        t = time.perf_counter()
        report = apply_plan(plan, draft, target)
        rows["apply_s"].append(time.perf_counter() - t)
        t = time.perf_counter()
        ok = verify_plan(plan, draft, target, report=report).ok
        rows["verify_s"].append(time.perf_counter() - t)
        assert ok, "verification failed"
        wired = unique_bytes(target, draft)
        mem = {"separate_bytes": separate, "wired_bytes": wired, "copying_applier_extra_bytes": shared_module_bytes(plan, draft, target)}
        rollback(report)
        del target, draft
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    med = {k: statistics.median(v) for k, v in rows.items()}
    overhead = med["resolve_s"] + med["apply_s"] + med["verify_s"]
    result = {"date": time.strftime("%Y-%m-%d"), "device": args.device, "dtype": args.dtype, "repeat": args.repeat,
              "target": str(target_dir), "draft": str(draft_dir), "median_s": med,
              "overhead_s": overhead, "overhead_fraction_of_load": overhead / med["load_s"], "memory": mem,
              "torch": torch.__version__}
    import transformers

    result["transformers"] = transformers.__version__
    out = Path(args.out) if args.out else ROOT / "bench" / "results" / f"apply_overhead{'-' + args.label if args.label else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"| load (both models) | resolve | apply | verify | overhead / load |")
    print(f"|---:|---:|---:|---:|---:|")
    print(f"| {med['load_s'] * 1000:.1f} ms | {med['resolve_s'] * 1000:.2f} ms | {med['apply_s'] * 1000:.2f} ms | "
          f"{med['verify_s'] * 1000:.2f} ms | {result['overhead_fraction_of_load']:.2%} |")
    print(f"memory: separate {mem['separate_bytes'] / 2**20:.2f} MiB, wired {mem['wired_bytes'] / 2**20:.2f} MiB "
          f"(ratio {mem['wired_bytes'] / mem['separate_bytes']:.3f}); a copying applier would add "
          f"{mem['copying_applier_extra_bytes'] / 2**20:.2f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
