"""The guard's settings: `guard:` as written (None, a bool or a mapping) checked into a `GuardConfig`, the
defaults and draft costs of surgery/data/guard.yaml, and one line that says a block back.

Why apart: every engine's adapter and the recipe check read settings the same way; which layer's settings
win is precedence.py, what the rules do with them is judge.py."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..resources import load_data
from .expectation import parse_expect, parse_source, source_text
from .keys import ACTIONS, CANARY_KEYS, KEYS, NUMBERS, invalid


def defaults() -> dict[str, Any]:
    return dict(load_data("data/guard.yaml")["defaults"])


def cost_table() -> tuple[dict[str, float], dict[str, float]]:
    """(sequential draft cost per method, parallel draft cost per method), data/guard.yaml."""
    data = load_data("data/guard.yaml")
    return dict(data["draft_cost"]), dict(data["parallel_draft_cost"])


def miniature_settings() -> dict[str, Any]:
    """The guard's settings for the built-in miniatures' short runs (`apply --ablate` rows), data/guard.yaml."""
    return dict(load_data("data/guard.yaml")["miniature"])


@dataclass(frozen=True)
class GuardConfig:
    """`additional_config.surgery.guard`, checked. `enabled` None: on when a recipe is selected."""

    enabled: bool | None = None
    action: str = "warn"
    floor: float = 0.10
    min_drafts: int = 200
    window: int = 1000
    check_every: int = 50
    shape_margin: float = 0.30
    cliff_ratio: float = 0.50
    min_support: int = 50
    drift_points: float = 20.0
    expect: tuple[tuple[str, Any], ...] = ()  # (key, value) pairs of EXPECT_KEYS
    expect_source: tuple[tuple[str, str], ...] = ()  # expect.source: (key, value) pairs, "kind" first
    expect_tolerance: float = 0.15
    expect_z: float = 2.576  # the support bound: Wilson upper end at this z (expectation, canary)
    clear_after: int = 3
    verify_cost: float = 0.05
    round_cost: float | None = None  # measured: a speculative round's time in plain decode steps
    draft_cost: float | None = None  # one draft forward in plain decode steps (overrides the method's)
    bands: tuple[int, ...] = ()
    # the start-up canary (surgery/vllm/canary.py): (prompts, tokens); prompts "builtin", a tuple of strings or
    # of token-id tuples; None: no canary
    canary: tuple | None = None

    def on(self, recipe_selected: bool) -> bool:
        """Whether the guard runs on an engine: as `enabled` says, else whenever a recipe is selected (every
        engine's adapter asks this, so the rule is written once)."""
        return self.enabled if self.enabled is not None else recipe_selected

    @property
    def expectations(self) -> dict[str, Any]:
        return dict(self.expect)

    @property
    def source(self) -> dict[str, str]:
        return dict(self.expect_source)


def _number(key: str, value: Any):
    kind, low, high, _ = NUMBERS[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not float(value).is_integer()):
        raise invalid(key, f"{key} must be {'an integer' if kind is int else 'a number'}, got {value!r}")
    value = kind(value)
    if not math.isfinite(value) or value < low or (high is not None and value > high):
        raise invalid(key, f"{key} must be in [{low}, {'inf' if high is None else high}], got {value!r}")
    return value


def _canary(value: Any) -> tuple | None:
    """guard.canary: {prompts: builtin | [text, ...] | [[token id, ...], ...], tokens: int} -> (prompts, tokens)."""
    if value is None or value is False:
        return None
    if value is True:
        value = {}
    if not isinstance(value, dict):
        raise invalid("canary", f"canary must be a mapping {{prompts, tokens}}, got {value!r}",
                   'e.g. {"prompts": "builtin", "tokens": 48}')
    unknown = sorted(set(value) - set(CANARY_KEYS))
    if unknown:
        raise invalid(f"canary.{unknown[0]}", f"unknown canary key {unknown[0]!r} (known: {', '.join(CANARY_KEYS)})")
    prompts, tokens = value.get("prompts", "builtin"), value.get("tokens", 48)
    if isinstance(tokens, bool) or not isinstance(tokens, int) or not 1 <= tokens <= 4096:
        raise invalid("canary.tokens", f"tokens (generated per prompt) must be an integer in [1, 4096], got {tokens!r}")
    if prompts == "builtin":
        return ("builtin", tokens)
    ok = isinstance(prompts, (list, tuple)) and prompts and (
        all(isinstance(p, str) and p for p in prompts)
        or all(isinstance(p, (list, tuple)) and p and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0
                                                           for t in p) for p in prompts))
    if not ok:
        raise invalid("canary.prompts", f"prompts must be \"builtin\", a list of non-empty strings or a list of token-id "
                   f"lists, got {prompts!r}")
    return (tuple(p if isinstance(p, str) else tuple(p) for p in prompts), tokens)


