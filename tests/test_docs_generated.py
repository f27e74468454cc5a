"""Docs that cannot drift: docs/cli.md and docs/recipe-reference.md are exactly what
tools/gen_docs.py produces from the argument parser and the recipe schema; and the schema carries,
on every property (recursively, $defs included), the description and examples that editors show on
hover and that the reference is made of.

(tests/test_recipe_library.py has the looser check that lets a `$ref` property borrow its target's
description; tests/test_schema_oracle.py checks every shipped recipe with plain jsonschema.)"""
from __future__ import annotations

import difflib
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "schemas" / "recipe.schema.json").read_text(encoding="utf-8"))
REGENERATE = "python tools/gen_docs.py"


def _gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "tools" / "gen_docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


GEN = _gen_docs()


def _compare(path: Path, expected: str) -> None:
    assert path.exists(), f"{path.relative_to(ROOT)} is missing; run `{REGENERATE}`"
    current = path.read_text(encoding="utf-8")
    if current != expected:
        diff = "".join(list(difflib.unified_diff(current.splitlines(True), expected.splitlines(True),
                                                 f"{path.name} (committed)", f"{path.name} (generated)"))[:60])
        pytest.fail(f"{path.relative_to(ROOT)} differs from what the generator produces; run `{REGENERATE}`"
                    f"\n{diff}")


def test_cli_md_is_generated():
    committed = GEN.CLI_MD.read_text(encoding="utf-8") if GEN.CLI_MD.exists() else ""
    if f"argparse of Python {GEN.python_version()})" not in committed and "argparse of Python" in committed:
        pytest.skip("docs/cli.md was generated with another Python minor version (argparse layout differs)")
    _compare(GEN.CLI_MD, GEN.cli_markdown())


def test_architecture_md_layer_table_is_generated():
    """The layer table of docs/architecture.md is what surgery/data/layers.yaml says (issue 43)."""
    _compare(GEN.ARCHITECTURE_MD, GEN.architecture_markdown())


def test_the_layer_table_shows_every_module_in_its_layer():
    lm = GEN._layermap()
    rows = {line.split(" | ")[0].lstrip("| "): line for line in GEN.layers_markdown().splitlines()
            if line.startswith("| ") and line[2].isdigit()}
    for rel, entry in lm.placement().items():
        folder, _, name = rel.rpartition("/")
        row = rows[f"{entry['layer']} {entry['name']}"]
        shown = f"`{name}`" if not folder else f"`{folder}/`: "
        assert shown in row and name.removesuffix(".py") in row, (rel, row)
    assert len(lm.placement()) == len(lm.package_files())


def test_recipe_schema_op_part_is_generated():
    """schemas/recipe.schema.json, byte for byte: its op part from the step classes (surgery/ops/schema.py)."""
    _compare(GEN.SCHEMA, GEN.generated()[GEN.SCHEMA])


def test_recipe_reference_is_generated():
    """Schema keys plus the op table generated from the op registry (surgery/ops/)."""
    _compare(GEN.REFERENCE_MD, GEN.generated()[GEN.REFERENCE_MD])


def test_op_table_says_which_engine_performs_which_op():
    from surgery.engine.cards import ENGINES
    from surgery.ops.registry import UNITS, implemented

    table = GEN.operations_markdown()
    for kind, unit in UNITS.items():
        row = next(line for line in table.splitlines() if line.startswith(f"| `{kind}`"))
        cells = row.rstrip(" |").split(" | ")[-len(ENGINES):]
        for engine, cell in zip(ENGINES, cells):
            reason = unit.refusal(engine)
            assert cell == ("performs" if reason is None else f"refuses: {reason}"), (kind, engine, cell)
            assert (reason is None) == implemented(engine, kind)


def test_recipes_md_coverage_table_is_generated():
    _compare(GEN.RECIPES_MD, GEN.recipes_markdown())


def test_cli_md_covers_every_command_and_option():
    from surgery.cli import build_parser

    text = GEN.cli_markdown()
    for name, _, sub in GEN._subcommands(build_parser()):
        assert f"## `surgery {name}`" in text
        for action in sub._actions:
            for opt in action.option_strings:
                assert opt in text, (name, opt)
        assert "example" in (sub.epilog or ""), f"`surgery {name} --help` shows no example"
        assert "exit codes:" in (sub.epilog or ""), f"`surgery {name} --help` documents no exit codes"


def _properties(node, path=""):
    """Every property schema: entries of `properties` (recursively through items /
    additionalProperties / nested properties) and every $defs entry."""
    if not isinstance(node, dict):
        return
    for key, sub in node.get("properties", {}).items():
        yield f"{path}.{key}", sub
        yield from _properties(sub, f"{path}.{key}")
    for key, sub in node.get("$defs", {}).items():
        yield f"$defs.{key}", sub
        yield from _properties(sub, f"$defs.{key}")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            yield from _properties(node[key], f"{path}[{key}]")


PROPERTIES = list(_properties(SCHEMA))


def test_schema_walk_sees_the_whole_schema():
    paths = {p for p, _ in PROPERTIES}
    assert {".recipe", ".applies_to.target", "$defs.op", "$defs.layer_map", "$defs.expression"} <= paths
    assert len(PROPERTIES) > 80


def test_every_schema_property_has_its_own_description_and_examples():
    missing = [p for p, sub in PROPERTIES
               if not (isinstance(sub.get("description"), str) and sub["description"].strip()
                       and isinstance(sub.get("examples"), list) and sub["examples"])]
    assert missing == [], f"add `description` and `examples` to these schema properties: {missing}"


@pytest.mark.parametrize("path,sub", PROPERTIES, ids=[p for p, _ in PROPERTIES])
def test_schema_examples_are_valid_values(path, sub):
    jsonschema = pytest.importorskip("jsonschema")
    check = {k: v for k, v in sub.items() if k != "examples"}
    check["$defs"] = SCHEMA["$defs"]
    validator = jsonschema.Draft202012Validator(check)
    bad = [ex for ex in sub.get("examples", ()) if not validator.is_valid(ex)]
    assert bad == [], f"{path}: examples not valid under the property's own schema"


def test_reference_lists_every_property_with_description_and_example():
    text = GEN.reference_markdown()
    for path, sub in PROPERTIES:
        if path.startswith("$defs"):
            continue
        assert sub["description"] in text, path
    assert text.count("- example:") >= len([p for p, _ in PROPERTIES if not p.startswith("$defs")])
    for value in ("clone_keep_registration", "last_unshared_of_type", "share_if_identical"):
        assert f'`"{value}"`' in text


def test_check_mode_reports_stale_files(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "cli.md"
    stale.write_text("old\n", encoding="utf-8")
    monkeypatch.setattr(GEN, "ROOT", tmp_path)
    monkeypatch.setattr(GEN, "generated", lambda: {stale: "new\n"})
    assert GEN.main(["--check"]) == 1
    assert REGENERATE in capsys.readouterr().err
    assert stale.read_text(encoding="utf-8") == "old\n"


def test_prechecked_recipe_record_is_generated():
    """surgery/data/prechecked_recipes.json: the schema check run over the shipped recipes now."""
    _compare(GEN.PRECHECKED, GEN.generated()[GEN.PRECHECKED])
