"""A recipe's own `guard:` block and the one precedence of the guard's settings (surgery/guard/precedence.py `resolve`),
at the settings level in each engine: no model is run.

- the block is refused at load (schema and guard rules alike) with SRG475, the recipe file, line and key path;
- `resolve`: defaults < built-in pair's expect < recipe < engine, top-level key by key, each value whole
  (`expect` with its source, `canary`, `bands`), `false` / `true` as {enabled: ...}; a bad value is located at the layer that wrote it;
- vLLM (`guard_setting` / `build`, the selected recipe under additional_config.surgery.guard), HF
  (`hf.guard.settings`: pair, recipe, SURGERY_GUARD) and SGLang (`sglang.guard.settings` / `configure`:
  recipe, SURGERY_GUARD) each merge in that order;
- `surgery validate --verbose` shows the block in one SRG480 note line."""
from __future__ import annotations

import contextlib
import io
import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from surgery.text.diagnostics import SurgeryError
from surgery.guard.keys import KEYS, NUMBERS
from surgery.guard.precedence import (PRECEDENCE, Layer, engine_layer, env_layer, pair_layer, recipe_layer, resolve,
    ENV_GUARD)
from surgery.recipe import load_recipe, parse_recipe
from surgery.resources import load_schema, recipes_dir

BASE = (recipes_dir() / "eagle3.yaml").read_text(encoding="utf-8")
SOURCE = {"kind": "model_card", "reference": "the head's card"}
GUARD = {"floor": 0.15, "window": 400, "expect": {"mean_length": 2.8, "source": SOURCE}}


def recipe_text(guard) -> str:
    return BASE.rstrip("\n") + "\n" + yaml.safe_dump({"guard": guard}, sort_keys=False)


def write_recipe(tmp_path: Path, guard, name="team.yaml") -> Path:
    path = tmp_path / name
    path.write_text(recipe_text(guard), encoding="utf-8")
    return path


def refused(text: str, file="team.yaml"):
    with pytest.raises(SurgeryError) as exc:
        parse_recipe(text, file, force_schema=True)
    return exc.value.diagnostics


# ---- the block in the recipe --------------------------------------------------------------------------------

def test_a_valid_block_is_kept_as_written():
    recipe = parse_recipe(recipe_text(GUARD), "team.yaml", force_schema=True)
    assert recipe.guard == GUARD
    assert parse_recipe(recipe_text(False), "team.yaml", force_schema=True).guard is False
    assert parse_recipe(BASE, "eagle3.yaml").guard is None  # no shipped recipe carries one (no real figure yet)


@pytest.mark.parametrize("guard, key_path, says", [
    ({"flor": 0.15}, "guard.flor", "flor"),  # the schema (x-srg-code SRG475), with "did you mean"
    ({"floor": 3}, "guard.floor", ""),  # out of range: the schema's bound, as guard.py's
    ("on", "guard", ""),  # not a mapping or a bool
    ({"expect": {"per_position": [0.5, 0.8]}}, "guard.expect.per_position", "rises"),  # guard.py's own rule
    ({"window": 100}, "guard.window", "smaller than min_drafts"),  # over the defaults: no rule could be judged
    ({"expect": {"mean_length": 2.0, "source": {"kind": "rumour"}}}, "guard.expect.source", ""),
])
def test_a_bad_block_is_refused_with_code_file_and_key(guard, key_path, says):
    [d] = refused(recipe_text(guard))
    assert d.code == "SRG475" and d.severity == "error"
    assert d.location.file == "team.yaml" and d.location.line is not None and d.location.key_path.startswith(key_path)
    assert says in d.message + (d.hint or "")


def test_the_schema_lists_the_guards_keys_and_bounds():
    """One set of keys: the schema's `guard` properties are guard.py's KEYS, and every numeric bound agrees
    with guard.py's (the schema is what editors show; guard.py is what every engine checks)."""
    node = load_schema("recipe.schema.json")["properties"]["guard"]
    assert set(node["properties"]) == set(KEYS)
    for key, (kind, low, high, _) in NUMBERS.items():
        sub = node["properties"][key]
        assert sub["type"] == ("integer" if kind is int else "number"), key
        assert (sub.get("minimum"), sub.get("maximum")) == (low, high), key


# ---- the precedence -------------------------------------------------------------------------------------------

def _layer(kind, value):
    return Layer(kind, value, lambda path, kind=kind: f"{kind}:{'.'.join(map(str, path))}")


