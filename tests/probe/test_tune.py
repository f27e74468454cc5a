"""`surgery probe --tune` (issue 66): the model (E(k), R(k), S(k)), the bootstrap's interval, the
recommendation, the engine flags and the block cap on synthetic runs; the CLI with a stand-in timer. Counts
and figures computed from given numbers only: no clock is read here (tests/probe/test_tune_vllm.py runs
the live engine)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from surgery.probe import tune
from surgery.probe.tune import Run

PAIRS = Path(__file__).resolve().parents[2] / "surgery" / "data" / "pairs"
P = [0.9, 0.8, 0.7, 0.5, 0.3, 0.1]  # unconditional per-position acceptance


def runs(p=P, n=4, tokens=65, t0=1.0, verify=1.2, draft=0.3, k_lo=1, jitter=None, first=5.0):
    """Synthetic plain / k_lo / k_max runs whose decode times follow R(k) = verify + k * draft exactly
    (`jitter`: per-prompt acceptance scale factors, to give the bootstrap something to resample)."""
    k_max = len(p)
    plain = Run(k=0, tokens=tokens, first_s=[first] * n, full_s=[first + (tokens - 1) * t0] * n)

    def spec(k):
        r = Run(k=k, tokens=tokens)
        for i in range(n):
            scale = jitter[i] if jitter else 1.0
            rounds = 40
            pos = [round(rounds * min(1.0, x * scale)) for x in p[:k]]
            r.first_s.append(first)
            r.full_s.append(first + rounds * (verify + k * draft))
            r.rounds.append(rounds)
            r.drafted.append(k * rounds)
            r.per_position.append(pos)
        return r

    return plain, spec(k_lo), spec(k_max)


def expected_best(p, t0, verify, draft):
    s = [(1 + sum(p[:k])) * t0 / (verify + k * draft) for k in range(1, len(p) + 1)]
    return s.index(max(s)) + 1, s


def test_tokens_per_round_and_conditional():
    assert tune.tokens_per_round([0.8, 0.6, 0.4], 0) == 1.0
    assert tune.tokens_per_round([0.8, 0.6, 0.4], 1) == pytest.approx(1.8)
    assert tune.tokens_per_round([0.8, 0.6, 0.4], 3) == pytest.approx(2.8)
    assert tune.conditional([0.8, 0.6, 0.0, 0.0]) == pytest.approx([0.8, 0.75, 0.0, 0.0])


def test_fit_recovers_the_costs_and_the_acceptance():
    f = tune.fit(*runs())
    assert f["t0"] == pytest.approx(1.0)
    assert f["verify"] == pytest.approx(1.2) and f["draft"] == pytest.approx(0.3)
    assert f["p"] == pytest.approx([round(40 * x) / 40 for x in P])


@pytest.mark.parametrize("draft", [0.05, 0.3, 0.9])
def test_recommendation_is_the_model_argmax(draft):
    """The recommended k is argmax E(k) T0 / (V + k D): a cheap draft drafts long, a costly one short."""
    p = [round(40 * x) / 40 for x in P]
    want, s = expected_best(p, 1.0, 1.2, draft)
    r = tune.analyse(*runs(draft=draft), boot=50)
    assert r["k"] == want and r["speedup"] == pytest.approx(s[want - 1], abs=1e-4)
    assert [row["speedup"] for row in r["rows"]] == pytest.approx(s, abs=1e-4)
    # identical prompts: every resample is the point, so is the interval
    assert r["interval"] == [want, want] and r["rows"][want - 1]["best_share"] == 1.0
    # the guard's break-even unit: the round at the recommended k in plain decode steps
    assert r["guard"] == {"round_cost": round(1.2 + want * draft, 3), "draft_cost": round(draft, 3)}


def test_cheap_draft_prefers_longer_than_a_costly_one():
    cheap = tune.analyse(*runs(draft=0.05), boot=20)["k"]
    costly = tune.analyse(*runs(draft=0.9), boot=20)["k"]
    assert cheap > costly


def test_bootstrap_interval_spreads_over_unequal_prompts():
    r = tune.analyse(*runs(jitter=[0.6, 1.0, 1.1, 0.8, 1.05, 0.7], n=6, draft=0.25), boot=400)
    lo, hi = r["interval"]
    assert lo <= r["k"] <= hi
    assert sum(row["best_share"] for row in r["rows"]) == pytest.approx(1.0)
    for row in r["rows"]:
        assert row["interval"][0] <= row["interval"][1]


def test_bootstrap_is_seeded():
    a = tune.analyse(*runs(jitter=[0.6, 1.0, 1.1, 0.8], draft=0.25), boot=200)
    b = tune.analyse(*runs(jitter=[0.6, 1.0, 1.1, 0.8], draft=0.25), boot=200)
    assert a["rows"] == b["rows"] and a["interval"] == b["interval"]


def test_a_negative_slope_is_no_negative_draft_cost():
    plain, lo, hi = runs(draft=0.3)
    hi.full_s = [f - 0.5 * rnd for f, rnd in zip(lo.full_s, hi.rounds)]  # k_max rounds cheaper than k=1 ones
    assert tune.fit(plain, lo, hi)["draft"] == 0.0


def test_check_against_the_shorter_run():
    r = tune.analyse(*runs(), boot=10)
    c = r["check_k_lo"]
    assert c["k"] == 1 and c["measured_tokens_per_forward"] == pytest.approx(c["predicted"])


def test_edge_and_slower_than_plain_findings():
    from surgery.text.diagnostics import Location

    edge = tune.analyse(*runs(draft=0.0), boot=20)
    edge["capped"] = False
    codes = [d.code for d in tune.findings(edge, Location())]
    assert edge["k"] == edge["k_max"] and codes == ["SRG547"]
    slow = tune.analyse(*runs(verify=5.0, draft=2.0), boot=20)
    slow["capped"] = False
    assert "SRG548" in [d.code for d in tune.findings(slow, Location())]
    assert [d.code for d in tune.findings({"error": "k=1: boom"}, Location())] == ["SRG546"]


def test_engine_flags():
    f = tune.engine_flags(4, "eagle3", "/m/draft")
    spec = json.loads(f["vllm"].split("'")[1])
    assert spec == {"model": "/m/draft", "method": "eagle3", "num_speculative_tokens": 4}
    assert f["sglang"] == ("--speculative-algorithm EAGLE3 --speculative-draft-model-path /m/draft "
                           "--speculative-num-steps 4 --speculative-eagle-topk 1 --speculative-num-draft-tokens 5")
    assert tune.engine_flags(3, "dflash", "d")["sglang"].endswith("--speculative-algorithm DFLASH "
                                                                  "--speculative-draft-model-path d "
                                                                  "--speculative-num-draft-tokens 4")
    assert tune.engine_flags(2, "mtp", "d")["sglang"].startswith("--speculative-algorithm NEXTN")
    assert "sglang" not in tune.engine_flags(2, "ngram", "d")


def test_block_cap():
    assert tune.block_cap(PAIRS / "dflash" / "draft", "dflash") == 3  # block_size 4: bonus + 3
    assert tune.block_cap(PAIRS / "eagle3" / "draft", "eagle3") is None


class FakeTimer:
    """Stands in for VLLMTimer: returns the synthetic runs, records the k asked."""
    engine = "vllm"
    release = "0.0-test"

    def __init__(self, *a, fail_at=None, no_rounds=False, **kw):
        self.asked, self.fail_at, self.no_rounds = [], fail_at, no_rounds

    def run(self, k, prompts, tokens):
        self.asked.append(k)
        plain, lo, hi = runs(p=P[:max(k, 1)] if k > 1 else P[:1], n=len(prompts), tokens=tokens)
        r = plain if k == 0 else (lo if k == 1 else hi)
        r.k = k
        if k == self.fail_at:
            r.error = "RuntimeError: engine refused"
        if self.no_rounds and k:
            r.rounds = [0] * len(r.rounds)
        return r


def test_tune_runs_the_three_engines():
    t = FakeTimer()
    r = tune.tune(t, [[1, 2]] * 3, 65, k_max=4, boot=20)
    assert t.asked == [0, 1, 4] and not r.get("error")
    assert [run["k"] for run in r["runs"]] == [0, 1, 4] and 1 <= r["k"] <= 4


@pytest.mark.parametrize("fail_at", [0, 1, 4])
def test_a_run_that_fails_stops_the_tune(fail_at):
    t = FakeTimer(fail_at=fail_at)
    r = tune.tune(t, [[1, 2]] * 3, 65, k_max=4, boot=5)
    assert r["error"].startswith(f"k={fail_at}: RuntimeError") and t.asked[-1] == fail_at


def test_a_run_without_rounds_stops_the_tune():
    r = tune.tune(FakeTimer(no_rounds=True), [[1, 2]] * 3, 65, k_max=3, boot=5)
    assert "drafted nothing" in r["error"]


@pytest.fixture
def fake_timer(monkeypatch):
    made = []

    def make(*a, **kw):
        made.append(FakeTimer())
        return made[-1]

    monkeypatch.setattr(tune, "VLLMTimer", make)
    return made


def test_cli_tune_json(run_cli, fake_timer, tmp_path):
    csv_path = tmp_path / "acceptance.csv"
    code, out, _ = run_cli("probe", "eagle3", "--engine", "vllm", "--tune", "--k-max", "4", "--json", "--max-prompts", "3",
                           "--acceptance-csv", csv_path)
    r = json.loads(out)
    assert code == 0 and fake_timer[0].asked == [0, 1, 4]
    assert r["prompts"] == 3 and r["k_max"] == 4 and 1 <= r["k"] <= 4
    assert f'"num_speculative_tokens": {r["k"]}' in r["flags"]["vllm"] and '"method": "eagle3"' in r["flags"]["vllm"]
    assert csv_path.read_text().splitlines()[0].endswith("acceptance_at_pos_3")


def test_cli_tune_text(run_cli, fake_timer):
    code, out, _ = run_cli("probe", "eagle3", "--engine", "vllm", "--tune", "--k-max", "3", "--max-prompts", "2")
    assert code == 0
    assert "recommended: num_speculative_tokens = " in out and "vllm: --speculative-config" in out
    assert "sglang: --speculative-algorithm EAGLE3" in out and "limits: one request at a time" in out


def test_cli_tune_caps_a_block_drafter(run_cli, fake_timer):
    code, out, _ = run_cli("probe", "dflash", "--engine", "vllm", "--tune", "--json", "--max-prompts", "2")
    r = json.loads(out)
    assert code == 0 and fake_timer[0].asked == [0, 1, 3] and r["capped"] and r["block_cap"] == 3


def test_cli_tune_failure_is_coded_exit_1(run_cli, monkeypatch):
    monkeypatch.setattr(tune, "VLLMTimer", lambda *a, **kw: FakeTimer(fail_at=1))
    code, out, _ = run_cli("probe", "eagle3", "--engine", "vllm", "--tune", "--max-prompts", "2")
    assert code == 1 and "error SRG546: k=1: RuntimeError: engine refused" in out


def test_cli_tune_on_hf_is_refused(run_cli):
    code, _, err = run_cli("probe", "gemma4-mtp", "--engine", "hf", "--tune")
    assert code == 2 and "SRG494" in err and "--engine vllm" in err


def test_cli_tune_and_check_exclude_each_other(run_cli):
    code, _, err = run_cli("probe", "eagle3", "--engine", "vllm", "--tune", "--check")
    assert code == 2 and "SRG011" in err


def test_cli_k_max_one_is_refused_coded(run_cli, fake_timer):
    code, out, _ = run_cli("probe", "eagle3", "--engine", "vllm", "--tune", "--k-max", "1", "--max-prompts", "2")
    assert code == 1 and "SRG546" in out and "--k-max >= 2" in out


def test_one_stalled_prompt_does_not_move_the_costs():
    """Timing noise is one-sided (a stall only adds time): the costs are medians over the prompts, so one
    prompt ten times slower leaves them where the other prompts put them."""
    clean = tune.fit(*runs(n=7))
    plain, lo, hi = runs(n=7)
    for run in (plain, lo, hi):
        run.full_s[3] = run.first_s[3] + 10 * (run.full_s[3] - run.first_s[3])
    stalled = tune.fit(plain, lo, hi)
    for key in ("t0", "verify", "draft"):
        assert stalled[key] == pytest.approx(clean[key])
    assert tune.analyse(plain, lo, hi, boot=50)["k"] == tune.analyse(*runs(n=7), boot=50)["k"]
