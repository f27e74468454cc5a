"""The acceptance guard on a finished decode run: surgery/guard/core.py's rules over every draft of the run,
judged once, with a stated support bound. Used where no server window exists: `surgery apply --engine
hf` (our MTP loop and transformers' assisted generation) and each of its `--ablate` rows, and the HF /
SGLang bench runs of the miniature pairs.

Why not guard.py's defaults: they are sized for a server that sees thousands of drafts (min_drafts
200, window 1000, check_every 50). `surgery apply --engine hf` decodes 8 prompts x 48 tokens, about 115
drafts of k = 3 on the tiny Gemma 4 pair: under the server defaults no rule would ever be judged, and a
guard that says nothing reads as a pass. So a finished run is one window (window = check_every = its
drafts), judged once when it holds at least `min_drafts` drafts (surgery/data/guard_runs.yaml: 30, the
binomial bound is written there); under that the verdict is "not judged", with the count, never
"silent". The drift rule needs an earlier window and is not judged on one run.

What comes in is per-draft counts, the engines' own: one (drafted, accepted) pair per draft (one
request's proposal in one step), in order: exactly what vLLM's `SpecDecodingStats.observe_draft` and
guard.Counts.observe take, so per-position acceptance means the same here as on a vLLM server.

An expectation may carry `source` (where it comes from: {kind: measured, engine, release, card, ...},
the shared format of docs/vllm.md): it is kept out of guard.py's check and named in the verdict and in
the SRG474 trip's message.

It is also the one home of *which* settings an engine's guard runs with (`resolve`, below): every engine
(the vLLM plugin, the HF run, the SGLang plugin) lists its layers and merges them here, so the precedence
is written once."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ..text.diagnostics import Diagnostic, Location, SurgeryError, diag
from .core import KEYS, WHERE, Counts, Guard, GuardConfig, parse_config, source_text
from ..resources import load_data

STATUSES = ("tripped", "silent", "not judged")


def run_defaults() -> dict[str, Any]:
    return dict(load_data("data/guard_runs.yaml")["defaults"])


def ignored_keys() -> tuple[str, ...]:
    return tuple(load_data("data/guard_runs.yaml")["ignored"])


def split_source(raw: Any) -> tuple[Any, dict | None]:
    """(the guard mapping without expect.source, the source mapping or None). Anything that is not a
    mapping is returned as it is: parse_config says what is wrong with it (SRG475)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("expect"), dict) or "source" not in raw["expect"]:
        return raw, None
    expect = dict(raw["expect"])
    source = expect.pop("source")
    out = dict(raw)
    if expect:
        out["expect"] = expect
    else:
        out.pop("expect")
    return out, source if isinstance(source, dict) else {"kind": str(source)}


def describe_source(source: dict | None) -> str:
    """'measured, hf 5.19.0 on cpu, bench/guard_hf.py' from a source mapping (None: '')."""
    if not source:
        return ""
    kind = source.get("kind", "given")
    where = " ".join(str(source[k]) for k in ("engine", "release") if source.get(k))
    card = f" on {source['card']}" if source.get("card") else ""
    by = f", {source['by']}" if source.get("by") else ""
    date = f", {source['date']}" if source.get("date") else ""
    return f"{kind}{', ' + where if where else ''}{card}{date}{by}"


def judge(drafts: Iterable[tuple[int, int]], raw: Any = None, num_spec: int | None = None, method: str | None = None,
          parallel: bool = False) -> dict:
    """The guard's verdict on a finished run: `drafts` are (drafted tokens, accepted tokens) per draft, in
    order; `raw` the `guard:` settings, a mapping or the `Settings` that `resolve` merged (then SRG475 names
    the layer that wrote the bad key), SRG475 when they are invalid; `num_spec` the drafter's k (default: the
    most tokens any draft proposed).

    Returns {"status": tripped | silent | not judged, "drafts", "min_drafts", "trips": [Trip.to_dict()],
    "codes", "per_position", "mean_length", "acceptance", "break_even", "cost", "expect", "reference",
    "why"}: JSON-ready, what the CLI prints and the ablation rows carry."""
    if not isinstance(raw, Settings):
        return _judge(drafts, raw, num_spec, method, parallel)
    try:
        return _judge(drafts, raw.raw, num_spec, method, parallel)
    except SurgeryError as exc:
        raise raw.relocate(exc) from None


