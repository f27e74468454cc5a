"""Oracle: our coded schema check (`surgery.text.schemacheck.Validator`, jsonschema errors mapped to
SRG codes and located) vs the plain `jsonschema.Draft202012Validator`, on
schemas/recipe.schema.json: same verdict (valid / invalid) on every shipped recipe and on
hypothesis-generated mutations of the shipped recipe."""
from __future__ import annotations

import copy
import json

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from oracle_helpers import REPO, SCHEMA_FILE
from surgery.text.schemacheck import SUPPORTED, Validator

jsonschema = pytest.importorskip("jsonschema")

SCHEMA = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
OURS = Validator(SCHEMA)
THEIRS = jsonschema.Draft202012Validator(SCHEMA)
RECIPES = sorted((REPO / "recipes").glob("*.yaml"))

# how each keyword holds subschemas (all others hold plain data: enum, const, examples, ...)
_SUB_MAP = {"properties", "$defs", "patternProperties", "dependentSchemas", "definitions"}
_SUB_ONE = {"items", "additionalProperties", "propertyNames", "not", "contains", "if", "then", "else",
            "unevaluatedProperties", "unevaluatedItems", "additionalItems", "contentSchema"}
_SUB_LIST = {"oneOf", "anyOf", "allOf", "prefixItems"}


def _walk_schema(node, found: set, strings: set, names: set) -> None:
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        found.add(key)
        if key in _SUB_MAP:
            if key == "properties":
                names.update(value)
            for sub in value.values():
                _walk_schema(sub, found, strings, names)
        elif key in _SUB_ONE:
            _walk_schema(value, found, strings, names)
        elif key in _SUB_LIST:
            for sub in value:
                _walk_schema(sub, found, strings, names)
        elif key in ("enum", "examples"):
            strings.update(v for v in value if isinstance(v, str))


KEYWORDS: set = set()
SCHEMA_STRINGS: set = set()
PROPERTY_NAMES: set = set()
_walk_schema(SCHEMA, KEYWORDS, SCHEMA_STRINGS, PROPERTY_NAMES)


def _stringify_keys(obj):
    if isinstance(obj, dict):
        return {str(k): _stringify_keys(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_stringify_keys(v) for v in obj]
    return obj


def load(path):
    return _stringify_keys(yaml.safe_load(path.read_text(encoding="utf-8")))


def verdicts(doc) -> tuple[bool, bool]:
    return not OURS.errors(doc), THEIRS.is_valid(doc)


def test_schema_is_valid_2020_12():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA.get("$schema") == "https://json-schema.org/draft/2020-12/schema"


def test_schema_uses_only_supported_keywords():
    assert KEYWORDS - SUPPORTED == set()


@pytest.mark.parametrize("path", RECIPES, ids=[p.name for p in RECIPES])
def test_shipped_recipes_valid_under_both(path):
    doc = load(path)
    assert OURS.errors(doc) == []
    assert list(THEIRS.iter_errors(doc)) == []


# ------------------------------------------------------------------------------ mutations
BASE = load(REPO / "recipes" / "gemma4-mtp.yaml")

SCALARS = st.one_of(
    st.sampled_from([None, True, False, 0, 1, -1, 2, 13, 4095, 4096, 5000, -4097, 10 ** 20,
                     0.5, -2.5, 1e300]),
    st.sampled_from(["", "x", "X" * 600, "SRG311", "SRG3", "SRG999", "SRG3111", "pp_size == 1", "Gemma4",
                     "gemma4-mtp", "-bad", "kv_source", "_k_scale", "9abc", "a\n"]),
    st.sampled_from(sorted(SCHEMA_STRINGS)),
    st.integers(-10, 5000),
    st.text(max_size=8),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.sampled_from(sorted(PROPERTY_NAMES) + ["0", "3", "01", "x"]), inner,
                                            max_size=3)),
    max_leaves=6,
)
NEW_KEYS = st.one_of(st.sampled_from(sorted(PROPERTY_NAMES)),
                     st.sampled_from(["zzz", "Recipe", "0", "3", "9", "01", "10000", "bad-name", "_x", ""]))


