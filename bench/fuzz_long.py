"""The long fuzzing campaign of issue 6, time-boxed: runs every target of tests/test_fuzz.py in
rounds (fresh random seeds, no example database) until the time is up or a count is reached, and
writes what it tried and what failed.

    python bench/fuzz_long.py --minutes 12 --out bench/results/fuzz_long.json
    python bench/fuzz_long.py --examples 100000          # stop after 100k inputs in all

A failure is any exception other than SurgeryError / ExprError or a loader peak above the memory
limit; hypothesis shrinks it and the falsifying example is kept (truncated) in the output. Each call
is timed here (CPU seconds of this process; the default suite counts function calls instead, issue
48), and a target whose slowest input took longer than the time limit (--time-limit, else
SURGERY_FUZZ_TIME_LIMIT, default 1 s; 0: report only) is a failure too, with that input. Counts also
land in docs/reliability.md (by hand: the table there quotes a run of this script).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import os  # noqa: E402

import test_fuzz as fz  # noqa: E402
from hypothesis import Phase  # noqa: E402

TIME_LIMIT_S = float(os.environ.get("SURGERY_FUZZ_TIME_LIMIT", "1.0"))


def over_time_limit(worst: dict, limit: float) -> list[dict]:
    """One failure per surface whose slowest input took more than `limit` CPU seconds (0: none)."""
    if limit <= 0:
        return []
    return [{"target": name, "round": None, "error": f"slowest input took {w['max_s']:.3f} s CPU (limit {limit} s): "
             f"{w.get('slowest_input', '')}"} for name, w in sorted(worst.items()) if w["max_s"] > limit]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=12.0)
    ap.add_argument("--examples", type=int, default=None, help="stop after this many inputs in all")
    ap.add_argument("--chunk", type=int, default=500, help="examples per target per round")
    ap.add_argument("--targets", default=",".join(fz.TARGETS))
    ap.add_argument("--shrink", action="store_true",
                    help="let hypothesis shrink failures (slow: one shrink can take minutes); default off")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "fuzz_long.json"))
    ap.add_argument("--time-limit", type=float, default=TIME_LIMIT_S,
                    help="CPU seconds one input may take (0: measure and report only)")
    args = ap.parse_args(argv)
    fz.COUNT_CALLS = False  # time each call (a bench figure) instead of counting its function calls

    targets = [t for t in args.targets.split(",") if t]
    # explicit: the regression examples of test_fuzz.REGRESSIONS run first in every round
    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if args.shrink else [])
    fz.parsed_recipes(), fz.config_dicts(), fz.catalogue()
    deadline = time.monotonic() + args.minutes * 60
    start = time.monotonic()
    failures: list[dict] = []
    rounds = 0
    while time.monotonic() < deadline and (args.examples is None or sum(fz.EXAMPLES.values()) < args.examples):
        rounds += 1
        for name in targets:
            if time.monotonic() >= deadline:
                break
            try:
                fz.run_target(name, args.chunk, database=None, phases=phases)
            except BaseException as exc:  # noqa: BLE001 - record, keep going
                if isinstance(exc, KeyboardInterrupt):
                    raise
                text = "".join(traceback.format_exception_only(type(exc), exc))
                failures.append({"target": name, "round": rounds, "error": text[-3000:]})
                print(f"FAIL {name} round {rounds}: {text[:400]}", flush=True)
        total = sum(fz.EXAMPLES.values())
        print(f"round {rounds}: {total} inputs, {len(failures)} failures, "
              f"{time.monotonic() - start:.0f}s", flush=True)

    failures += over_time_limit(fz.WORST, args.time_limit)
    elapsed = time.monotonic() - start
    result = {
        "seconds": round(elapsed, 1),
        "rounds": rounds,
        "inputs_total": sum(fz.EXAMPLES.values()),
        "inputs_per_target": dict(fz.EXAMPLES),
        "calls_per_surface": {k: sum(v.values()) for k, v in fz.STATS.items()},
        "outcomes_per_surface": {k: dict(v.most_common(12)) for k, v in fz.STATS.items()},
        "worst_per_surface": {k: {kk: round(vv, 4) if isinstance(vv, float) else vv for kk, vv in v.items()}
                              for k, v in fz.WORST.items()},
        "failures": failures,
        "time_limit_s": args.time_limit,
        "loader_mem_limit_mib": fz.LOADER_MEM_MIB,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("seconds", "inputs_total", "inputs_per_target", "worst_per_surface")},
                     indent=2))
    print(f"{len(failures)} failure(s); written to {args.out}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
