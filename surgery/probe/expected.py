"""What acceptance the pair should reach, and whether any candidate reaches it.

The probe ranks answers to the questions a config leaves open. When every candidate is far below what the
pair is known to reach, the cause is outside those questions (the engine, the dtype, a kernel, the
weights, a recipe that never ran), and ranking the candidates against each other says nothing about it:
the H100 run of 2026-12-06 (vLLM 0.34, the plugin not loaded) gave the built-in EAGLE-3 head 29 % "as
served", confirmed, where its recorded expectation is 81 % (docs/gpu.md section 17). SRG496 says so.

Where the expectation comes from, first found: the recipe's `guard.expect` (what a team ships with its
recipe, surgery/guard/run.py), else the built-in pair's measured `expect.<engine>` when the probe runs on
the built-in pair (surgery/data/pairs/index.yaml). The rule is the guard's SRG474 rule: under the mean
per-position acceptance x (1 - expect_tolerance), and so is the Wilson upper end (expect_z) of the
candidate's rate over its drafts (rounds), the support bound: a short probe (8 prompts x 16 tokens of the
healthy EAGLE-3 pair on CPU: 59.6 % over 47 drafts) reads well under the pair's long-run figure by chance."""
from __future__ import annotations

from typing import Any

from ..text.diagnostics import Diagnostic, Location, diag
from ..guard.bounds import wilson_upper
from ..guard.settings import GuardConfig


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


def best_acceptance(rows: list[dict], z: float = GuardConfig.expect_z) -> tuple[float, float, str] | None:
    """(acceptance, its Wilson upper end over the candidate's drafts, name) of the candidate with the highest
    upper end among those that decoded (a candidate that errored is not counted)."""
    ran = [(wilson_upper(r["acceptance"] * r.get("rounds", 0), r.get("rounds", 0), z), r["acceptance"], r["name"])
           for r in rows if not r.get("error") and r.get("prompts")]
    if not ran:
        return None
    upper, rate, name = max(ran)
    return rate, upper, name


def shortfall(result: dict, where: Location, tolerance: float = GuardConfig.expect_tolerance,
              z: float = GuardConfig.expect_z) -> Diagnostic | None:
    """SRG496 when even the best candidate's support bound is under the expectation x (1 - tolerance)."""
    expected = result.get("expected")
    best = best_acceptance(result["candidates"], z)
    if expected is None or best is None:
        return None
    rate, upper, name = best
    bar = expected["rate"] * (1 - tolerance)
    if upper >= bar:
        return None
    src = expected.get("source") or {}
    said = ", ".join(f"{k} {v}" for k, v in src.items() if k in ("kind", "engine", "release", "card", "date"))
    return diag("SRG496", f"the best candidate ({name}) accepts {rate:.1%}; {expected['from']} is "
                f"{expected['rate']:.1%}" + (f" ({said})" if said else "") + f", under {bar:.1%} with tolerance "
                f"{tolerance:g} (upper bound {upper:.1%} at z {z:g} over its drafts): no answer to the open questions explains "
                "the gap", where)
