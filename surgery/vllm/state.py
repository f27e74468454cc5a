"""What the plugin keeps on a live vLLM proposer between its hooks, in one place.

The hooks run at different moments of one engine start (draft loaded, KV caches bound, weights
reloaded) and the inspection API reads the results later; the proposer object is the only thing
they all see. Each value is one attribute `_surgery_<name>` on it; this module is the only code
that names them (tests and benchmarks read them directly).

Names: plan, report (the ApplyReport), verify, kv_checks, target_lm, hint_problems, findings,
target_model (set by the load hook), audit, audit_target, warmed (the checks after the warm-up),
load_values (values the warmed stage compares with), kv_scales_fix (the calculate_kv_scales fix),
load_info (load format, what "has own weights" was answered from), dummy_load (on a model: the has-own
flags the dummy-load hook set), reloaded (weights reloaded since load); on vLLM's scheduler: guard (the
acceptance guard's GuardRun, surgery/vllm/guard.py).
"""
from __future__ import annotations

from typing import Any

NAMES = ("plan", "report", "verify", "kv_checks", "target_lm", "hint_problems", "findings", "target_model", "audit",
         "audit_target", "warmed", "load_values", "kv_scales_fix", "load_info", "dummy_load", "reloaded", "guard")


def _attr(name: str) -> str:
    if name not in NAMES:
        raise KeyError(f"no proposer state {name!r} (known: {', '.join(NAMES)})")
    return f"_surgery_{name}"


def record(proposer: Any, **values: Any) -> None:
    for name, value in values.items():
        setattr(proposer, _attr(name), value)


def recorded(proposer: Any, name: str, default: Any = None) -> Any:
    return getattr(proposer, _attr(name), default)
