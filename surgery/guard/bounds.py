"""The support bound: how far a rate seen over few drafts may be from its long-run value.

Why apart: the expectation rule (expectation.py) and the one-off judgement of the canary (judge.py `judge_once`)
both trip only when even the upper end of the interval is under their threshold; one formula, one home."""
from __future__ import annotations

import math


def pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def wilson_upper(successes: float, n: int, z: float) -> float:
    """The upper end of the Wilson score interval of a rate seen as `successes` of `n`, at `z` (1.0 when n is 0).

    Why: the expectation rule and the canary judge small supports (a miniature's 64-draft window, a canary's
    ~100 drafts), where a healthy rate reads well under its long-run value by chance (the healthy mtp pair's
    position 2 at 44/64 = 0.688 against 0.824 x 0.85 = 0.700). A rule trips only when even the upper end of
    the interval is under the threshold: the more drafts, the tighter the bound. Wilson rather than the
    normal interval: it stays inside [0, 1] and keeps its width at rates near 0 or 1 and small n."""
    if n <= 0:
        return 1.0
    p = min(max(successes / n, 0.0), 1.0)
    z2 = z * z
    centre = p + z2 / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return min(1.0, (centre + spread) / (1 + z2 / n))


def length_upper(mean_len: float, k: int, n: int, z: float) -> float:
    """The Wilson upper end of a mean accepted length (bonus token in) over `n` drafts of `k` tokens: that of the
    mean of each draft's accepted tokens / k, a value in [0, 1] (expectation_misses says why it is a bound)."""
    return 1 + k * wilson_upper((mean_len - 1) / k * n, n, z)
