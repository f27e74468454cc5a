"""What preparing one operation on live models produces: its mutations and the checks that prove it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


class NotApplicable(Exception):
    """Raised by a performer when the live objects show an operation means nothing here (e.g. an
    attribute this engine version does not have on either side). It is reported (SRG321 with the
    reason), never silently dropped."""


@dataclass(frozen=True)
class Check:
    op_id: str
    name: str
    ok: bool
    detail: str = ""

    def to_dict(self) -> dict:
        return {"op": self.op_id, "check": self.name, "ok": self.ok, "detail": self.detail}


@dataclass
class Prepared:
    """An operation ready to run: its mutations and the checks that prove it afterwards.
    `decision` says what a load-time policy chose (e.g. `if_draft_has_own: share_if_identical`
    keeping a head's own weights); it is reported with the result."""

    op: Any
    mutations: list
    checks: list[Callable[[], Check]] = field(default_factory=list)
    decision: str | None = None