def test_precedence_key_by_key_with_whole_blocks():
    assert PRECEDENCE == ("defaults", "pair", "recipe", "engine")
    pair = _layer("pair", {"expect": {"per_position": [0.9, 0.8], "source": {"kind": "measured"}}})
    recipe = _layer("recipe", {"floor": 0.2, "action": "fail", "bands": [1, 4], "canary": {"tokens": 16}})
    engine = _layer("engine", {"action": "warn", "bands": [8], "canary": {"prompts": "builtin"}})
    merged = resolve(pair, recipe, engine)
    assert merged.raw == {"expect": pair.value["expect"], "floor": 0.2, "action": "warn", "bands": [8],
                          "canary": {"prompts": "builtin"}}  # the recipe's canary tokens do not survive
    assert {k: merged.origin[k].kind for k in merged.raw} == {"expect": "pair", "floor": "recipe", "action": "engine",
                                                             "bands": "engine", "canary": "engine"}
    # a higher layer's expect replaces the lower's with its source: no figure credited to another source
    mine = {"mean_length": 2.0, "source": {"kind": "user"}}
    assert resolve(pair, _layer("recipe", {"expect": mine})).raw["expect"] == mine
    assert resolve(pair, _layer("recipe", {"floor": 0.2})).config().source == {"kind": "measured"}
    # booleans are {enabled: ...}; an engine's false turns a recipe's guard off, true keeps its keys
    assert resolve(recipe, _layer("engine", False)).config().enabled is False
    assert resolve(_layer("recipe", False), _layer("engine", {"enabled": True})).config().enabled is True
    assert resolve(recipe, _layer("engine", True)).config().floor == 0.2
    assert resolve().raw is None and resolve().config().floor == 0.10  # the defaults (data/guard.yaml)


def test_a_bad_value_is_located_where_it_was_written(tmp_path):
    recipe = load_recipe(write_recipe(tmp_path, {"floor": 0.2, "expect": {"per_position": [0.9, 0.8, 0.7, 0.6]}}))
    # valid alone, too long for the engine's k: located in the recipe file, at its key
    merged = resolve(recipe_layer(recipe), engine_layer({"action": "fail"}))
    with pytest.raises(SurgeryError) as exc:
        merged.guard(merged.config(), 3, "eagle3")
    loc = exc.value.diagnostics[0].location
    assert loc.file.endswith("team.yaml") and loc.line and loc.key_path == "guard.expect.per_position"
    # a value that only the merge makes bad: the key's writer is named (the engine's min_drafts over the
    # recipe's window)
    merged = resolve(recipe_layer(load_recipe(write_recipe(tmp_path, {"window": 300}))),
                     env_layer({ENV_GUARD: json.dumps({"min_drafts": 400})}))
    with pytest.raises(SurgeryError) as exc:
        merged.config()
    d = exc.value.diagnostics[0]
    assert d.code == "SRG475" and d.location.key_path == "guard.window" and d.location.file.endswith("team.yaml")
    with pytest.raises(SurgeryError) as exc:
        resolve(recipe_layer(recipe), env_layer({ENV_GUARD: '{"floor": 7}'})).config()
    assert exc.value.diagnostics[0].location.key_path == f"{ENV_GUARD}.floor"
    with pytest.raises(SurgeryError) as exc:
        resolve(recipe_layer(recipe), engine_layer("on")).config()
    assert exc.value.diagnostics[0].location.key_path == "additional_config.surgery.guard"
    with pytest.raises(SurgeryError) as exc:
        resolve(pair_layer({"acceptance": 3}, "pairs.x.expect.hf")).config()
    assert exc.value.diagnostics[0].location.key_path == "pairs.x.expect.hf.acceptance"


# ---- each engine ----------------------------------------------------------------------------------------------

def vllm_config(recipe=None, guard=None, k=3):
    surgery = {"recipe": str(recipe)} if recipe else {}
    if guard is not None:
        surgery["guard"] = guard
    return SimpleNamespace(additional_config={"surgery": surgery},
                           speculative_config=SimpleNamespace(num_speculative_tokens=k, method="eagle3",
                                                              parallel_drafting=False))


