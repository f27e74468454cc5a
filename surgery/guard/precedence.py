"""Which settings a guard runs with: the layers (defaults, a built-in pair's measured expectation, the
recipe's `guard:` block, the engine's own settings) and their one precedence, written once.

Why apart: every engine (the vLLM plugin, the HF run, the SGLang plugin) lists its layers and merges them here,
and a bad key is said where it was written (the recipe file, SURGERY_GUARD, additional_config), not where it
was merged into."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Callable

from ..text.diagnostics import Diagnostic, Location, SurgeryError, diag
from .judge import Guard
from .keys import WHERE
from .settings import GuardConfig, describe_settings, parse_config


# ---- which settings a guard runs with: the layers and their precedence, written once -------------------------
#
# Lowest first; a later layer wins, KEY BY KEY at the top level (a recipe's `floor` stays when the engine only
# sets `action`), and each key's value is taken whole, never merged into: `expect` above all (an expectation
# and its `source` are one statement: a figure must never be credited to another layer's source), `canary`
# (prompts and tokens go together), `bands` (a list). A layer that is `false` / `true` is `{enabled: ...}`.
#   1. the guard's defaults (surgery/data/guard.yaml; a finished HF run: surgery/data/guard_runs.yaml);
#   2. the built-in pair's measured `expect.<engine>` (surgery/data/pairs/index.yaml), where the run is that
#      pair (HF runs; vLLM `apply --ablate` passes it in the engine's own config);
#   3. the recipe's `guard:` block: what acceptance the team that ships the recipe says its pair reaches;
#   4. the engine's own settings: vLLM `additional_config.surgery.guard`, HF and SGLang `SURGERY_GUARD`.
PRECEDENCE = ("defaults", "pair", "recipe", "engine")


ENV_GUARD = "SURGERY_GUARD"


@dataclass(frozen=True)
class Layer:
    """One source of guard settings: `kind` (a PRECEDENCE name), its raw value (None, a bool or a mapping) and
    `locate` (a key path under it -> where it is written), so that SRG475 names the file and key the bad value
    came from, not the engine's key it was merged into."""

    kind: str
    value: Any
    locate: Callable[[tuple], Location] = field(compare=False, repr=False)


def engine_layer(value: Any) -> Layer:
    """vLLM's `additional_config.surgery.guard`."""
    return Layer("engine", value, lambda path: Location(key_path=".".join((WHERE,) + tuple(map(str, path)))))


def env_setting(environ=None) -> dict | None:
    """`SURGERY_GUARD` as a mapping (None when unset; true / false: {enabled: ...}); SRG486 when it is not a JSON
    mapping or boolean. HF has no engine config to carry the guard's settings, SGLang no additional_config."""
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


def env_layer(environ=None) -> Layer:
    """HF's and SGLang's engine layer: `SURGERY_GUARD` (SRG486 when it is not a mapping)."""
    return Layer("engine", env_setting(environ),
                 lambda path: Location(key_path=".".join((ENV_GUARD,) + tuple(map(str, path)))))


def recipe_layer(recipe: Any) -> Layer:
    """The recipe's `guard:` block (surgery/recipe.py keeps it as `Recipe.guard`), located in the recipe file."""
    value = getattr(recipe, "guard", None) if recipe is not None else None
    return Layer("recipe", value, lambda path: recipe.location(("guard",) + tuple(path)))


def pair_layer(expect: dict | None, where: str) -> Layer:
    """A built-in pair's measured expectation ({per_position, mean_length, source}) as `{expect: ...}`; `where`
    names it in surgery/data/pairs/index.yaml (e.g. 'pairs.gemma4-mtp.expect.hf')."""
    return Layer("pair", {"expect": dict(expect)} if expect else None,
                 lambda path: Location("surgery/data/pairs/index.yaml",
                                       key_path=".".join((where,) + tuple(map(str, path[1:])))))


@dataclass(frozen=True)
class Settings:
    """The merged settings (`raw`, what parse_config takes) and, per top-level key, the layer that gave it."""

    raw: Any
    origin: dict = field(default_factory=dict)  # key -> Layer ("" -> the layer whose whole value is bad)

    def relocate(self, exc: SurgeryError) -> SurgeryError:
        """SRG475 from parse_config / Guard (located under additional_config.surgery.guard) moved to where the
        offending key was written: the recipe file and `guard.<key>`, SURGERY_GUARD.<key>, index.yaml."""
        out = []
        for d in exc.diagnostics:
            path = (d.location.key_path or "").removeprefix(WHERE).lstrip(".")
            parts = tuple(path.split(".")) if path else ()
            layer = self.origin.get(parts[0] if parts else "")
            if d.code != "SRG475" or layer is None:  # a key no layer wrote (a finished run's window): as it is
                out.append(d)
            else:
                out.append(Diagnostic(d.code, d.severity, d.message, layer.locate(parts), d.hint))
        return SurgeryError(out)

    def config(self, **override) -> GuardConfig:
        """parse_config over the merged settings (plus `override`, e.g. a finished run's window), SRG475 at the
        layer that wrote the bad key."""
        if isinstance(self.raw, dict):
            raw = {**self.raw, **override}
        else:  # None: the defaults; anything else is refused with its type
            raw = (dict(override) or None) if self.raw is None else self.raw
        try:
            return parse_config(raw)
        except SurgeryError as exc:
            raise self.relocate(exc) from None

    def guard(self, config: GuardConfig, num_spec: int, method: str | None = None, parallel: bool = False) -> Guard:
        """Guard(config, ...) with a too-long expect.per_position located at the layer that gave it."""
        try:
            return Guard(config, num_spec, method, parallel)
        except SurgeryError as exc:
            raise self.relocate(exc) from None


def resolve(*layers: Layer) -> Settings:
    """The layers (lowest first, PRECEDENCE order) merged: top-level keys one by one, each value replaced whole.
    A layer that is neither None, a bool nor a mapping is returned as it is, so parse_config refuses it with
    its type (SRG475), located at that layer."""
    raw: dict | None = None
    origin: dict = {}
    for layer in layers:
        value = layer.value
        if value is None:
            continue
        if isinstance(value, bool):
            value = {"enabled": value}
        if not isinstance(value, dict):
            return Settings(value, {"": layer})
        raw = dict(raw or {})
        for key, v in value.items():
            raw[key] = v
            origin[key] = layer
    return Settings(raw, origin)


def check_recipe_guard(recipe_guard: Any, locate: Callable[[tuple], Location]) -> list[Diagnostic]:
    """A recipe's `guard:` block on its own, over the defaults (what a team ships must stand by itself): the
    SRG475 diagnostics, located in the recipe file; [] when it is valid or absent."""
    if recipe_guard is None:
        return []
    settings = resolve(Layer("recipe", recipe_guard, locate))
    try:
        settings.config()
    except SurgeryError as exc:
        return list(exc.diagnostics)
    return []


def recipe_note(recipe: Any) -> list[Diagnostic]:
    """SRG480 (a note): the recipe's `guard:` settings in one line, for `surgery validate` / `plan`."""
    raw = getattr(recipe, "guard", None)
    if raw is None:
        return []
    return [diag("SRG480", f"recipe guard: {describe_settings(raw)}; the engine's own settings "
                 f"({WHERE} / {ENV_GUARD}) override it key by key", recipe.location(("guard",)))]