def _judge(drafts, raw, num_spec, method, parallel) -> dict:
    raw, source = split_source(raw)
    base = run_defaults()
    expect_min = base.pop("expect_min_drafts")
    settings = {**base, **{k: v for k, v in (raw if isinstance(raw, dict) else {}).items()
                           if k not in ignored_keys()}}
    if isinstance(settings, dict):
        expect_min = settings.pop("expect_min_drafts", expect_min)
    if raw is not None and not isinstance(raw, dict):
        settings = raw  # parse_config refuses it with the type named
    rows = [(int(d), int(a)) for d, a in drafts if d]
    k = num_spec or max((d for d, _ in rows), default=1)
    counts = Counts.sized(k)
    for d, a in rows:
        counts.observe(d, a)
    n = len(rows)
    min_drafts = settings.get("min_drafts", base["min_drafts"]) if isinstance(settings, dict) else base["min_drafts"]
    # validated whatever the run's size: a bad guard mapping is an error even on a short run
    probe = parse_config(settings if not isinstance(settings, dict) else
                         {**settings, "window": max(n, min_drafts), "check_every": max(n, min_drafts)})
    out = {"status": "not judged", "drafts": n, "min_drafts": probe.min_drafts, "trips": [], "codes": [],
           "per_position": [round(p, 4) for p in counts.per_position()],
           "mean_length": round(counts.mean_length(), 4) if n else None,
           "acceptance": round(counts.acceptance(), 4) if n else None,
           "expect": probe.expectations or None, "reference": source, "action": probe.action}
    if n < probe.min_drafts:
        out["why"] = (f"{n} drafts, under the support bound min_drafts {probe.min_drafts} "
                      f"(surgery/data/guard_runs.yaml): decode more prompts or tokens")
        guard = Guard(probe, k, method, parallel)
        out.update(break_even=guard.break_even, cost=guard.cost_source)
        return out
    judged = dict(settings)
    if probe.expect and n < expect_min:
        judged.pop("expect", None)
        out["expect_not_judged"] = (f"{n} drafts, under expect_min_drafts {expect_min} "
                                    "(surgery/data/guard_runs.yaml): per-position rates that close are noise")
    config = parse_config({**judged, "window": n, "check_every": n})
    guard = Guard(config, k, method, parallel)
    for d, a in rows:
        guard.observe(d, a)
    trips = []
    for t in guard.trips:
        row = t.to_dict()
        if t.kind == "expectation" and source:
            row["message"] += f"; reference: {describe_source(source)}"
        trips.append(row)
    out.update(status="tripped" if trips else "silent", trips=trips, codes=sorted({t["code"] for t in trips}),
               break_even=guard.break_even, cost=guard.cost_source,
               why=f"judged once on all {n} drafts of the run (support bound {config.min_drafts})")
    return out


def line(verdict: dict | None) -> str:
    """One line for a table: 'silent (115 drafts)', 'SRG470 collapse, SRG471 break_even (112 drafts)',
    'not judged (12 drafts < 30)'."""
    if not verdict:
        return "-"
    n = verdict["drafts"]
    if verdict["status"] == "not judged":
        return f"not judged ({n} drafts < {verdict['min_drafts']})"
    if verdict["status"] == "silent":
        return f"silent ({n} drafts)"
    return ", ".join(f"{t['code']} {t['kind']}" for t in verdict["trips"]) + f" ({n} drafts)"


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


def recipe_note(recipe: Any) -> list[Diagnostic]:
    """SRG480 (a note): the recipe's `guard:` settings in one line, for `surgery validate` / `plan`."""
    raw = getattr(recipe, "guard", None)
    if raw is None:
        return []
    return [diag("SRG480", f"recipe guard: {describe_settings(raw)}; the engine's own settings "
                 f"({WHERE} / {ENV_GUARD}) override it key by key", recipe.location(("guard",)))]
