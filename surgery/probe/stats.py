"""Ranking candidates by acceptance, with a margin and the noise of the prompt set.

Why per prompt: the prompts are the probe's sample; a candidate is better only if it is better
across them, not because one long prompt tipped a pooled rate. The unit is each prompt's acceptance
rate (accepted / drafted). Best vs every other candidate is a paired comparison over the prompts both
ran: the mean difference (the margin), a seeded bootstrap of it (its 95 % interval: the noise), and
a one-sided sign test (how many prompts agree). The best is *decided* only when, against every other
candidate, the interval excludes zero and the sign test holds (p <= ALPHA); otherwise the answer is
"undecided", with the margin and the noise: never a winner the prompts do not show.

Early stop: a candidate whose mean could not reach the leader's even if every remaining prompt were
fully accepted cannot win on these prompts; it stops once the prompts it ran also separate it from
the leader (its paired comparison uses the prompts it ran, so they must be enough to decide).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

ALPHA = 0.05
BOOTSTRAP = 2000
SEED = 0


@dataclass
class PromptResult:
    """One prompt decoded by one candidate."""
    drafted: int
    accepted: int
    rounds: int  # draft rounds = target verify forwards after the prefill
    per_position: list[int] | None = None  # accepted count at draft position 1..k (vLLM's counter)
    target_forwards: int = 0
    draft_forwards: int = 0

    @property
    def rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0


@dataclass
class Measured:
    """What one candidate measured: per prompt, and whether it stopped early."""
    prompts: list[PromptResult] = field(default_factory=list)
    stopped_early: bool = False
    error: str | None = None
    verified: bool | None = None
    stage: str | None = None  # where a failed candidate stopped: copy / validate / start / plugin / decode (status.py)
    codes: tuple = ()  # the coded findings that refused it (validate's errors), if any

    @property
    def mean(self) -> float:
        return sum(p.rate for p in self.prompts) / len(self.prompts) if self.prompts else 0.0

    def totals(self) -> dict:
        drafted = sum(p.drafted for p in self.prompts)
        accepted = sum(p.accepted for p in self.prompts)
        rounds = sum(p.rounds for p in self.prompts)
        out = {"prompts": len(self.prompts), "drafted": drafted, "accepted": accepted, "rounds": rounds,
               "acceptance": accepted / drafted if drafted else 0.0, "mean_prompt_acceptance": self.mean,
               "mean_length": 1 + accepted / rounds if rounds else None,
               "target_forwards": sum(p.target_forwards for p in self.prompts),
               "draft_forwards": sum(p.draft_forwards for p in self.prompts)}
        pos = [p.per_position for p in self.prompts]
        if pos and all(x is not None for x in pos) and rounds:
            k = max(len(x) for x in pos)
            out["per_position"] = [sum(x[j] for x in pos if j < len(x)) / rounds for j in range(k)]
        return out


def cannot_win(measured: Measured, n_prompts: int, leader_mean: float) -> bool:
    """True when even full acceptance on every prompt left keeps this candidate below the leader."""
    done = len(measured.prompts)
    best_possible = (sum(p.rate for p in measured.prompts) + (n_prompts - done)) / n_prompts
    return best_possible < leader_mean


def may_stop(measured: Measured, n_prompts: int, leader: Measured) -> bool:
    """Stop a candidate early: it cannot win AND the prompts it ran already separate it from the
    leader (the paired comparison the ranking makes holds on them). Without the second condition a
    candidate stopped after two prompts would leave too few for the sign test, and a clear loser
    would turn the verdict into "undecided"."""
    return cannot_win(measured, n_prompts, leader.mean) and compare(leader, measured)["separated"]


def sign_p(diffs: list[float]) -> float:
    """One-sided sign test: P(at least this many positive of the non-zero differences | no effect)."""
    nonzero = [d for d in diffs if d != 0]
    m, k = len(nonzero), sum(1 for d in nonzero if d > 0)
    if m == 0:
        return 1.0
    return sum(math.comb(m, i) for i in range(k, m + 1)) / 2 ** m


def bootstrap_interval(diffs: list[float], seed: int = SEED) -> tuple[float, float]:
    """95 % percentile interval of the mean difference, resampling prompts (seeded: reproducible)."""
    if not diffs:
        return 0.0, 0.0
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(BOOTSTRAP))
    return means[int(0.025 * BOOTSTRAP)], means[int(0.975 * BOOTSTRAP) - 1]


def compare(best: Measured, other: Measured) -> dict:
    """Best vs other, paired over the prompts both ran."""
    n = min(len(best.prompts), len(other.prompts))
    diffs = [best.prompts[i].rate - other.prompts[i].rate for i in range(n)]
    lo, hi = bootstrap_interval(diffs)
    margin = sum(diffs) / n if n else 0.0
    p = sign_p(diffs)
    agree = sum(1 for d in diffs if d > 0)
    return {"prompts": n, "margin": margin, "interval": [lo, hi], "noise": (hi - lo) / 2,
            "prompts_agreeing": agree, "sign_p": p, "separated": n > 0 and lo > 0 and p <= ALPHA}


def rank(results: dict[str, Measured]) -> dict:
    """The ranking (best first), each other candidate against the best, and the verdict."""
    runnable = {k: v for k, v in results.items() if v.error is None and v.prompts}
    order = sorted(runnable, key=lambda k: (runnable[k].stopped_early, -runnable[k].mean))
    if not order:
        return {"order": [], "decided": False, "best": None, "comparisons": {}, "why": "no candidate ran"}
    best = order[0]
    comparisons = {k: compare(runnable[best], runnable[k]) for k in order[1:]}
    decided = bool(comparisons) and all(c["separated"] for c in comparisons.values())
    if not comparisons:
        why = "one candidate: nothing to decide"
    elif decided:
        c = min(comparisons.values(), key=lambda c: c["margin"])
        why = (f"ahead of every other candidate; smallest margin {c['margin']:+.3f} (95 % interval "
               f"[{c['interval'][0]:+.3f}, {c['interval'][1]:+.3f}], {c['prompts_agreeing']}/{c['prompts']} prompts agree)")
    else:
        k, c = next((k, c) for k, c in comparisons.items() if not c["separated"])
        why = (f"against {k!r} the margin {c['margin']:+.3f} is inside the noise (95 % interval "
               f"[{c['interval'][0]:+.3f}, {c['interval'][1]:+.3f}], {c['prompts_agreeing']}/{c['prompts']} prompts "
               f"agree, sign p {c['sign_p']:.3f})")
    return {"order": order, "best": best if decided else None, "leader": best, "decided": decided,
            "comparisons": comparisons, "why": why}
