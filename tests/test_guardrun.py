"""The guard on a finished run (surgery/guard/run.py) and the HF run's settings (surgery/hf/guard.py), on
synthetic per-draft counts: no torch, no engine.

- a run under the support bound is "not judged" with its count (never "silent"), and SRG487 says why;
- a healthy run is silent, a collapsed one trips collapse and break-even once, on all its drafts;
- an expectation's `source` is kept out of guard.py's check and named in the SRG474 message;
- bad settings are SRG475 even on a short run; SURGERY_GUARD that is not a JSON mapping is SRG486;
- the settings merge: the built-in pair's expect.hf, then the recipe's guard, then SURGERY_GUARD (the precedence
  itself, per engine: tests/test_guard_recipe.py)."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from surgery.text.diagnostics import SurgeryError
from surgery.guard.precedence import ENV_GUARD, env_setting
from surgery.guard.run import judge, line, run_defaults
from surgery.hf import guard as hf_guard

HEALTHY = [(3, 3), (3, 2), (3, 1), (3, 3), (3, 0), (3, 2)] * 10  # p0 = 5/6
SOURCE = {"kind": "measured", "engine": "hf", "release": "5.19.0", "card": "CPU", "by": "bench/guard_hf.py"}


def test_support_bound_is_stated_not_a_pass():
    bound = run_defaults()["min_drafts"]
    v = judge([(3, 0)] * (bound - 1), None, 3, "mtp")
    assert v["status"] == "not judged" and v["trips"] == [] and v["drafts"] == bound - 1
    assert f"under the support bound min_drafts {bound}" in v["why"]
    assert line(v) == f"not judged ({bound - 1} drafts < {bound})"
    assert judge([(3, 0)] * bound, None, 3, "mtp")["status"] == "tripped"


def test_healthy_silent_collapse_trips_once_on_all_drafts():
    v = judge(HEALTHY, None, 3, "mtp")
    assert v["status"] == "silent" and v["drafts"] == 60 and v["per_position"][0] == pytest.approx(5 / 6, abs=1e-4)
    assert v["break_even"] == pytest.approx(1.2)
    bad = judge([(3, 0)] * 57 + [(3, 1)] * 3, None, 3, "mtp")
    assert [t["kind"] for t in bad["trips"]] == ["collapse", "break_even"] and bad["codes"] == ["SRG470", "SRG471"]
    assert all(t["drafts_seen"] == 60 for t in bad["trips"])  # judged once, at the end, on the whole run
    assert line(bad) == "SRG470 collapse, SRG471 break_even (60 drafts)"
    assert judge([(0, 0)] * 40, None, 3, "mtp")["drafts"] == 0  # a round with nothing drafted is no draft


def test_expectation_names_its_source():
    raw = {"expect": {"per_position": [0.95, 0.9, 0.9], "source": SOURCE}}
    short = judge(HEALTHY, raw, 3, "mtp")  # 60 drafts: too few for a 15 % tolerance, said
    assert short["status"] == "silent" and "under expect_min_drafts 100" in short["expect_not_judged"]
    v = judge(HEALTHY * 2, raw, 3, "mtp")
    assert v["codes"] == ["SRG474"] and v["reference"] == SOURCE
    assert "reference: measured, hf 5.19.0 on CPU, bench/guard_hf.py" in v["trips"][0]["message"]
    assert judge(HEALTHY * 2, {"expect": {"mean_length": 2.5, "source": SOURCE}}, 3, "mtp")["status"] == "silent"


def test_bad_settings_are_refused_even_on_a_short_run():
    for raw in ({"floor": 3}, {"expect": {"per_position": [0.2, 0.5]}}, "on"):
        with pytest.raises(SurgeryError) as exc:
            judge([(3, 1)], raw, 3, "mtp")
        assert exc.value.diagnostics[0].code == "SRG475"
    for text in ("{nope", "[1, 2]"):
        with pytest.raises(SurgeryError) as exc:
            env_setting({ENV_GUARD: text})
        assert exc.value.diagnostics[0].code == "SRG486"


def test_hf_settings_merge_pair_recipe_environment():
    env = {ENV_GUARD: json.dumps({"min_drafts": 5, "expect": {"mean_length": 2.0}})}
    recipe = SimpleNamespace(guard={"action": "fail", "floor": 0.2}, location=lambda path: None)
    raw = hf_guard.settings("gemma4-mtp", recipe, environ=env).raw
    assert raw["min_drafts"] == 5 and raw["action"] == "fail" and raw["floor"] == 0.2
    assert raw["expect"] == {"mean_length": 2.0}  # whole: the pair's figures and source do not stay under it
    pair = hf_guard.pair_expectation("gemma4-mtp")
    assert pair and hf_guard.settings("gemma4-mtp", None, environ={}).raw == pair  # measured (bench/guard_hf.py)
    assert pair["expect"]["source"]["kind"] == "measured"
    assert hf_guard.settings(None, None, environ={}).raw is None
    assert hf_guard.method_of("gemma4-mtp") == "mtp" and hf_guard.method_of("draft-model") == "draft_model"
