"""The counts the guard judges: drafts, and per position the drafts that proposed and that had accepted a
token (what vLLM's SpecDecodingStats holds, what SGLang's and HF's per-draft counts add up to).

Why apart: every engine adapter makes these (vLLM per step, SGLang per verify, HF per finished run) and every
rule reads them; they know nothing of windows or rules."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Counts:
    """Counter totals over some drafts: what vLLM's SpecDecodingStats holds."""

    drafts: int = 0
    drafted: list[int] = field(default_factory=list)  # drafts that proposed a token at position i
    accepted: list[int] = field(default_factory=list)  # drafts whose token i was accepted

    @classmethod
    def sized(cls, positions: int) -> Counts:
        """Counts for a drafter of `positions` tokens (every position listed, drafted or not)."""
        return cls(0, [0] * positions, [0] * positions)

    def observe(self, num_draft_tokens: int, num_accepted: int) -> None:
        """One draft, as vLLM's SpecDecodingStats.observe_draft counts it."""
        need = max(num_draft_tokens, num_accepted)
        if need > len(self.drafted):
            grow = need - len(self.drafted)
            self.drafted.extend([0] * grow)
            self.accepted.extend([0] * grow)
        self.drafts += 1
        for i in range(num_draft_tokens):
            self.drafted[i] += 1
        for i in range(num_accepted):
            self.accepted[i] += 1

    @classmethod
    def from_histogram(cls, hist: dict, positions: int) -> Counts:
        """One step's drafts given as {(drafted, accepted): n} (surgery/vllm/guard.py `step_drafts`) as
        per-position counts: `observe` once per draft, n at a time."""
        out = cls.sized(positions)
        for (drafted, accepted), n in hist.items():
            out.observe_n(drafted, accepted, n)
        return out

    def observe_n(self, num_draft_tokens: int, num_accepted: int, n: int) -> None:
        """`n` drafts alike (one step's histogram, surgery/vllm/guard.py): `observe` n times over."""
        self._fit(max(num_draft_tokens, num_accepted))
        self.drafts += n
        for i in range(num_draft_tokens):
            self.drafted[i] += n
        for i in range(num_accepted):
            self.accepted[i] += n

    def _fit(self, n: int) -> None:
        if n > len(self.drafted):
            self.drafted.extend([0] * (n - len(self.drafted)))
            self.accepted.extend([0] * (n - len(self.accepted)))

    def add(self, other: Counts, sign: int = 1) -> None:
        self._fit(len(other.drafted))
        self.drafts += sign * other.drafts
        for i, (d, a) in enumerate(zip(other.drafted, other.accepted)):
            self.drafted[i] += sign * d
            self.accepted[i] += sign * a

    # the window's numbers, in vLLM's conventions (module docstring)
    def per_position(self) -> list[float]:
        return [a / self.drafts for a in self.accepted] if self.drafts else []

    def conditional(self) -> list[float | None]:
        """c[i]: accepted at i / drafts that reached position i with i-1 accepted (None: none did)."""
        out: list[float | None] = []
        for i, (d, a) in enumerate(zip(self.drafted, self.accepted)):
            base = d if i == 0 else min(self.accepted[i - 1], d)
            out.append(a / base if base else None)
        return out

    def mean_length(self) -> float:
        return 1 + sum(self.accepted) / self.drafts if self.drafts else float("nan")

    def acceptance(self) -> float:
        drafted = sum(self.drafted)
        return sum(self.accepted) / drafted if drafted else float("nan")
