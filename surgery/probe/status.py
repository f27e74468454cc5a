"""The probe's one status (issue 66), the same in text, JSON and the exit code:

- `decided`: `changed` (an answer other than the served reading wins, or the weights / the one servable
  reading say so) or `confirmed` (the served reading beats every alternative asked). Exit 0. `covers`
  lists the questions the decision answers (by id), so "confirmed" never reads wider than what was asked;
- `undecided`: a margin inside the noise of the prompts, a question no measurement can settle, or a
  winner (served or changed) that is well under what the pair is known to reach (SRG503: the damage is not
  all in the questions asked; the answers found are kept). Exit 0, with the margin and SRG491 / SRG503;
- `cannot probe`: the pair does not start or decode with any candidate, or `validate --weights` refuses it
  and no candidate answers the refusal (SRG498 with the coded reason). Exit 1.

Why one status: round one reported a pair whose only candidate failed at engine start as the healthy
pair's "nothing to decide" with exit 0, and a flipped norm_before_residual as "confirmed" at 67 % against
79 % healthy and 81.4 % expected (issue 66)."""
from __future__ import annotations

import random

from .stats import BOOTSTRAP, SEED

DECIDED, UNDECIDED, CANNOT = "decided", "undecided", "cannot probe"
CHANGED, CONFIRMED = "changed", "confirmed"
TOLERANCE = 0.10  # an all-clear needs the served pair within 10 % of its recorded expectation (SRG503)


def refused(row: dict) -> bool:
    return bool(row.get("error"))


def reason(rows: list[dict]) -> dict:
    """The coded reason no candidate ran: each failed row's stage, codes and the engine's own message."""
    out = []
    for r in rows:
        out.append({"candidate": r["name"], "stage": r.get("stage"), "codes": list(r.get("codes") or ()),
                    "error": r.get("error")})
    return {"failures": out}


def upper_mean(rates: list[float], seed: int = SEED) -> float:
    """The 97.5 % bootstrap upper end of the mean of per-prompt rates (the probe's own noise measure)."""
    if not rates:
        return 1.0
    rng = random.Random(seed)
    n = len(rates)
    means = sorted(sum(rates[rng.randrange(n)] for _ in range(n)) / n for _ in range(BOOTSTRAP))
    return means[int(0.975 * BOOTSTRAP) - 1]


def under_expectation(row: dict, expected: dict | None, tolerance: float = TOLERANCE) -> str | None:
    """Why `row` (a measured candidate) is too far under the pair's expectation for an all-clear, or None.
    The bar is the expectation x (1 - tolerance), tighter than the guard's (SRG496: a serving check allows
    for a long run's drift, an all-clear must not), held against the upper end of the candidate's
    per-prompt mean (its noise over these prompts)."""
    if not expected or not row or row.get("error") or not row.get("prompt_acceptance"):
        return None
    bar = expected["rate"] * (1 - tolerance)
    top = upper_mean(list(row["prompt_acceptance"]))
    if top >= bar:
        return None
    return (f"{row['name']} accepts {row['mean_prompt_acceptance']:.1%} per prompt (upper end {top:.1%} over "
            f"{row['prompts']} prompts), under {bar:.1%} = {expected['rate']:.1%} ({expected['from']}) x "
            f"(1 - {tolerance:g}): the questions asked do not explain the gap")


