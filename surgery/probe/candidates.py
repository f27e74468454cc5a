"""Candidate plans: one per answer, crossed where the questions interact.

Why crossed within a group only: questions of one group (surgery/data/probe.yaml `groups`: the layer ids
and the norms around them; the RoPE fields; embedding / lm_head / d2t) change the same input of the head,
so one wrong answer can hide what another is worth: their answers are crossed (the product), as long as
that stays under MAX_CANDIDATES (past it, each question is varied alone around the served reading, said
in `note`). Questions of different groups act on different inputs: each group is varied with the others
at their served reading, and the runner measures the group winners together afterwards (`combined`).
The first candidate is always the pair as served (every answer the engine takes from the config), with
the answers fixed without measuring (`base`: from the weights, or the one reading the target can serve)."""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from .answers import Answer, Question
from .field import group_of

MAX_CANDIDATES = 12


@dataclass(frozen=True)
class Candidate:
    name: str
    answers: tuple[tuple[str, Answer], ...]  # (question id, answer)
    base: tuple = ()  # config edits every candidate carries (Questions.base_edits)
    stage: int = 1  # 1: varied within its group; 2: the group winners together (runner.py)

    @property
    def as_served(self) -> bool:
        return all(a.as_served for _, a in self.answers)

    @property
    def edits(self) -> tuple:
        return tuple(self.base) + tuple(e for _, a in self.answers for e in a.edits)

    @property
    def tensors(self) -> tuple:
        return tuple(t for _, a in self.answers for t in a.tensors)

    def to_dict(self) -> dict:
        return {"name": self.name, "as_served": self.as_served,
                "answers": {code: a.name for code, a in self.answers}}


def _served_first(q: Question) -> list[Answer]:
    return sorted(q.answers, key=lambda a: not a.as_served)


def _combos(questions: list[Question]) -> tuple[list[tuple[Answer, ...]], str]:
    """The answer tuples for one group: the product, or one question at a time past MAX_CANDIDATES."""
    lists = [_served_first(q) for q in questions]
    total = 1
    for a in lists:
        total *= len(a)
    if total <= MAX_CANDIDATES:
        return list(itertools.product(*lists)), f"{total} = the product of the answers ({' x '.join(str(len(a)) for a in lists)})"
    base = tuple(a[0] for a in lists)
    return ([base] + [base[:i] + (alt,) + base[i + 1:] for i, a in enumerate(lists) for alt in a[1:]],
            f"one question varied at a time around the served reading: the product ({total}) is over {MAX_CANDIDATES}")


def _candidate(questions, combo, base, stage=1) -> Candidate:
    pairs = tuple((q.id, a) for q, a in zip(questions, combo))
    return Candidate("; ".join(a.name for a in combo), pairs, tuple(base), stage)


def groups(questions: list[Question]) -> dict[str, list[Question]]:
    out: dict[str, list[Question]] = {}
    for q in questions:
        out.setdefault(group_of(q), []).append(q)
    return out


def candidates(questions: list[Question], base: tuple = ()) -> tuple[list[Candidate], str]:
    """(candidates, how they were built). No question: one candidate, the pair as served (with `base`)."""
    if not questions:
        return [Candidate("as served", (), tuple(base))], "no open question: the pair as served"
    by_group = groups(questions)
    served = {q.id: _served_first(q)[0] for q in questions}
    out, notes, seen = [], [], set()
    for name, qs in by_group.items():
        combos, note = _combos(qs)
        notes.append(f"{name}: {note}" if len(by_group) > 1 else note)
        for combo in combos:
            chosen = dict(served)
            chosen.update({q.id: a for q, a in zip(qs, combo)})
            full = tuple(chosen[q.id] for q in questions)
            if tuple(map(id, full)) in seen:
                continue
            seen.add(tuple(map(id, full)))
            out.append(_candidate(questions, full, base))
    out.sort(key=lambda c: not c.as_served)  # the served pair first: the others race against it
    how = "; ".join(notes) + (" (groups varied apart, their winners measured together)" if len(by_group) > 1 else "")
    return out, how


def combined(questions: list[Question], cands: list[Candidate], best_of) -> Candidate | None:
    """The winners of each group together, when two or more groups have a winner other than the served
    reading and no candidate measured already says it: `best_of(group candidates) -> Candidate`."""
    by_group = groups(questions)
    if len(by_group) < 2:
        return None
    served = {q.id: _served_first(q)[0] for q in questions}
    chosen = dict(served)
    moved = 0
    for qs in by_group.values():
        ids = {q.id for q in qs}
        own = [c for c in cands if all(dict(c.answers)[i] is served[i] for i in dict(c.answers) if i not in ids)]
        win = best_of(own)
        if win is None:
            continue
        answers = dict(win.answers)
        if any(answers[i] is not served[i] for i in ids):
            moved += 1
            chosen.update({i: answers[i] for i in ids})
    if moved < 2:
        return None
    full = tuple(chosen[q.id] for q in questions)
    if any(tuple(dict(c.answers)[q.id] for q in questions) == full for c in cands):
        return None
    return _candidate(questions, full, cands[0].base, stage=2)


def neighbours(questions: list[Question], cands: list[Candidate], best: Candidate | None) -> list[Candidate]:
    """The candidates that test each of `best`'s answers where it stands: `best` with one group's answers
    replaced by each of that group's other combinations, those not measured yet. Why: groups are varied around
    the served reading, so an answer of one group was compared only with the other groups at their served
    reading; the winner's answer to it is decided only when its alternatives lose in the winner's own context
    (a YaRN scaling that reads alike under the wrong ids and differs under the right ones)."""
    if best is None or len(groups(questions)) < 2:
        return []
    have = {tuple(id(dict(c.answers)[q.id]) for q in questions) for c in cands}
    mine = dict(best.answers)
    out = []
    for qs in groups(questions).values():
        combos, _ = _combos(qs)
        for combo in combos:
            chosen = dict(mine)
            chosen.update({q.id: a for q, a in zip(qs, combo)})
            full = tuple(chosen[q.id] for q in questions)
            key = tuple(map(id, full))
            if key in have:
                continue
            have.add(key)
            out.append(_candidate(questions, full, best.base, stage=2))
    return out
