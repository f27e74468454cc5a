"""The acceptance guard in HF runs: which `guard:` settings an HF run is judged with, and the verdict on a
decoding check's per-draft counts (surgery/guard/run.py judges; this module only gathers the inputs).

Settings: surgery/guard/precedence.py `resolve`, the one home of the precedence (lowest first; top-level keys one
by one, `expect` / `canary` / `bands` whole):
1. the guard's run defaults (surgery/data/guard_runs.yaml);
2. the built-in pair's measured HF acceptance, `expect.hf` of surgery/data/pairs/index.yaml (when the
   pair run is a built-in one: no --target/--draft, or folders that are a built-in pair's), with its
   `source`, so a drop under the pair's own figure trips SRG474 and the line names the reference;
3. the recipe's `guard:` block, where the recipe carries one;
4. the `SURGERY_GUARD` environment variable (a JSON mapping), the same variable the SGLang plugin reads:
   HF has no engine config to carry it, and a run's override (a smaller support bound, `action: fail`,
   an expectation from a model card) needs no recipe edit.

The break-even rule needs the drafter's method (surgery/data/guard.yaml's draft costs): the built-in
pair's `method` for the recipe (gemma4-mtp: mtp; draft-model: draft_model)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..guard.precedence import ENV_GUARD, Settings, env_layer, pair_layer, recipe_layer, resolve
from ..guard.run import judge
from ..pairs import builtin_pair, builtin_pairs

__all__ = ["ENV_GUARD", "builtin_recipe_of", "pair_expectation", "method_of", "settings", "verdict"]


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


def settings(builtin: str | None, recipe: Any = None, environ=None) -> Settings:
    """The merged `guard:` settings an HF run is judged with (see the module docstring for the order):
    `builtin` the built-in pair this run is (None: a user's pair), `recipe` the loaded recipe."""
    pair = pair_expectation(builtin)
    return resolve(pair_layer(pair and pair["expect"], f"pairs.{builtin}.expect.hf"), recipe_layer(recipe),
                   env_layer(environ))


def verdict(check: dict, raw: Settings | dict, num_spec: int, method: str | None) -> dict:
    """The guard's verdict on a decoding check (surgery/hf/specdec.py decode_check, standalone.py
    assisted_check): all prompts' drafts, in order, as one finished run."""
    drafts = [tuple(x) for prompt in check.get("per_draft") or () for x in prompt]
    return judge(drafts, raw, num_spec, method)