def test_vllm_selected_recipe_under_additional_config(tmp_path, monkeypatch):
    from surgery.vllm import guard as vguard
    from surgery.vllm.guard import guard_setting

    monkeypatch.delenv("SURGERY_RECIPE", raising=False)
    path = write_recipe(tmp_path, GUARD)
    settings = guard_setting(vllm_config(path, {"window": 500, "action": "fail"}))
    assert settings.raw == {**GUARD, "window": 500, "action": "fail"}
    run = vguard.build(vllm_config(path, {"window": 500, "action": "fail"}))
    cfg = run.guard.config
    assert (cfg.floor, cfg.window, cfg.action, cfg.expectations) == (0.15, 500, "fail", {"mean_length": 2.8})
    assert cfg.source == SOURCE
    assert vguard.build(vllm_config(path)).guard.config.window == 400  # the recipe's, with no engine setting
    off = write_recipe(tmp_path, False, "off.yaml")
    assert vguard.build(vllm_config(off)).guard is None  # the recipe turns its guard off
    assert vguard.build(vllm_config(off, {"enabled": True})).guard is not None  # the engine wins
    assert vguard.build(vllm_config(None, {"enabled": True})).guard.config.floor == 0.10  # no recipe: defaults
    with pytest.raises(SurgeryError) as exc:  # the start-up check names the recipe's key
        vguard.build(vllm_config(write_recipe(tmp_path, {"expect": {"per_position": [0.9] * 4}}, "long.yaml")))
    assert exc.value.diagnostics[0].location.key_path == "guard.expect.per_position"


def test_hf_pair_then_recipe_then_environment(tmp_path):
    from surgery.guard.run import judge
    from surgery.hf import guard as hf_guard

    pair = hf_guard.pair_expectation("gemma4-mtp")["expect"]
    recipe = load_recipe(write_recipe(tmp_path, {"floor": 0.2, "action": "fail"}))
    assert hf_guard.settings("gemma4-mtp", recipe, environ={}).raw == {"expect": pair, "floor": 0.2, "action": "fail"}
    mine = write_recipe(tmp_path, GUARD, "mine.yaml")
    env = {ENV_GUARD: json.dumps({"action": "warn", "floor": 0.05})}
    raw = hf_guard.settings("gemma4-mtp", load_recipe(mine), environ=env).raw
    assert raw == {**GUARD, "action": "warn", "floor": 0.05}  # the recipe's expect replaced the pair's whole
    assert hf_guard.settings(None, load_recipe(mine), environ={}).raw == GUARD  # not the built-in pair
    # the check before any weight is read (hf_apply: a verdict on no drafts) names the recipe's key when the
    # recipe's expectation is too long for k
    long = load_recipe(write_recipe(tmp_path, {"expect": {"per_position": [0.9] * 4}}, "long.yaml"))
    with pytest.raises(SurgeryError) as exc:
        judge([], hf_guard.settings(None, long, environ={}), 3, "mtp")
    assert exc.value.diagnostics[0].location.key_path == "guard.expect.per_position"


def test_sglang_recipe_then_environment(tmp_path, caplog):
    from surgery.sglang import guard as sguard

    path = str(write_recipe(tmp_path, GUARD))
    env = {ENV_GUARD: json.dumps({"min_drafts": 50, "check_every": 25, "floor": 0.05})}
    assert sguard.settings(path, env).raw == {**GUARD, "min_drafts": 50, "check_every": 25, "floor": 0.05}
    try:
        with caplog.at_level(logging.INFO):
            sguard.install(path, environ=env)  # on: a recipe is selected (no SGLang here: SRG488, said)
            worker = SimpleNamespace(server_args=SimpleNamespace(speculative_num_steps=3),
                                     speculative_algorithm=SimpleNamespace(name="EAGLE3"))
            guard = sguard.configure(worker)
        cfg = guard.config
        assert (cfg.floor, cfg.window, cfg.min_drafts, cfg.expectations) == (0.05, 400, 50, {"mean_length": 2.8})
        off = str(write_recipe(tmp_path, False, "off.yaml"))
        sguard.install(off, environ={})
        assert sguard.configure(worker) is None
    finally:
        sguard.uninstall()


# ---- validate --------------------------------------------------------------------------------------------------

def test_validate_shows_the_recipes_guard_in_one_note(tmp_path):
    from surgery.cli import main
    from surgery.pairs import builtin_pair

    pair = builtin_pair("eagle3")
    path = write_recipe(tmp_path, {**GUARD, "action": "fail", "canary": True})
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert main(["validate", str(path), "--draft", str(pair.draft), "--target", str(pair.target),
                     "--verbose"]) == 0
    [line] = [x for x in err.getvalue().splitlines() if "SRG480" in x]
    assert line.startswith(f"{path}:") and " guard: note SRG480: recipe guard: " in line
    for said in ("floor 0.15", "window 400", "action fail", "expect mean_length 2.8 (model card (the head's card))",
                 "canary builtin x 48 tokens"):
        assert said in line, said
    bad, err = write_recipe(tmp_path, {"floor": 2}, "bad.yaml"), io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        assert main(["validate", str(bad), "--draft", str(pair.draft), "--target", str(pair.target)]) == 2
    assert f"{bad}:" in err.getvalue() and "guard.floor: error SRG475" in err.getvalue()
    assert "Traceback" not in err.getvalue()
