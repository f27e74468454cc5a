"""The probe's ranking (surgery/probe/stats.py): decided only beyond the noise of the prompts, never
a winner on a tie, the early-stop bound exact."""
from __future__ import annotations

from surgery.probe.stats import Measured, PromptResult, cannot_win, compare, may_stop, rank, sign_p


def measured(rates, drafted=30, stopped=False):
    return Measured(prompts=[PromptResult(drafted=drafted, accepted=round(r * drafted), rounds=drafted // 3)
                             for r in rates], stopped_early=stopped)


def test_clear_winner_is_decided():
    good = measured([0.8, 0.7, 0.9, 0.75, 0.8, 0.85])
    bad = measured([0.3, 0.4, 0.2, 0.35, 0.3, 0.25])
    r = rank({"good": good, "bad": bad})
    assert r["decided"] and r["best"] == "good"
    c = r["comparisons"]["bad"]
    assert c["prompts_agreeing"] == 6 and c["interval"][0] > 0 and c["sign_p"] < 0.05


def test_margin_inside_the_noise_is_undecided():
    a = measured([0.8, 0.3, 0.9, 0.2, 0.7, 0.4])
    b = measured([0.5, 0.6, 0.4, 0.5, 0.6, 0.5])
    r = rank({"a": a, "b": b})
    assert not r["decided"] and r["best"] is None and "inside the noise" in r["why"]


def test_identical_candidates_are_undecided():
    """Two answers that decode alike (a RoPE change that shows only past the prompts) decide nothing."""
    r = rank({"a": measured([0.7] * 8), "b": measured([0.7] * 8)})
    assert not r["decided"] and r["comparisons"]["b"]["margin"] == 0


def test_few_prompts_cannot_decide():
    """Four prompts all agreeing: sign p = 1/16 > 0.05, so not decided however large the margin."""
    r = rank({"a": measured([0.9] * 4), "b": measured([0.1] * 4)})
    assert not r["decided"]
    assert sign_p([1, 1, 1, 1]) == 1 / 16 and sign_p([1] * 5) == 1 / 32


def test_every_other_candidate_must_be_separated():
    best = measured([0.8, 0.82, 0.79, 0.81, 0.8, 0.83])
    close = measured([0.79, 0.83, 0.8, 0.8, 0.81, 0.82])
    far = measured([0.1] * 6)
    r = rank({"best": best, "close": close, "far": far})
    assert r["comparisons"]["far"]["separated"] and not r["decided"]


def test_early_stop_bound_is_exact():
    m = measured([0.1, 0.1, 0.1])
    assert cannot_win(m, n_prompts=8, leader_mean=0.8)  # (0.3 + 5) / 8 = 0.6625 < 0.8
    assert not cannot_win(m, n_prompts=8, leader_mean=0.6)


def test_early_stop_waits_until_the_prompts_run_decide():
    """A clear loser after two prompts cannot win, but two prompts cannot pass the sign test (p = 0.25):
    it runs on until they can (five agreeing prompts: p = 1/32)."""
    leader = measured([0.8] * 8)
    for done in range(1, 9):
        m = measured([0.07] * done)
        assert cannot_win(m, 8, leader.mean) == (done >= 2)
        assert may_stop(m, 8, leader) == (done >= 5)


def test_stopped_candidate_is_compared_on_the_prompts_it_ran():
    full = measured([0.8] * 8)
    stopped = measured([0.1] * 6, stopped=True)
    c = compare(full, stopped)
    assert c["prompts"] == 6 and c["separated"]
    assert rank({"stopped": stopped, "full": full})["best"] == "full"


def test_totals_per_position_and_mean_length():
    m = Measured(prompts=[PromptResult(drafted=9, accepted=6, rounds=3, per_position=[3, 2, 1]),
                          PromptResult(drafted=6, accepted=2, rounds=2, per_position=[2, 0, 0])])
    t = m.totals()
    assert t["per_position"] == [1.0, 0.4, 0.2] and t["mean_length"] == 1 + 8 / 5
    assert t["acceptance"] == 8 / 15
