"""Recipes: YAML documents, schema-checked, with every expression parsed and every reference
resolved before any model is read. Produces a `Recipe` that remembers where each value came from."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import expr as expr_lang
from .text.diagnostics import Diagnostic, Location, SurgeryError, diag, fail
from .facts import FACT_NAMES
from .ops.base import Step
from .ops.registry import UNITS
from .resources import load_schema, recipes_dir
from .text.schemacheck import Validator
from .text import localfile as textfile
from .text.localfile import read_text_file
from .text.yamlload import MAX_BYTES, Loaded, load_yaml_text
from .prechecked import already_checked
from .text.records import Record, record

SUPPORTED_VERSION = 1
RUNTIME_NAMES = ("pp_size", "tp_size", "kv_cache_dtype", "engine", "attention_backend", "pp_rank", "tp_rank",
                 "draft_tp_size", "backend_head_sizes", "device")


@record
class Condition(Record):
    when: expr_lang.Expr | None
    otherwise: str  # skip | warn | error
    because: str | None
    code: str | None
    path: tuple  # where `when` sits in the recipe


@record
class LayerMapSpec(Record):
    name: str
    rule: str
    offset: int
    pairs: dict[int, int] | None
    must_match: tuple[str, ...]
    path: tuple


@record
class LayerSetSpec(Record):
    """A named list of layer indices computed from facts: a range (`start` + `count`) or a list
    (`values`, falling back to `default` when it evaluates to null / an empty list)."""

    name: str
    side: str  # target | draft: whose layers the indices name
    start: expr_lang.Expr | None
    count: expr_lang.Expr | None
    values: expr_lang.Expr | None
    default: tuple[expr_lang.Expr, ...]
    min: expr_lang.Expr | None
    max: expr_lang.Expr | None
    because: str | None
    path: tuple
    expect_count: expr_lang.Expr | None = None
    when: expr_lang.Expr | None = None
    # added to every index `values` gives (not to `default`): a draft family that numbers layers
    # differently from the engine (DFlash / DSpark name the layer whose output they read: vLLM id + 1)
    offset: expr_lang.Expr | None = None


@record
class OpSpec(Record):
    """One recipe step where it stands: its index, its op kind (a key of surgery.ops.registry.UNITS,
    which the schema's op part is generated from), its arguments read into the kind's step class
    (`surgery/ops/<kind>/__init__.py`), its parsed condition, and its path in the recipe."""

    index: int
    kind: str
    args: Step
    condition: Condition
    path: tuple


@record
class Requirement(Record):
    that: expr_lang.Expr
    because: str
    code: str
    severity: str
    when: expr_lang.Expr | None
    path: tuple


@dataclass
class Recipe:
    name: str
    version: int
    summary: str
    applies_to: dict[str, dict[str, list[str]]]
    requires: list[Requirement]
    layer_maps: dict[str, LayerMapSpec]
    ops: list[OpSpec]
    engine: dict[str, dict[str, Any]]
    source: Loaded = field(repr=False)
    layer_sets: dict[str, LayerSetSpec] = field(default_factory=dict)
    # the acceptance guard's settings the recipe ships (`guard:`, as written; checked at load, SRG475): what
    # acceptance its pair should reach; merged under the engine's own (surgery/guard/precedence.py `resolve`)
    guard: Any = None

    @property
    def file(self) -> str | None:
        return self.source.file

    def location(self, path: tuple) -> Location:
        return self.source.location(path)


_SHORT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def _there(p: Path) -> bool:
    """Something is at `p`, or it cannot be looked up (the reader then says why: SRG781)."""
    try:
        return textfile.exists(p, "recipe")
    except SurgeryError:
        return True


def find_recipe(name_or_path: str | os.PathLike) -> Path:
    """A path, or the short name of a shipped recipe (`gemma4-mtp`). Only a plain name (letters,
    digits, `_.-`, no `..`, no separator of any platform) is looked up in the recipes folder, so
    a name can never reach a file outside it; anything else is the user's own path."""
    p = Path(name_or_path)
    text = str(name_or_path)
    if _there(p) or p.suffix in (".yaml", ".yml") or not _SHORT_NAME.fullmatch(text) or ".." in text:
        return p
    shipped = recipes_dir() / f"{name_or_path}.yaml"
    if shipped.exists():
        return shipped
    raise fail("SRG013", f"no recipe file or shipped recipe named {str(name_or_path)!r}", Location(str(name_or_path)),
               hint=_did_you_mean(text))


def _did_you_mean(name: str) -> str | None:
    """`gemma4_mtp` -> "did you mean gemma4-mtp?" plus the list (None: the catalogue's hint)."""
    import difflib

    shipped = sorted(f.stem for f in recipes_dir().glob("*.yaml"))
    close = difflib.get_close_matches(name.replace("_", "-").lower(), shipped, n=1, cutoff=0.6)
    if not close:
        return None
    return f"did you mean {close[0]}? shipped recipes: {', '.join(shipped)}"


def read_text(path: Path) -> str:
    return read_text_file(path, MAX_BYTES, "recipe")


def load_recipe(path: str | os.PathLike) -> Recipe:
    p = find_recipe(path)
    return parse_recipe(read_text(p), str(p))


def parse_recipe_checked(text: str, file: str | None, force_schema: bool = False) -> bool:
    """Whether the text parses and passes the schema (the build-time record, surgery/prechecked.py)."""
    try:
        parse_recipe(text, file, force_schema=force_schema)
    except SurgeryError:
        return False
    return True


def parse_recipe(text: str, file: str | None = "<recipe>", force_schema: bool = False) -> Recipe:

    loaded = load_yaml_text(text, file)
    data = loaded.data
    if not isinstance(data, dict):
        raise fail("SRG102", f"a recipe is a mapping, got {type(data).__name__}", loaded.location(()))
    # a shipped recipe, byte for byte, was schema-checked when the package was built: no jsonschema import
    prechecked = not force_schema and already_checked(text)
    errors = [] if prechecked else Validator(load_schema("recipe.schema.json")).errors(data)
    if errors:
        raise SurgeryError([diag(e.code, e.message, loaded.location(e.path), e.hint) for e in _dedupe(errors)])
    if data["version"] > SUPPORTED_VERSION:
        raise fail("SRG123", f"recipe version {data['version']} is newer than this release (reads {SUPPORTED_VERSION})",
                   loaded.location(("version",)))
    problems: list[Diagnostic] = []
    requires = [_requirement(loaded, i, item, problems) for i, item in enumerate(data.get("requires", []))]
    maps = {name: _layer_map(loaded, name, spec, problems) for name, spec in data.get("layer_maps", {}).items()}
    sets = {name: _layer_set(loaded, name, spec, problems) for name, spec in data.get("layer_sets", {}).items()}
    ops = [_op(loaded, i, item, maps, problems, sets) for i, item in enumerate(data["ops"])]
    if data.get("guard") is not None:  # the guard's settings load for a recipe that carries a `guard:` block only
        from .guard.precedence import check_recipe_guard

        problems += check_recipe_guard(data["guard"], lambda path: loaded.location(("guard",) + tuple(path)))
    if problems:
        raise SurgeryError(problems)
    return Recipe(data["recipe"], int(data["version"]), data["summary"], data["applies_to"], requires, maps, ops,
                  data.get("engine", {}), loaded, sets, data.get("guard"))


def _dedupe(errors):
    seen, out = set(), []
    for e in errors:
        key = (e.code, e.path, e.message)
        if key not in seen:
            seen.add(key)
            out.append(e)
    return out


def _expression(loaded: Loaded, path: tuple, text: str, problems: list[Diagnostic]) -> expr_lang.Expr | None:
    try:
        parsed = expr_lang.parse(text)
    except expr_lang.ExprError as exc:
        shift = exc.column + loaded.text_offsets.get(path, 0)
        problems.append(diag(exc.code, f"{exc.message} in `{text[:80]}`", _col_shift(loaded.location(path), shift)))
        return None
    for name, col in parsed.names:
        if name in RUNTIME_NAMES:
            continue
        side, _, fact = name.partition(".")
        if side in ("draft", "target") and fact in FACT_NAMES:
            continue
        if side in ("draft", "target"):
            hint = f"model facts: {', '.join(FACT_NAMES)}"
        else:
            hint = f"runtime facts: {', '.join(RUNTIME_NAMES)}; model facts are draft.X / target.X"
        problems.append(diag("SRG111", f"unknown name {name!r} in `{text[:80]}`",
                             _col_shift(loaded.location(path), col + loaded.text_offsets.get(path, 0)), hint))
    return parsed


def _col_shift(loc: Location, col: int) -> Location:
    if loc.col is None:
        return loc
    return Location(loc.file, loc.line, loc.col + col, loc.key_path)


def _requirement(loaded, i, item, problems) -> Requirement | None:
    path = ("requires", i)
    that = _expression(loaded, path + ("that",), item["that"], problems)
    when = _expression(loaded, path + ("when",), item["when"], problems) if "when" in item else None
    return Requirement(that, item["because"], item.get("code", "SRG301"), item.get("severity", "error"), when, path)


def _layer_map(loaded, name, spec, problems) -> LayerMapSpec:
    path = ("layer_maps", name)
    rule = spec["rule"]
    pairs = None
    if rule == "explicit":
        if "pairs" not in spec:
            problems.append(diag("SRG103", f"layer map {name!r} with rule `explicit` needs `pairs`", loaded.location(path)))
        else:
            pairs = {int(k): int(v) for k, v in spec["pairs"].items()}  # 13.0 is an integer in JSON Schema
    elif "pairs" in spec:
        problems.append(diag("SRG122", f"`pairs` only belongs to rule `explicit` (map {name!r} uses {rule!r})",
                             loaded.location(path + ("pairs",))))
    if "offset" in spec and rule != "same_index":
        problems.append(diag("SRG122", f"`offset` only belongs to rule `same_index` (map {name!r} uses {rule!r})",
                             loaded.location(path + ("offset",))))
    return LayerMapSpec(name, rule, int(spec.get("offset", 0)), pairs, tuple(spec.get("must_match", ())), path)


def _layer_set(loaded, name, spec, problems) -> LayerSetSpec:
    path = ("layer_sets", name)

    def ex(key):
        if key not in spec:
            return None
        return _expression(loaded, path + (key,), str(spec[key]), problems)

    has_range, has_values = "start" in spec or "count" in spec, "values" in spec
    if has_range == has_values or (has_range and not ("start" in spec and "count" in spec)):
        problems.append(diag("SRG103", f"layer set {name!r} needs either `start` and `count`, or `values`",
                             loaded.location(path)))
    if "default" in spec and not has_values:
        problems.append(diag("SRG122", f"`default` only belongs to a `values` layer set (set {name!r})",
                             loaded.location(path + ("default",))))
    if "offset" in spec and not has_values:
        problems.append(diag("SRG122", f"`offset` only belongs to a `values` layer set (set {name!r})",
                             loaded.location(path + ("offset",))))
    default = tuple(e for j, item in enumerate(spec.get("default", ()))
                    if (e := _expression(loaded, path + ("default", j), str(item), problems)) is not None)
    return LayerSetSpec(name, spec.get("side", "target"), ex("start"), ex("count"), ex("values"), default,
                        ex("min"), ex("max"), spec.get("because"), path, ex("expect_count"),
                        ex("when"), ex("offset"))


def _op(loaded, i, item, maps, problems, sets=None) -> OpSpec:
    kind, raw = next(iter(item.items()))
    path = ("ops", i, kind)
    step = UNITS[kind].step_class.from_recipe(raw)  # the schema check passed `raw`: it has the class's shape
    when = _expression(loaded, path + ("when",), step.when, problems) if step.when is not None else None
    if step.otherwise is not None and step.when is None:
        problems.append(diag("SRG107", "`otherwise` needs a `when` condition", loaded.location(path + ("otherwise",))))
    layer_map = getattr(step, "map", None)
    if layer_map is not None and layer_map not in maps:
        known = ", ".join(maps) or "none defined"
        problems.append(diag("SRG120", f"operation {kind} refers to layer map {layer_map!r}",
                             loaded.location(path + ("map",)), f"known maps: {known}"))
    layer_set = getattr(step, "layers", None)
    if layer_set is not None and layer_set not in (sets or {}):
        known = ", ".join(sets or {}) or "none defined"
        problems.append(diag("SRG124", f"operation {kind} refers to layer set {layer_set!r}",
                             loaded.location(path + ("layers",)), f"known layer sets: {known}"))
    cond = Condition(when, step.otherwise or "skip", step.because, step.code, path)
    return OpSpec(i, kind, step, cond, path)
