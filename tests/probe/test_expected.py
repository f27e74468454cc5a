"""SRG496: the probe says when no candidate reaches what the pair should (surgery/probe/expected.py)."""
from __future__ import annotations

from types import SimpleNamespace

from surgery.commands.probe import diagnostics, render
from surgery.text.diagnostics import Location
from surgery.pairs import builtin_pair
from surgery.probe.expected import expected_for, shortfall

WHERE = Location(file="draft/config.json")


def _result(*acceptances, expected=None, error_last=False, rounds=200):
    rows = [{"name": f"c{i}", "as_served": i == 0, "acceptance": a, "prompts": 8, "error": None, "rounds": rounds,
             "mean_prompt_acceptance": a, "stopped_early": False} for i, a in enumerate(acceptances)]
    if error_last:
        rows[-1].update(error="RuntimeError: boom", prompts=0)
    return {"engine": "vllm", "release": "0.34.0", "candidates": rows, "expected": expected,
            "decision": {"status": "confirmed", "why": "one candidate", "answers": {}},
            "questions": [], "settled": [], "unanswerable": [], "candidates_built": "1",
            "prompts": {"count": 8, "source": "builtin", "max_new_tokens": 48, "k": 3},
            "counts": {"target_forwards": 1, "target_forwards_without_early_stop": 1, "draft_forwards": 3,
                       "candidates": len(rows), "candidates_stopped_early": 0}}


def test_the_built_in_pairs_measured_expectation_is_found_and_the_recipes_wins():
    pair = builtin_pair("eagle3")
    got = expected_for(SimpleNamespace(guard=None), pair, "vllm")
    per = pair.info["expect"]["vllm"]["per_position"]
    assert got["rate"] == round(sum(per) / len(per), 4) and "built-in pair" in got["from"]
    assert got["source"]["kind"] == "measured"
    team = SimpleNamespace(guard={"expect": {"per_position": [0.5, 0.4], "source": {"kind": "user"}}})
    assert expected_for(team, pair, "vllm") == {"rate": 0.45, "per_position": [0.5, 0.4],
                                                "from": "the recipe's guard.expect", "source": {"kind": "user"}}
    assert expected_for(SimpleNamespace(guard=None), None, "vllm") is None  # a user's pair: nothing recorded


def test_a_shortfall_is_srg496_a_pair_at_its_expectation_is_not():
    expected = {"rate": 0.814, "per_position": [0.876, 0.805, 0.761], "from": "the built-in pair's measured expect.vllm",
                "source": {"kind": "measured", "release": "0.26.0", "card": "H200"}}
    low = shortfall(_result(0.291, expected=expected), WHERE)  # the H100 / vLLM 0.34 / float32 row
    assert low.code == "SRG496" and "29.1%" in low.message and "81.4%" in low.message and "H200" in low.message
    assert shortfall(_result(0.291, 0.80, expected=expected), WHERE) is None  # one candidate reaches it
    assert shortfall(_result(0.60, 0.9, expected=expected, error_last=True), WHERE).code == "SRG496"  # errors not counted
    assert shortfall(_result(0.291), WHERE) is None  # nothing recorded: nothing said
    # the support bound: the healthy EAGLE-3 pair decoded 8 prompts x 16 tokens on CPU read 59.6 % over 47
    # drafts, under the bar (69.2 %) by chance; its Wilson upper end is not
    assert shortfall(_result(0.596, expected=expected, rounds=47), WHERE) is None
    assert shortfall(_result(0.596, expected=expected, rounds=2000), WHERE).code == "SRG496"
    res = _result(0.291, expected=expected)
    res["diagnostics"] = [d.to_dict() for d in diagnostics(res, WHERE.file)]
    text = render(res)
    assert "expected: 81.4% (the built-in pair's measured expect.vllm)" in text and "SRG496" in text
