"""Every mislabelled head of tests/probe/heads.py (>= 20, five families, HF and vLLM on CPU) probed
on its engine: the probe recovers the truth or says undecided, never a wrong answer; the shipped
heads are confirmed. Slow: one vLLM engine per candidate (bench/probe_cpu.py writes the figures)."""
from __future__ import annotations

import pytest

from .heads import HEADS, build, run, verdict

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


@pytest.mark.parametrize("head", HEADS, ids=[h.id for h in HEADS])
def test_probe_is_never_wrong_with_confidence(head, tmp_path):
    r = run(head, build(head, tmp_path))
    v = verdict(head, r)
    assert v != "WRONG", (r["decision"], [(c["name"], c["mean_prompt_acceptance"]) for c in r["candidates"]])
    if head.healthy:
        assert v == "confirmed"
    assert r["counts"]["candidates"] == len(r["candidates"]) >= 1
    assert all(c["error"] is None for c in r["candidates"]), r["candidates"]
