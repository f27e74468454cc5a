"""Which `engine:` hints of a recipe each engine checks against the live engine.

vLLM (surgery/vllm/plugin.py `hint_problems`): `method` against `speculative_config.method`,
`attention_backend: inherit_target` against the draft's and the target's attention backends,
`advance_draft_positions` against the proposer's `constant_draft_positions`, `parallel_drafting` against
the proposer's `parallel_drafting` (P-EAGLE, DFlash, DSpark draft all k tokens in one pass). HF checks none:
surgery's HF decoding loop has no per-recipe position mode. A hint no one checks is listed aloud
(plan table, `--json` `engine_hints_unchecked`, the plugin's log line), never silently dropped.
"""
from __future__ import annotations

CHECKED_HINTS: dict[str, tuple[str, ...]] = {
    "vllm": ("method", "attention_backend", "advance_draft_positions", "parallel_drafting"),
    "hf": (),
}


def unchecked_hints(engine_hints: dict, engine: str) -> list[str]:
    return [k for k in (engine_hints.get(engine) or {}) if k not in CHECKED_HINTS.get(engine, ())]