def parse_config(raw: Any) -> GuardConfig:
    """`guard:` as the user wrote it (None, a bool, or a mapping) -> GuardConfig; SRG475 on anything
    else, with the key path. Defaults from surgery/data/guard.yaml."""
    base = defaults()
    if raw is None:
        raw = {}
    elif isinstance(raw, bool):
        raw = {"enabled": raw}
    elif not isinstance(raw, dict):
        raise invalid("", f"guard must be true, false or a mapping, got {type(raw).__name__} {raw!r}")
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        import difflib

        close = difflib.get_close_matches(unknown[0], KEYS, n=1, cutoff=0.75)
        hint = f"did you mean {close[0]!r}?" if close else None
        raise invalid(unknown[0], f"unknown guard key {unknown[0]!r} (known: {', '.join(KEYS)})", hint)
    merged = {**base, **raw}
    enabled = merged.get("enabled")
    if enabled is not None and not isinstance(enabled, bool):
        raise invalid("enabled", f"enabled must be true or false, got {enabled!r}")
    action = merged.get("action")
    if action not in ACTIONS:
        raise invalid("action", f"action must be one of {', '.join(ACTIONS)}, got {action!r}",
                   "vLLM 0.32 has no switch that turns speculation off on a running engine (docs/vllm.md)")
    numbers = {k: (None if merged.get(k) is None else _number(k, merged[k])) for k in NUMBERS}
    for k in NUMBERS:
        if numbers[k] is None and k not in ("round_cost", "draft_cost"):
            raise invalid(k, f"{k} must be given")
    bands = merged.get("bands") or []
    if not isinstance(bands, (list, tuple)) or any(isinstance(b, bool) or not isinstance(b, int) or b < 1
                                                   for b in bands) or list(bands) != sorted(set(bands)):
        raise invalid("bands", f"bands must be rising batch sizes >= 1 (the upper edge of each band), got {bands!r}")
    if numbers["window"] < numbers["min_drafts"]:
        raise invalid("window", f"window ({numbers['window']} drafts) is smaller than min_drafts "
                   f"({numbers['min_drafts']}): no rule could ever be judged")
    if numbers["check_every"] > numbers["window"]:
        raise invalid("check_every", f"check_every ({numbers['check_every']}) is larger than the window "
                   f"({numbers['window']} drafts)")
    return GuardConfig(enabled=enabled, action=action, expect=parse_expect(merged.get("expect")),
                       expect_source=parse_source(merged.get("expect")), bands=tuple(bands),
                       canary=_canary(merged.get("canary")), **numbers)


def describe_settings(raw: Any) -> str:
    """One line of a `guard:` block as written, keys in the guard's order: 'floor 0.15, action fail, expect
    mean_length 2.8 (measured on vllm 0.26.0, H200)'."""
    if isinstance(raw, bool) or raw is None:
        return "on" if raw else "off" if raw is False else "-"
    config = parse_config(raw)
    parts = []
    for key in KEYS:
        if key not in raw:
            continue
        if key == "expect":
            figures = ", ".join(f"{k} {list(v) if isinstance(v, tuple) else v:}" for k, v in config.expect)
            source = source_text(config.source)
            parts.append(f"expect {figures}" + (f" ({source})" if source else ""))
        elif key == "canary":
            canary = config.canary
            prompts = canary and (canary[0] if isinstance(canary[0], str) else f"{len(canary[0])} prompts")
            parts.append("canary off" if canary is None else f"canary {prompts} x {canary[1]} tokens")
        elif key == "enabled":
            parts.append("on" if raw[key] else "off")
        else:
            parts.append(f"{key} {raw[key]}")
    return ", ".join(parts) or "defaults"
