"""The acceptance guard in SGLang (surgery/sglang/guard.py), on SGLang's own per-request accept count: the
wrapped method is `Req.update_spec_correct_drafts_histogram` compiled from the pinned wheel's source
(tests/sglang_source.py), on a stand-in `sglang.srt.managers.schedule_batch` module; the call site in the
batch result processor is checked in the same wheel. SGLang itself cannot run speculative decoding on
this CPU (docs/sglang.md): the live rows are GPU work (bench, the live-releases issue).

- healthy counts never trip; a collapse trips SRG470 (and SRG471) once, logged under SGLang's logger;
- `action: fail` raises the trip's code out of SGLang's method (the scheduler stops with it);
- SURGERY_GUARD is checked at install (SRG486 / SRG475); no recipe and no `enabled`: nothing wrapped;
- an SGLang without the counting method: SRG488, serving goes on."""
from __future__ import annotations

import logging
import sys
import types

import pytest

import sglang_source as sgl

from surgery.text.diagnostics import SurgeryError
from surgery.sglang import guard

MODULE = guard.TARGET[0]


class _Req:
    def __init__(self):
        self.spec_correct_drafts_histogram = []


@pytest.fixture
def req_class(monkeypatch):
    """`Req` with SGLang's own update_spec_correct_drafts_histogram, in a stand-in module."""
    method = sgl.function("managers/schedule_batch.py", "Req.update_spec_correct_drafts_histogram")
    cls = type("Req", (_Req,), {"update_spec_correct_drafts_histogram": method})
    mod = types.ModuleType(MODULE)
    mod.Req = cls
    for name in ("sglang", "sglang.srt", "sglang.srt.managers"):
        monkeypatch.setitem(sys.modules, name, sys.modules.get(name) or types.ModuleType(name))
    monkeypatch.setitem(sys.modules, MODULE, mod)
    yield cls
    guard.uninstall()


def _worker(steps=3, algo="EAGLE3"):
    return types.SimpleNamespace(server_args=types.SimpleNamespace(speculative_num_steps=steps),
                                 speculative_algorithm=types.SimpleNamespace(name=algo))


def _env(**kw):
    import json

    return {guard.ENV_GUARD: json.dumps({"min_drafts": 50, "window": 200, "check_every": 25, **kw})}


def test_sglang_counts_where_the_guard_reads():
    """The wrapped method is the one SGLang calls once per request and verify step with the step's accepted
    drafts (0.5.21's batch result processor; 0.5.23 has the same statement, read when writing the guard)."""
    stmt = sgl.find_in_function("managers/scheduler_components/batch_result_processor.py",
                                _processor_class() + "._resolve_spec_v2_tokens", "req.update_spec_correct_drafts_histogram(")
    assert "num_correct_drafts" in stmt


def _processor_class() -> str:
    import ast

    tree = ast.parse(sgl.source("managers/scheduler_components/batch_result_processor.py"))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and any(getattr(f, "name", "") == "_resolve_spec_v2_tokens" for f in node.body):
            return node.name
    raise AssertionError("no class defines _resolve_spec_v2_tokens")


def _feed(cls, accepted_per_step, requests=4):
    reqs = [cls() for _ in range(requests)]
    for a in accepted_per_step:
        for r in reqs:
            r.update_spec_correct_drafts_histogram(a)
    return reqs


def test_healthy_counts_never_trip_and_sglangs_histogram_is_kept(req_class, caplog):
    assert guard.install("eagle3", environ=_env()) == [".".join(guard.TARGET)]
    assert guard.configure(_worker()) is not None
    with caplog.at_level(logging.INFO, logger="sglang.surgery"):
        reqs = _feed(req_class, [3, 2, 3, 1, 3, 2] * 40)
    assert reqs[0].spec_correct_drafts_histogram == [0, 40, 80, 120]  # SGLang's own count, unchanged
    record = guard.state()
    assert record["trips"] == [] and record["streams"]["all"]["drafts_seen"] == 4 * 240
    assert record["streams"]["all"]["last"]["per_position"][0] == 1.0
    assert "SRG47" not in caplog.text


def test_a_silent_guard_leaves_records_at_doublings(req_class, tmp_path, monkeypatch):
    """A healthy run writes the guard's record at 32, 64, 128, ... drafts (no trip needed), so
    `surgery apply --engine sglang` can say how many drafts were judged and that nothing tripped."""
    from surgery.commands.sglang_apply import guard_line, guard_summary
    from surgery.sglang import report

    monkeypatch.setenv("SURGERY_REPORT", str(tmp_path / "r.jsonl"))
    guard.install("eagle3", environ=_env())
    guard.configure(_worker())
    _feed(req_class, [3, 2, 3, 1] * 25, requests=2)  # 200 drafts
    events = report.read(tmp_path / "r.jsonl")
    seen = [e["streams"]["all"]["drafts_seen"] for e in events if e["event"] == "guard"]
    assert seen == [32, 64, 128]
    summary = guard_summary(events)
    assert summary["drafts_seen"] == 128 and summary["trips"] == [] and summary["records"] == 3
    assert guard_line(summary) == "guard: 128 drafts judged, trips: none (silent)"
    assert guard_summary([]) is None and "no record" in guard_line(None)


def test_collapse_trips_once_and_is_logged(req_class, caplog):
    guard.install("eagle3", environ=_env())
    guard.configure(_worker())
    with caplog.at_level(logging.INFO, logger="sglang.surgery"):
        _feed(req_class, [0] * 200)
    kinds = [t["kind"] for t in guard.state()["trips"]]
    assert kinds == ["collapse", "break_even"]
    assert "SRG470 position-0 acceptance 0.000 is under the floor" in caplog.text


def test_action_fail_stops_with_the_code(req_class):
    guard.install(None, environ=_env(enabled=True, action="fail"))
    guard.configure(_worker(algo="NEXTN"))
    with pytest.raises(SurgeryError) as exc:
        _feed(req_class, [0] * 100, requests=1)
    assert exc.value.diagnostics[0].code == "SRG470"


def test_settings_checked_at_install_and_off_without_recipe(req_class):
    with pytest.raises(SurgeryError) as exc:
        guard.install("eagle3", environ={guard.ENV_GUARD: "{min_drafts: 5"})
    assert exc.value.diagnostics[0].code == "SRG486"
    with pytest.raises(SurgeryError) as exc:
        guard.install("eagle3", environ={guard.ENV_GUARD: '{"floor": 2}'})
    assert exc.value.diagnostics[0].code == "SRG475"
    assert guard.install(None, environ={}) == []  # no recipe, not enabled: nothing wrapped
    assert guard.configure(_worker()) is None
    assert not hasattr(req_class.__dict__["update_spec_correct_drafts_histogram"], "__surgery_guard__")


def test_sglang_without_the_count_is_srg488(monkeypatch, caplog):
    mod = types.ModuleType(MODULE)
    mod.Req = type("Req", (), {})
    monkeypatch.setitem(sys.modules, MODULE, mod)
    with caplog.at_level(logging.WARNING, logger="sglang.surgery"):
        assert guard.install("eagle3", environ={}) == []
    assert "SRG488" in caplog.text
    guard.uninstall()
