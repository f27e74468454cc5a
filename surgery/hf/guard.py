"""The acceptance guard in HF runs: which `guard:` settings an HF run is judged with, and the verdict on a
decoding check's per-draft counts (surgery/guardrun.py judges; this module only gathers the inputs).

Settings, merged in this order (later wins, `expect` key by key):
1. the built-in pair's measured HF acceptance, `expect.hf` of surgery/data/pairs/index.yaml (when the
   pair run is a built-in one: no --target/--draft, or folders that are a built-in pair's), with its
   `source`, so a drop under the pair's own figure trips SRG474 and the line names the reference;
2. the recipe's `guard:` mapping, where the recipe carries one;
3. the `SURGERY_GUARD` environment variable (a JSON mapping), the same variable the SGLang plugin reads:
   HF has no engine config to carry it, and a run's override (a smaller support bound, `action: fail`,
   an expectation from a model card) needs no recipe edit.

The break-even rule needs the drafter's method (surgery/data/guard.yaml's draft costs): the built-in
pair's `method` for the recipe (gemma4-mtp: mtp; draft-model: draft_model)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..diagnostics import Location, SurgeryError, diag
from ..guardrun import judge, merge
from ..pairs import builtin_pair, builtin_pairs

ENV_GUARD = "SURGERY_GUARD"


def env_setting(environ=None) -> dict | None:
    """`SURGERY_GUARD` as a mapping (None when unset); SRG486 when it is not a JSON mapping / boolean."""
    text = (os.environ if environ is None else environ).get(ENV_GUARD)
    if text is None or not text.strip():
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise SurgeryError(diag("SRG486", f"{ENV_GUARD} is not valid JSON ({exc}): {text[:120]!r}",
                                Location(key_path=ENV_GUARD))) from exc
    if isinstance(value, bool):
        return {"enabled": value}
    if not isinstance(value, dict):
        raise SurgeryError(diag("SRG486", f"{ENV_GUARD} must be a JSON mapping (or true / false), got "
                                f"{type(value).__name__} {text[:120]!r}", Location(key_path=ENV_GUARD)))
    return value


def builtin_recipe_of(target_dir, draft_dir) -> str | None:
    """The built-in pair whose target and draft folders these are (None: a user's pair)."""
    try:
        t, d = Path(target_dir).resolve(), Path(draft_dir).resolve()
    except (OSError, TypeError):
        return None
    for name in builtin_pairs():
        pair = builtin_pair(name)
        if pair is not None and pair.target == t and pair.draft == d:
            return name
    return None


def pair_expectation(recipe: str | None, engine: str = "hf") -> dict | None:
    """`{"expect": {...}}` from the built-in pair's `expect.<engine>` (None when it lists none)."""
    pair = builtin_pair(recipe) if recipe else None
    expect = ((pair.info.get("expect") or {}).get(engine) if pair is not None else None)
    return {"expect": dict(expect)} if expect else None


def method_of(recipe: str | None) -> str | None:
    pair = builtin_pair(recipe) if recipe else None
    return pair.method if pair is not None else None


def settings(recipe_name: str | None, builtin: str | None, recipe_guard: Any = None, environ=None) -> dict:
    """The merged `guard:` an HF run is judged with (see the module docstring for the order)."""
    return merge(pair_expectation(builtin), recipe_guard, env_setting(environ))


def verdict(check: dict, raw: dict, num_spec: int, method: str | None) -> dict:
    """The guard's verdict on a decoding check (surgery/hf/specdec.py decode_check, standalone.py
    assisted_check): all prompts' drafts, in order, as one finished run."""
    drafts = [tuple(x) for prompt in check.get("per_draft") or () for x in prompt]
    return judge(drafts, raw, num_spec, method)
