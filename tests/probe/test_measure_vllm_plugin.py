"""SRG497: the vLLM measurer registers the plugin itself and refuses a candidate whose engine carries no
plugin verification (docs/gpu.md section 17: from a checkout on PYTHONPATH, without the
`vllm.general_plugins` entry point, the probe measured stock vLLM and called it the recipe's: the
built-in EAGLE-3 head at 29.1 %, aux id 0 read by reference). No engine starts: the engine calls are
replaced by a stand-in that runs the load-model callbacks as vLLM's wrapped `load_model` would."""
from __future__ import annotations

import types

import pytest

from surgery.probe import measure_vllm
from surgery.probe.measure_vllm import VLLMMeasurer
from surgery.vllm import engine, hooks, plugin, state


class Proposer:
    """A drafter the plugin did (or did not) record a verification on."""


@pytest.fixture
def fake_engine(monkeypatch):
    """start_engine runs the "after" load-model callbacks on a stand-in drafter; counters grow by one
    draft round per generate call. Returns (calls, proposer)."""
    calls = {"register": 0, "generate": 0, "shutdown": 0}
    proposer = Proposer()
    monkeypatch.setattr(plugin, "register", lambda: calls.__setitem__("register", calls["register"] + 1))
    installed: list = []  # only the measurer's own callbacks (not a plugin's another test registered)
    monkeypatch.setattr(hooks, "install_load_model_hook", lambda cb, when="after", first=False: (
        installed.append(cb), [])[1])
    monkeypatch.setattr(hooks, "remove_hook", lambda cb: installed.remove(cb) if cb in installed else None)

    def start_engine(**kw):
        for cb in list(installed):
            cb(proposer, None)
        return types.SimpleNamespace(kw=kw)

    monkeypatch.setattr(engine, "engine_kwargs", lambda *a, **k: {"args": a})
    monkeypatch.setattr(engine, "start_engine", start_engine)
    monkeypatch.setattr(engine, "generate", lambda llm, prompts, n: calls.__setitem__("generate", calls["generate"] + 1))
    monkeypatch.setattr(engine, "spec_counters", lambda llm: {
        "num_drafts": calls["generate"], "num_draft_tokens": 3 * calls["generate"],
        "num_accepted_tokens": 2 * calls["generate"], "num_accepted_tokens_per_pos": [calls["generate"]] * 2 + [0]})
    monkeypatch.setattr(engine, "shutdown", lambda llm: calls.__setitem__("shutdown", calls["shutdown"] + 1))
    return calls, proposer


def _measurer():
    recipe = types.SimpleNamespace(file=None, name="eagle3")
    return VLLMMeasurer(recipe, "target-dir", "eagle3")


def test_a_candidate_without_the_plugin_is_refused_not_measured(fake_engine):
    calls, _ = fake_engine
    out = _measurer().measure("draft-dir", [[1, 2], [3, 4]], 8, 3, lambda m: True)
    assert calls["register"] == 1  # the measurer does not rely on the entry point
    assert out.error is not None and "SRG497" in out.error and "no plugin state" in out.error
    assert out.verified is None and not out.prompts and calls["generate"] == 0 and calls["shutdown"] == 1


def test_state_without_verification_is_refused(fake_engine):
    calls, proposer = fake_engine
    state.of(proposer)  # vLLM's wrapped load_model recorded the target, no recipe was applied
    out = _measurer().measure("draft-dir", [[1, 2]], 8, 3, lambda m: True)
    assert "SRG497" in out.error and "no recipe plan" in out.error and calls["generate"] == 0
    state.of(proposer).plan = object()  # a plan, but no verification recorded
    out = _measurer().measure("draft-dir", [[1, 2]], 8, 3, lambda m: True)
    assert "SRG497" in out.error and "recorded no verification" in out.error and calls["generate"] == 0


def test_a_verified_candidate_is_measured(fake_engine):
    calls, proposer = fake_engine
    state.of(proposer).verification = types.SimpleNamespace(ok=True)
    out = _measurer().measure("draft-dir", [[1, 2], [3, 4]], 8, 3, lambda m: True)
    assert out.error is None and out.verified is True
    assert len(out.prompts) == 2 and calls["generate"] == 2
    assert [p.drafted for p in out.prompts] == [3, 3] and [p.accepted for p in out.prompts] == [2, 2]


def test_register_refusal_is_the_candidate_error(monkeypatch):
    from surgery.text.diagnostics import SurgeryError, diag

    def refuse():
        raise SurgeryError(diag("SRG323", "no vLLM draft-loading method could be wrapped"))

    monkeypatch.setattr(plugin, "register", refuse)
    monkeypatch.setattr(engine, "start_engine", lambda **kw: pytest.fail("no engine after a refused register"))
    out = _measurer().measure("draft-dir", [[1, 2]], 8, 3, lambda m: True)
    assert "SRG323" in out.error


def test_not_applied_text_names_the_code_and_the_hint():
    text = measure_vllm.not_applied(None)
    assert "SRG497" in text and "stock vLLM" in text and "pip install" in text
