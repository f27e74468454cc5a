"""Each op owns its whole shape (issue 43): a typed step class per op kind (surgery/ops/<kind>/__init__.py)
is what a recipe step is read into, the recipe schema's op part is generated from those classes
(surgery/ops/schema.py), and the kind's plan-time checks are hooks of its unit, called by the resolver."""
from __future__ import annotations

import copy
import dataclasses
import difflib
import json
from pathlib import Path
from typing import Literal

import pytest
import yaml

from testpaths import E2B, E2B_ASSISTANT, GEMMA_RECIPE
from surgery import Runtime, facts_from_config, load_recipe, parse_recipe, resolve
from surgery.facts import read_config
from surgery.ops.base import Args, Step, arg, key_of, typed_fields
from surgery.ops.registry import UNITS, register
from surgery.text.records import record
from surgery.ops.schema import field_problems, op_schema, type_schema
from surgery.resources import shipped_recipes

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_FILE = ROOT / "schemas" / "recipe.schema.json"
REGENERATE = "python tools/gen_docs.py"


def test_the_committed_schema_op_part_is_generated_from_the_step_classes():
    """The committed `$defs.op` (what users and editors read) is exactly what the step classes generate."""
    committed = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))["$defs"]["op"]
    generated = op_schema()
    if committed != generated:
        diff = difflib.unified_diff(json.dumps(committed, indent=2).splitlines(),
                                    json.dumps(generated, indent=2).splitlines(), "committed", "generated", lineterm="")
        pytest.fail(f"schemas/recipe.schema.json $defs.op differs from the step classes; run `{REGENERATE}`\n"
                    + "\n".join(list(diff)[:60]))
    assert list(generated["properties"]) == list(UNITS)  # one op key per registered kind, in registry order


@pytest.mark.parametrize("kind", sorted(UNITS))
def test_every_step_field_has_a_description_and_examples(kind):
    assert field_problems(UNITS[kind].step_class) == []


def test_the_field_check_finds_a_field_without_description():
    @record
    class Bare(Step):
        HELP = "a made-up op"
        EXAMPLES = [{"x": "y"}]

        x: str = dataclasses.field(default="y")
        y: str = arg("", ["z"], default="z")

    assert field_problems(Bare) == ["Bare.x: no help (give it with surgery.ops.base.arg)",
                                    "Bare.x: no examples (give it with surgery.ops.base.arg)",
                                    "Bare.y: no help (give it with surgery.ops.base.arg)"]


def test_the_type_gives_the_json_type():
    assert type_schema(Literal["a", "b"] | None) == {"type": "string", "enum": ["a", "b"]}
    assert type_schema(tuple[str, ...]) == {"type": "array", "items": {"type": "string"}}
    assert type_schema(bool | None) == {"type": "boolean"}
    with pytest.raises(TypeError):
        type_schema(dict)


def test_every_step_has_the_common_fields_once():
    """when / otherwise / because / code are the base class's (surgery/ops/base.Step), last in each op's schema."""
    common = [f.name for f, _ in typed_fields(Step)]
    assert common == ["when", "otherwise", "because", "code"]
    for kind, unit in UNITS.items():
        props = list(op_schema()["properties"][kind]["properties"])
        assert props[-4:] == common, kind


def _typed_value(value):
    if isinstance(value, Args):
        return {key_of(f): _typed_value(getattr(value, f.name)) for f, _ in typed_fields(type(value))
                if getattr(value, f.name) is not None}
    return [_typed_value(v) for v in value] if isinstance(value, tuple) else value


@pytest.mark.parametrize("path", shipped_recipes(), ids=lambda p: p.stem)
def test_every_shipped_step_is_read_into_its_kinds_step_class(path):
    """Parsing builds the typed step; every key the recipe gave is an attribute with the same value
    (`from` is `source`; lists are tuples; copy_attrs' rules are CopyRule objects); nothing else is set
    but the class defaults."""
    raw_ops = yaml.safe_load(path.read_text(encoding="utf-8"))["ops"]
    recipe = load_recipe(path)
    for raw, op in zip(raw_ops, recipe.ops):
        ((kind, given),) = raw.items()
        assert op.kind == kind and type(op.args) is UNITS[kind].step_class
        typed = _typed_value(op.args)
        assert {k: typed[k] for k in given} == given
        defaults = {key_of(f): f.default for f, _ in typed_fields(type(op.args)) if key_of(f) not in given}
        assert {k: v for k, v in typed.items() if k not in given} == {k: v for k, v in defaults.items() if v is not None}


def test_a_field_keeps_its_recipe_key_where_python_cannot_name_it():
    recipe = load_recipe(GEMMA_RECIPE)
    (step,) = [op for op in recipe.ops if op.kind == "share_module"]
    assert step.args.source == "target" and "from" in op_schema()["properties"]["share_module"]["properties"]


def test_registration_refuses_a_unit_without_a_step_class():
    unit = dataclasses.replace(UNITS["share_kv"], kind="no_step", step_class=dict,
                               spec=type("S", (), {"kind": "no_step"}))
    with pytest.raises(ValueError, match="step class"):
        register(unit)
    assert "no_step" not in UNITS


# ------------------------------------------------------------------------------ plan-time hooks

def _plan(recipe_text: str, draft_cfg=None, **runtime):
    t, d = read_config(E2B)[0], read_config(E2B_ASSISTANT)[0]
    return resolve(parse_recipe(recipe_text, "r.yaml"), facts_from_config(draft_cfg or d, "draft.json"),
                   facts_from_config(t, "target.json"), Runtime(**runtime))


def test_the_kv_map_checks_live_in_share_kv_not_in_the_resolver():
    resolver = (ROOT / "surgery" / "resolver.py").read_text(encoding="utf-8")
    for gone in ("SRG307", "SRG310", "check_kv_map", "check_fits", "SRG362"):
        assert gone not in resolver, gone
    assert UNITS["share_kv"].check_recipe is not None and UNITS["share_module"].check is not None


def test_share_kv_checks_its_maps_before_any_step_and_whatever_its_when():
    """OpUnit.check_recipe runs over every share_kv step, taken or not, before any step expands: a
    share_kv step listed last, whose `when` is false, still has its map into the KV-shared tail said
    (SRG307), and before the SRG314 of the earlier share_module step (OpUnit.check, at expansion)."""
    text = GEMMA_RECIPE.read_text(encoding="utf-8")
    text = text.replace("rule: last_unshared_of_type\n    must_match: [head_dim, num_kv_heads, sliding_window, layer_type]",
                        "rule: explicit\n    pairs: {0: 13, 1: 13, 2: 20, 3: 14}")
    text = text.replace("  - share_kv: {map: kv_source}\n", "")
    text = text.replace("\nengine:\n", "  - share_kv: {map: kv_source, when: pp_size == 3, otherwise: skip}\n\nengine:\n")
    d = copy.deepcopy(read_config(E2B_ASSISTANT)[0])
    d["backbone_hidden_size"] = 2048
    plan = _plan(text, draft_cfg=d)
    order = [x.code for x in plan.diagnostics if x.message.startswith(("map kv_source", "cannot share"))]
    assert order == ["SRG307", "SRG314"]  # (the recipe's own `requires:` SRG314 comes earlier still)
    assert not plan.ops("share_module") and not plan.ops("share_kv")  # check False / when false: nothing expands
