"""`surgery recipes` reads as a table (issue 53): by default one bounded row per recipe with its counts and
the coverage figures; every model type and architecture under `--verbose` and `surgery recipes NAME`; an
unknown NAME is the usage error SRG013 with the closest name; `--json` as before."""
from __future__ import annotations

import json
import re

import pytest

from surgery.commands.recipes import WIDTH
from surgery.engine.coverage import method_coverage, summary
from surgery.recipe import load_recipe
from surgery.resources import shipped_recipes

RECIPES = [load_recipe(p) for p in shipped_recipes()]
LISTS = {"target_model_types": ("target", "model_type"), "target_architectures": ("target", "architectures"),
         "draft_model_types": ("draft", "model_type"), "draft_architectures": ("draft", "architectures")}


def listed(recipe, key: str) -> list[str]:
    side, field = LISTS[key]
    return list(recipe.applies_to[side].get(field) or [])


def words(text: str) -> set[str]:
    return set(re.split(r"[\s,:()]+", text))


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def default_text():
    import contextlib
    import io

    from surgery.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["recipes"]) == 0
    return out.getvalue()


def test_default_is_bounded(default_text):
    lines = default_text.splitlines()
    assert max(len(line) for line in lines) <= WIDTH
    assert len(lines) <= 2 * len(RECIPES) + 20, len(lines)
    # the long lists stay out of it: the eagle3 recipe's 86 target architectures are not printed
    assert not words(default_text) & set(listed(load_recipe("eagle3"), "target_architectures"))


def test_default_has_one_row_per_recipe_with_its_counts(default_text):
    rows = {line.split()[0]: line for line in default_text.splitlines() if line and line.split()[0] in
            {r.name for r in RECIPES}}
    assert set(rows) == {r.name for r in RECIPES}
    for r in RECIPES:
        counts = [int(n) for n in rows[r.name].split()[1:5]]
        assert counts == [len(listed(r, k)) for k in LISTS], (r.name, rows[r.name])
        shown = rows[r.name].split(None, 5)[5]
        assert r.summary.startswith(shown.removesuffix("...")), (r.name, shown)
    assert "surgery recipes NAME" in flat(default_text) and "--verbose" in default_text


def test_default_keeps_the_coverage_figures(default_text):
    cov, methods = summary(RECIPES), method_coverage(RECIPES)
    text = flat(default_text)
    assert f"{cov['covered']} of {cov['rewritten']} covered ({cov['percent']}%)" in text
    assert f"{methods['covered']} of {methods['total']} covered" in text
    uncovered = [u["value"] for u in cov["unsupported"]]
    uncovered += [a["architecture"] for a in methods["block_draft_architectures"] + methods["draft_architectures"]
                  if not a["covered_by"]]
    uncovered += [m["method"] for m in methods["methods"] if not m["covered_by"]]
    assert uncovered and all(name in words(default_text) for name in uncovered), uncovered


def test_verbose_has_every_list_and_every_reason(run_cli):
    rc, out, _ = run_cli("recipes", "--verbose")
    assert rc == 0
    for r in RECIPES:
        assert f"{r.name}:" in out and flat(r.summary) in flat(out)
        for key in LISTS:
            assert set(listed(r, key)) <= words(out), (r.name, key)
    cov, methods = summary(RECIPES), method_coverage(RECIPES)
    for u in cov["unsupported"]:
        assert f"{u['value']}: {u['unsupported']}" in out
    for a in methods["block_draft_architectures"]:
        assert f"  {a['architecture']} ({a['module']}): " in out


@pytest.mark.parametrize("name", [r.name for r in RECIPES])
def test_one_recipe_in_full(run_cli, name):
    rc, out, _ = run_cli("recipes", name)
    assert rc == 0
    recipe = load_recipe(name)
    assert out.startswith(f"{name}: ") and flat(recipe.summary) in flat(out)
    for key, (side, field) in LISTS.items():
        values = listed(recipe, key)
        assert f"{side} {'model types' if field == 'model_type' else 'architectures'} ({len(values)})" in out
        assert set(values) <= words(out), key
    others = {r.name for r in RECIPES} - {name}
    assert not [line for line in out.splitlines() if line.split(":")[0] in others]  # that recipe only
    rc, out, _ = run_cli("recipes", name, "--json")
    _, everything, _ = run_cli("recipes", "--json")
    assert json.loads(out) == next(r for r in json.loads(everything)["recipes"] if r["name"] == name)


def test_an_unknown_name_is_a_usage_error_with_the_closest_name(run_cli):
    rc, out, err = run_cli("recipes", "eagle_3")
    assert rc == 2 and out == ""
    assert "error SRG013" in err and "did you mean eagle3?" in err
    rc, out, _ = run_cli("recipes", "nothing-like-it", "--json")
    found = json.loads(out)
    assert rc == 2 and found["ok"] is False and found["diagnostics"][0]["code"] == "SRG013"


def test_json_is_the_whole_record(run_cli):
    rc, out, _ = run_cli("recipes", "--json")
    data = json.loads(out)
    assert rc == 0 and set(data) == {"recipes", "coverage", "unsupported", "eagle3_architectures_without_model_type",
                                     "method_coverage"}
    for row, r in zip(data["recipes"], RECIPES):
        assert row["name"] == r.name and row["summary"] == r.summary
        assert row["covers"] == {k: listed(r, k) for k in LISTS}
    assert data["method_coverage"] == method_coverage(RECIPES)
