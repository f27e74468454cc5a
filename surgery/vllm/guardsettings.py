"""Which settings a vLLM engine's acceptance guard runs with: the selected recipe's `guard:` block under the
engine's own `additional_config.surgery.guard`, merged by surgery/guard/run.py `resolve` (the one home of the
precedence: top-level keys one by one, each value whole, so an `expect` keeps its own `source`).

The built-in pair's measured expectation reaches vLLM only through the engine's config (`surgery apply
--ablate` puts it there): a served model is not known to be a miniature. Apart from surgery/vllm/guard.py
because it loads the recipe machinery (recipe, selection), which the plugin's import must not pay for in every
process vLLM starts (tests/test_no_heavy_imports.py); the scheduler's __init__ and the start-up check call it.
"""
from __future__ import annotations

from typing import Any

from ..guard.core import GuardConfig
from ..guard.run import Settings, engine_layer, recipe_layer, resolve
from .selection import load_selected_recipe, selected_recipe, surgery_config


def guard_setting(vllm_config: Any) -> Settings:
    """The merged settings: the selected recipe's `guard:` (None without a recipe), then
    additional_config.surgery.guard."""
    ref = selected_recipe(vllm_config)
    recipe = load_selected_recipe(ref) if ref is not None else None
    return resolve(recipe_layer(recipe), engine_layer(surgery_config(vllm_config).get("guard")))


def guard_config(vllm_config: Any) -> tuple[Settings, GuardConfig]:
    """(the merged settings, checked): SRG475 at the recipe key or the additional_config key that is bad."""
    settings = guard_setting(vllm_config)
    return settings, settings.config()
