"""Greedy output compared up to exact ties of the target's logits, for every engine that decodes
speculatively (SGLang: `surgery apply --engine sglang`; vLLM: the random-weight MTP probes).

Where a speculative output leaves the greedy one, the greedy engine's own two best tokens at that
position decide what it was: an exact tie (bit-equal top two logprobs, and they are the two tokens
seen: SRG365), where greedy itself is undefined and each engine path breaks the tie its own way, or
a real divergence (SRG366). Pure Python: no engine, no torch."""
from __future__ import annotations


def exact_tie(greedy_token, speculative_token, top2) -> bool:
    """The target's two best [token, logprob] at a position are bit-equal and are the two tokens seen."""
    (t1, l1), (t2, l2) = top2
    return l1 == l2 and {greedy_token, speculative_token} == {t1, t2}


def divergences(reference: list[list[int]], outputs: list[list[int]], top: list | None) -> list[dict]:
    """Per differing prompt, the first position where the speculative output leaves the greedy one,
    the two tokens, and (with the reference's top logprobs) the target's own two best choices there
    and their logprob margin. `exact_tie`: the two best are bit-equal and are the two tokens: greedy
    itself is undefined there, and each engine path breaks the tie its own way (the verify pass scores
    k+1 tokens in one forward, greedy decoding one; in bf16 they round differently: docs/gpu.md
    section 8). Which token wins there is rounding, not wiring."""
    rows = []
    for i, (a, b) in enumerate(zip(reference, outputs)):
        if a == b:
            continue
        pos = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        row = {"prompt": i, "position": pos, "greedy_token": a[pos] if pos < len(a) else None,
               "speculative_token": b[pos] if pos < len(b) else None}
        best = (top[i] if top and i < len(top) else None) or []
        row["exact_tie"] = False
        if pos < len(best) and len(best[pos]) >= 2:
            top2 = [list(best[pos][0]), list(best[pos][1])]
            row.update(greedy_top2=top2, margin=top2[0][1] - top2[1][1],
                       exact_tie=exact_tie(row["greedy_token"], row["speculative_token"], top2))
        rows.append(row)
    return rows


def reference_ties(top: list) -> list[dict]:
    """Every position of the greedy reference where its two best tokens score bit-equal: where a
    speculative run may leave it without a fault (the verify pass scores k+1 tokens in one forward,
    greedy one; they round differently)."""
    return [{"prompt": i, "position": j, "top2": [list(pos[0]), list(pos[1])]}
            for i, rows in enumerate(top or ()) for j, pos in enumerate(rows)
            if len(pos) >= 2 and pos[0][1] == pos[1][1]]
