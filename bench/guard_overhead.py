"""What the acceptance guard adds to one vLLM scheduler step (surgery/vllm/guard.py), on CPU, no engine.

    python bench/guard_overhead.py                  # batch 1, 8, 64; k=3; no bands and bands [1, 4, 8]

A stand-in scheduler with vLLM 0.32's two method signatures (update_from_output calls
make_spec_decoding_stats once per request, as vllm/v1/core/sched/scheduler.py does) is wrapped with the
guard's wrappers and timed against the unwrapped one; the difference is the guard's cost per step
(per-draft counting, the evaluation every check_every drafts, and the trips' lines when a rule holds:
the stream is healthy, so none). The engine's own step (the forward passes) is not in it: on a GPU a
decode step takes milliseconds. Writes bench/results/guard_overhead.json (median of --repeat runs).
Not a serving-throughput benchmark (issue 46 asks for one with a real server; not built yet).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from surgery.vllm import guard as vguard  # noqa: E402

HEALTHY = [(3, 3)] * 9 + [(3, 2)] * 3 + [(3, 1)] * 4 + [(3, 0)] * 4  # acceptance 0.8 / 0.6 / 0.45 per position


class StandIn:
    def __init__(self, vllm_config):
        self.vllm_config = vllm_config

    def make_spec_decoding_stats(self, spec_decoding_stats, num_draft_tokens, num_accepted_tokens,
                                 num_invalid_spec_tokens, request_id):
        return None

    def update_from_output(self, scheduler_output, outputs):
        for rid, (drafted, accepted) in outputs.items():
            self.make_spec_decoding_stats(None, num_draft_tokens=drafted, num_accepted_tokens=accepted,
                                          num_invalid_spec_tokens=None, request_id=rid)
        return {}


class Wrapped(StandIn):
    pass


for _name, _factory in vguard.WRAPPERS.items():
    setattr(Wrapped, _name, _factory(StandIn.__dict__[_name]))


def config(bands):
    return SimpleNamespace(additional_config={"surgery": {"recipe": "eagle3", "guard": {"bands": bands}}},
                           speculative_config=SimpleNamespace(num_speculative_tokens=3, method="eagle3",
                                                              parallel_drafting=False))


def per_step(cls, bands, batch, steps) -> float:
    sched = cls(config(bands))
    drafts = 0
    t = time.perf_counter()
    for _ in range(steps):
        outs = {f"r{i}": HEALTHY[(drafts + i) % len(HEALTHY)] for i in range(batch)}
        drafts += batch
        sched.update_from_output(SimpleNamespace(num_scheduled_tokens=outs), outs)
    return (time.perf_counter() - t) / steps


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    rows = []
    for bands in ([], [1, 4, 8]):
        for batch in (1, 8, 64):
            base = statistics.median(per_step(StandIn, bands, batch, args.steps) for _ in range(args.repeat))
            wrapped = statistics.median(per_step(Wrapped, bands, batch, args.steps) for _ in range(args.repeat))
            rows.append({"bands": bands, "batch": batch, "guard_us_per_step": round((wrapped - base) * 1e6, 1),
                         "guard_us_per_draft": round((wrapped - base) * 1e6 / batch, 2)})
            print(json.dumps(rows[-1]))
    out = ROOT / "bench" / "results" / "guard_overhead.json"
    out.write_text(json.dumps({"steps": args.steps, "repeat": args.repeat, "rows": rows}, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
