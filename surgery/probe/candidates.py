"""Candidate plans: one per answer, combined where the questions interact.

Why combined: every question the probe asks changes what the head's first layer is fed (the target
layers it reads, the norm before the residual, the rotation of the positions), so one wrong answer
can hide what another is worth; answers are crossed (the product), as long as that stays under
MAX_CANDIDATES. Past it, each question is varied alone around the served reading (said in `note`).
The first candidate is always the pair as served (every answer the engine takes from the config)."""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from .questions import Answer, Question

MAX_CANDIDATES = 12


@dataclass(frozen=True)
class Candidate:
    name: str
    answers: tuple[tuple[str, Answer], ...]  # (question code, answer)

    @property
    def as_served(self) -> bool:
        return all(a.as_served for _, a in self.answers)

    @property
    def edits(self) -> tuple:
        return tuple(e for _, a in self.answers for e in a.edits)

    @property
    def tensors(self) -> tuple:
        return tuple(t for _, a in self.answers for t in a.tensors)

    def to_dict(self) -> dict:
        return {"name": self.name, "as_served": self.as_served,
                "answers": {code: a.name for code, a in self.answers}}


def _served_first(q: Question) -> list[Answer]:
    return sorted(q.answers, key=lambda a: not a.as_served)


def candidates(questions: list[Question]) -> tuple[list[Candidate], str]:
    """(candidates, how they were built). No question: one candidate, the pair as served."""
    if not questions:
        return [Candidate("as served", ())], "no open question: the pair as served"
    lists = [_served_first(q) for q in questions]
    total = 1
    for a in lists:
        total *= len(a)
    if total <= MAX_CANDIDATES:
        combos = list(itertools.product(*lists))
        note = f"{total} = the product of the answers ({' x '.join(str(len(a)) for a in lists)})"
    else:
        base = tuple(a[0] for a in lists)
        combos = [base] + [base[:i] + (alt,) + base[i + 1:] for i, a in enumerate(lists) for alt in a[1:]]
        note = (f"one question varied at a time around the served reading: the product ({total}) is over "
                f"{MAX_CANDIDATES}")
    out = []
    for combo in combos:
        pairs = tuple((q.code, a) for q, a in zip(questions, combo))
        name = "; ".join(a.name for a in combo)
        out.append(Candidate(name, pairs))
    out.sort(key=lambda c: not c.as_served)  # the served pair first: the others race against it
    return out, note
