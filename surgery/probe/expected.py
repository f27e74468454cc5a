"""What acceptance the pair should reach, and whether any candidate reaches it.

The probe ranks answers to the questions a config leaves open. When every candidate is far below what the
pair is known to reach, the cause is outside those questions (the engine, the dtype, a kernel, the
weights), and ranking the candidates against each other says nothing about it: the H100 run of
2026-12-06 (vLLM 0.34, float32, eager) gave the built-in EAGLE-3 head 29 % "as served", confirmed, where
its recorded expectation is 81 % (docs/gpu.md section 17). SRG496 says so.

Where the expectation comes from, first found: the recipe's `guard.expect` (what a team ships with its
recipe, surgery/guardrun.py), else the built-in pair's measured `expect.<engine>` when the probe runs on
the built-in pair (surgery/data/pairs/index.yaml). The bar is the guard's: the mean per-position
acceptance x (1 - expect_tolerance) (surgery/data/guard.yaml)."""
from __future__ import annotations

from typing import Any

from ..diagnostics import Diagnostic, Location, diag
from ..guard import GuardConfig


def expected_for(recipe: Any, pair: Any, engine: str) -> dict | None:
    """{"rate", "per_position", "from", "source"} or None when nothing records what the pair reaches."""
    guard = getattr(recipe, "guard", None)
    found, origin = None, None
    if isinstance(guard, dict) and isinstance(guard.get("expect"), dict):
        found, origin = guard["expect"], "the recipe's guard.expect"
    elif pair is not None:
        by_engine = (getattr(pair, "info", None) or {}).get("expect") or {}
        if isinstance(by_engine.get(engine), dict):
            found, origin = by_engine[engine], f"the built-in pair's measured expect.{engine}"
    per = (found or {}).get("per_position")
    if not per:
        return None
    return {"rate": round(sum(per) / len(per), 4), "per_position": list(per), "from": origin,
            "source": found.get("source")}


def best_acceptance(rows: list[dict]) -> tuple[float, str] | None:
    """The highest acceptance of the candidates that decoded (a candidate that errored is not counted)."""
    ran = [(r["acceptance"], r["name"]) for r in rows if not r.get("error") and r.get("prompts")]
    return max(ran) if ran else None


def shortfall(result: dict, where: Location, tolerance: float = GuardConfig.expect_tolerance) -> Diagnostic | None:
    """SRG496 when the best candidate is under the expectation x (1 - tolerance)."""
    expected = result.get("expected")
    best = best_acceptance(result["candidates"])
    if expected is None or best is None:
        return None
    rate, name = best
    bar = expected["rate"] * (1 - tolerance)
    if rate >= bar:
        return None
    src = expected.get("source") or {}
    said = ", ".join(f"{k} {v}" for k, v in src.items() if k in ("kind", "engine", "release", "card", "date"))
    return diag("SRG496", f"the best candidate ({name}) accepts {rate:.1%}; {expected['from']} is "
                f"{expected['rate']:.1%}" + (f" ({said})" if said else "") + f", under {bar:.1%} with tolerance "
                f"{tolerance:g}: no answer to the open questions explains the gap", where)