def decide(rows: list[dict], ranking: dict, questions, expected: dict | None, blocked: list | None = None) -> dict:
    """The decision: status, outcome, why, the answers (question id -> answer), what it covers."""
    covers = questions.covers
    ran = [r for r in rows if not refused(r) and r.get("prompts")]
    if blocked:
        return {"status": CANNOT, "outcome": None, "code": "SRG498", "answers": {}, "covers": covers,
                "why": "validate refuses the pair and no candidate answers it: " + "; ".join(blocked),
                "reason": {"validate": list(blocked)}}
    if not ran:
        codes = sorted({c for r in rows for c in (r.get("codes") or ())})
        first = next((r for r in rows if r.get("error")), None)
        why = (f"no candidate ran ({len(rows)} tried): " + (f"{first['name']}: {first['error']}" if first else "none built"))
        return {"status": CANNOT, "outcome": None, "code": "SRG498", "answers": {}, "covers": covers, "why": why,
                "codes": codes, "reason": reason(rows)}
    fixed_changes = {f.question.id: f.answer.to_dict() for f in questions.fixed if not f.answer.as_served}
    if questions.unanswerable:  # a question measurement cannot settle: never reported as confirmed
        return {"status": UNDECIDED, "outcome": None, "code": "SRG491", "why": "; ".join(questions.unanswerable),
                "answers": fixed_changes, "covers": covers, "leader": ranking.get("leader")}
    if len(ran) == 1 and len(rows) == 1 or not questions.open:
        best = ran[0]
        outcome = CHANGED if fixed_changes else CONFIRMED
        why = ("no open question: " + ("; ".join(questions.settled) if questions.settled else "the pair as served")
               if not fixed_changes else "answered without measuring: " + "; ".join(
                   f"{f.question.id} {f.answer.name} ({f.how})" for f in questions.fixed if not f.answer.as_served))
        dec = {"status": DECIDED, "outcome": outcome, "why": why, "candidate": best["name"],
               "answers": fixed_changes, "covers": covers}
    elif not ranking["decided"]:
        if len(ran) == 1:  # every other candidate failed: the one that ran is the only reading the engine serves
            best = ran[0]
            failed = [r for r in rows if refused(r)]
            why = ("the only candidate that ran; " + "; ".join(
                f"{r['name']} failed at {r.get('stage') or 'start'}" + (f" ({', '.join(r['codes'])})" if r.get("codes") else "")
                for r in failed))
            answers = {**fixed_changes, **best["answer_dicts"]}
            outcome = CONFIRMED if best["as_served"] and not fixed_changes else CHANGED
            dec = {"status": DECIDED, "outcome": outcome, "why": why, "candidate": best["name"], "answers": answers,
                   "covers": covers}
        else:
            held = served_checks_hold(rows, ranking, questions, expected)
            if held is None:
                return {"status": UNDECIDED, "outcome": None, "code": "SRG491", "why": ranking["why"],
                        "margin": _margin(ranking), "answers": fixed_changes, "covers": covers,
                        "leader": ranking.get("leader")}
            best = next(r for r in rows if r["name"] == ranking["leader"])
            answers = {**fixed_changes, **{k: v for k, v in best["answer_dicts"].items() if not v.get("as_served")}}
            outcome = CHANGED if answers else CONFIRMED
            dec = {"status": DECIDED, "outcome": outcome, "why": held, "candidate": best["name"], "answers": answers,
                   "covers": covers, "margin": _margin(ranking)}
    else:
        best = next(r for r in rows if r["name"] == ranking["best"])
        answers = {**fixed_changes, **best["answer_dicts"]}
        outcome = CONFIRMED if best["as_served"] and not fixed_changes else CHANGED
        dec = {"status": DECIDED, "outcome": outcome, "why": ranking["why"], "candidate": best["name"],
               "answers": answers, "covers": covers, "margin": _margin(ranking)}
    gap = under_expectation(next(r for r in rows if r["name"] == dec["candidate"]), expected)
    if gap is not None:
        # no all-clear under the pair's own record, and no "changed" that leaves the pair there either: the
        # answers found are kept (they may be right), but something outside the questions is still wrong
        return {"status": UNDECIDED, "outcome": None, "code": "SRG503", "why": gap,
                "answers": dec["answers"] if dec["outcome"] == CHANGED else {}, "covers": covers,
                "leader": dec["candidate"], "margin": dec.get("margin"), "would_be": dec["outcome"]}
    return dec


def served_checks_hold(rows: list[dict], ranking: dict, questions, expected: dict | None) -> str | None:
    """Why the leader stands though the ranking did not separate it from every candidate, or None.

    It stands only when each candidate it is not separated from differs from it in check questions alone
    (a flag the engine serves from the config or its default, which the probe asks because the field gets it
    wrong: norm_before_residual, DFlash causal), the leader holds the served answer to each of those, and the
    leader reaches the pair's recorded expectation (no expectation: it does not stand). A check whose
    alternative is not worse beyond the noise does not overturn what the config says; the expectation is
    what keeps that from being an all-clear on a damaged head."""
    if not expected:
        return None
    checks = {q.id for q in questions.open if q.check}
    leader = next((r for r in rows if r["name"] == ranking.get("leader")), None)
    if leader is None or under_expectation(leader, expected) is not None:
        return None
    mine = leader["answer_dicts"]
    close = []
    for name, c in (ranking.get("comparisons") or {}).items():
        if c["separated"]:
            continue
        other = next(r for r in rows if r["name"] == name)["answer_dicts"]
        differ = [q for q in mine if other.get(q, {}).get("name") != mine[q].get("name")]
        if not differ or any(q not in checks or not mine[q].get("as_served") for q in differ):
            return None
        close.append(f"{name!r} ({c['margin']:+.3f}, {c['prompts_agreeing']}/{c['prompts']} prompts)")
    return (f"ahead of every other candidate; against {', '.join(close)} within the noise, on checks of the served "
            f"flags only, and the leader reaches the pair's expectation {expected['rate']:.1%} ({expected['from']})")


def _margin(ranking: dict) -> dict | None:
    comps = ranking.get("comparisons") or {}
    if not comps:
        return None
    name, c = min(comps.items(), key=lambda kv: kv[1]["margin"])
    return {"against": name, "margin": round(c["margin"], 4), "interval": [round(x, 4) for x in c["interval"]],
            "prompts_agreeing": c["prompts_agreeing"], "prompts": c["prompts"], "sign_p": round(c["sign_p"], 4)}


def label(dec: dict) -> str:
    """`decided (changed)`, `undecided`, `cannot probe`: the status as the text report's headline says it."""
    return f"{dec['status']} ({dec['outcome']})" if dec.get("outcome") else dec["status"]
