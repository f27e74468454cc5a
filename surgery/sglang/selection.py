"""Which recipe the user selected for an SGLang engine, and how strictly. Explicit, never guessed:

- `surgery.sglang.hooks.install(recipe=...)` from the launcher (the server-argument route: a launcher
  that adds `--surgery-recipe` passes its value here), else
- the environment variable `SURGERY_RECIPE` (a path or a shipped recipe name), as for vLLM.
`SURGERY_STRICT=0` reports instead of failing on operations SGLang cannot perform.
No recipe selected: the hook logs once that it changes nothing (never a quiet pass)."""
from __future__ import annotations

import os

ENV_RECIPE = "SURGERY_RECIPE"
ENV_STRICT = "SURGERY_STRICT"


def selected_recipe(explicit: str | None = None) -> str | None:
    return explicit or os.environ.get(ENV_RECIPE) or None


def strict() -> bool:
    return os.environ.get(ENV_STRICT, "1") != "0"