def _nodes(obj, path=()):
    yield path, obj
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _nodes(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _nodes(v, path + (i,))


def _parent(doc, path):
    node = doc
    for p in path[:-1]:
        node = node[p]
    return node


@st.composite
def mutated(draw):
    doc = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 3))):
        nodes = list(_nodes(doc))
        kind = draw(st.sampled_from(["drop", "add", "replace", "replace_enum", "wrong_int", "list", "merge_ops"]))
        if kind == "drop":
            dicts = [(p, n) for p, n in nodes if isinstance(n, dict) and n]
            path, node = draw(st.sampled_from(dicts))
            del node[draw(st.sampled_from(sorted(node)))]
        elif kind == "add":
            dicts = [(p, n) for p, n in nodes if isinstance(n, dict)]
            path, node = draw(st.sampled_from(dicts))
            node[draw(NEW_KEYS)] = draw(VALUES)
        elif kind in ("replace", "replace_enum", "wrong_int"):
            paths = [p for p, _ in nodes if p]
            if kind == "replace_enum":
                paths = [p for p, n in nodes if p and isinstance(n, str)] or paths
                value = draw(st.one_of(st.sampled_from(sorted(SCHEMA_STRINGS)), st.text(max_size=4)))
            elif kind == "wrong_int":
                paths = [p for p, n in nodes if p and isinstance(n, (int, float, bool))] or paths
                value = draw(st.one_of(st.integers(-5000, 5000), st.booleans(),
                                       st.sampled_from([0.5, -0.5, 4095.5, "1", 10 ** 20])))
            else:
                value = draw(VALUES)
            path = draw(st.sampled_from(paths))
            _parent(doc, path)[path[-1]] = value
        elif kind == "list":
            lists = [(p, n) for p, n in nodes if isinstance(n, list)]
            path, node = draw(st.sampled_from(lists))
            action = draw(st.sampled_from(["del", "dup", "append", "clear"]))
            if action == "del" and node:
                del node[draw(st.integers(0, len(node) - 1))]
            elif action == "dup" and node:
                node.append(copy.deepcopy(node[draw(st.integers(0, len(node) - 1))]))
            elif action == "append":
                node.append(draw(VALUES))
            else:
                node.clear()
        else:  # merge two ops into one item (maxProperties 1), or empty one (minProperties 1)
            ops = doc.get("ops")
            if isinstance(ops, list) and len(ops) >= 2 and all(isinstance(o, dict) for o in ops):
                i = draw(st.integers(0, len(ops) - 2))
                if draw(st.booleans()):
                    ops[i] = {**ops[i], **ops[i + 1]}
                else:
                    ops[i] = {}
    return doc


@settings(max_examples=400, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(mutated())
def test_mutations_same_verdict(doc):
    """Mutations draw no integral floats (1.0): that known difference has its own test below."""
    _same_verdict(doc)


def _same_verdict(doc):
    ours, theirs = verdicts(doc)
    assert ours == theirs, (
        f"ours: {'valid' if ours else 'invalid'} {[(e.path, e.message) for e in OURS.errors(doc)][:3]}; "
        f"jsonschema: {'valid' if theirs else 'invalid'} "
        f"{[(list(e.absolute_path), e.message) for e in THEIRS.iter_errors(doc)][:3]}")


@pytest.mark.parametrize("doc", [
    {**BASE, "version": 1.0},
    {**BASE, "layer_maps": {"kv_source": {"rule": "same_index", "offset": 0.0}}},
    {**BASE, "layer_maps": {"kv_source": {"rule": "explicit", "pairs": {"0": 13.0}}}},
], ids=["version", "offset", "pairs"])
def test_integral_float_is_integer(doc):
    """JSON Schema 2020-12: "integer" matches any number with a zero fractional part, so
    jsonschema accepts `version: 1.0` (YAML loads it as a float)."""
    _same_verdict(doc)


def test_mutations_hit_both_verdicts():
    """The generator is not degenerate: it yields valid and invalid documents."""
    seen = set()

    @settings(max_examples=100, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(mutated())
    def probe(doc):
        seen.add(THEIRS.is_valid(doc))

    probe()
    assert seen == {True, False}
