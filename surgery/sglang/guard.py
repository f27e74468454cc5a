"""The live acceptance guard in an SGLang engine: SGLang's own per-request accept count of each verify
step, judged by surgery/guard/judge.py (the same rules, codes and defaults as the vLLM guard).

Where SGLang counts (0.5.21 and 0.5.23, managers/scheduler_components/batch_result_processor.py
`_resolve_spec_v2_tokens`, overlap and non-overlap alike): after a verify step, for every request of the
batch that is not finished or retracted, it adds 1 to `req.spec_verify_ct`, adds the step's accepted
drafts (`num_correct_drafts`, bonus token excluded) to `req.spec_num_correct_drafts` and calls
`req.update_spec_correct_drafts_histogram(num_correct_drafts)`. That call is one draft in the guard's
terms (one request's proposal in one step) with its accepted count: the guard wraps
`Req.update_spec_correct_drafts_histogram` and observes (drafted, accepted) per call, per step, in the
scheduler process; SGLang's own counters are untouched. The drafted count is the chain's depth,
`server_args.speculative_num_steps` (EAGLE / EAGLE-3 / NEXTN / STANDALONE chains of topk 1; a tree's
accepted path is judged against its depth the same way), read at the draft load.

Settings: the selected recipe's `guard:` block under the `SURGERY_GUARD` environment variable (a JSON
mapping of guard.py's keys; SRG486 / SRG475), merged by surgery/guard/precedence.py `resolve` (the one home of the
precedence); on when a recipe is selected unless `enabled: false`, or with `enabled: true` on a stock engine.
Trips are logged under SGLang's logger tree (`sglang.surgery`, coded lines), recorded in the
SURGERY_REPORT file (`guard` event), and with `action: fail` raised from the scheduler (the engine
stops with the code, as vLLM's does)."""
from __future__ import annotations

import functools
from typing import Any

from ..text.diagnostics import SurgeryError, diag
from ..guard.judge import Ended, Guard, Trip
from ..guard.precedence import ENV_GUARD, env_layer, recipe_layer, resolve
from ..recipe import load_recipe
from . import report
from .log import get_logger

TARGET = ("sglang.srt.managers.schedule_batch", "Req", "update_spec_correct_drafts_histogram")
_MARK = "__surgery_guard__"
# SGLang's speculative algorithm -> the method name of surgery/data/guard.yaml's draft costs (break-even)
METHODS = {"EAGLE": "eagle", "EAGLE3": "eagle3", "NEXTN": "mtp", "STANDALONE": "draft_model", "DFLASH": "dflash",
           "DSPARK": "dspark", "NGRAM": "ngram"}
PARALLEL = ("DFLASH", "DSPARK")
_state: dict[str, Any] = {"on": False, "settings": None, "guard": None, "why_off": None, "next_record": 0}
FIRST_RECORD = 32  # drafts seen at the first progress record; then at every doubling (O(log n) writes)
__all__ = ["ENV_GUARD", "install", "uninstall", "configure", "observe", "emit", "state", "settings"]


def settings(recipe: str | None, environ=None):
    """The merged settings (surgery/guard/precedence.py Settings): the recipe's `guard:` block, then SURGERY_GUARD."""
    return resolve(recipe_layer(load_recipe(recipe) if recipe else None), env_layer(environ))


def _req_class():
    """TARGET's class, imported statically (no dynamic import: tests/test_security.py)."""
    try:
        from sglang.srt.managers import schedule_batch
    except Exception as exc:  # noqa: BLE001 - an SGLang without this module (or its deps)
        return None, f"{type(exc).__name__}: {str(exc)[:160]}"
    return getattr(schedule_batch, TARGET[1], None), None


def install(recipe: str | None = None, environ=None) -> list[str]:
    """Check the settings (SRG486 / SRG475 stop the start), and when the guard is on wrap SGLang's
    per-request accept count. Returns what was wrapped; SRG488 (logged) when this SGLang has no such count."""
    merged = settings(recipe, environ)
    config = merged.config()
    on = config.on(recipe is not None)
    _state.update(on=on, settings=merged, guard=None, why_off=None)
    if not on:
        return []
    cls, why = _req_class()
    method = TARGET[2]
    fn = cls.__dict__.get(method) if cls is not None else None
    if fn is None:
        get_logger().warning("spec-surgery: %s", diag("SRG488", f"no {'.'.join(TARGET)} to read SGLang's accept "
                             f"counts from ({why or 'absent'}): serving without the acceptance guard").render())
        return []
    if getattr(fn, _MARK, None) is None:
        setattr(cls, method, _wrapper(fn))
    return [".".join(TARGET)]


def uninstall() -> None:
    cls, _ = _req_class()
    fn = cls.__dict__.get(TARGET[2]) if cls is not None else None
    if fn is not None and getattr(fn, _MARK, None) is not None:
        setattr(cls, TARGET[2], getattr(fn, _MARK))
    _state.update(on=False, settings=None, guard=None, why_off=None)


def configure(worker: Any) -> Guard | None:
    """At the draft load (surgery/sglang/hooks.py): the guard for this engine's algorithm and depth."""
    if not _state["on"]:
        return None
    server_args = getattr(worker, "server_args", None)
    algo = getattr(getattr(worker, "speculative_algorithm", None), "name", None) or \
        str(getattr(server_args, "speculative_algorithm", "") or "").upper() or None
    steps = int(getattr(server_args, "speculative_num_steps", 0) or 0)
    if steps <= 0:
        _off(f"no speculative_num_steps on the draft worker ({algo or 'no algorithm'})")
        return None
    merged = _state["settings"]
    guard = merged.guard(merged.config(), steps, METHODS.get(algo or ""), (algo or "") in PARALLEL)
    _state.update(guard=guard, next_record=FIRST_RECORD)
    get_logger().info("spec-surgery: acceptance guard on (%s, %d drafted tokens per step, floor %.3f, min_drafts %d, "
                      "break-even %s, action %s)", algo, steps, guard.config.floor, guard.config.min_drafts,
                      "off" if guard.break_even is None else f"{guard.break_even:.2f}", guard.config.action)
    return guard


def _off(why: str) -> None:
    _state.update(guard=None, why_off=why)
    get_logger().info("spec-surgery: %s", diag("SRG489", f"acceptance guard off: {why}").render())


def observe(num_correct_drafts: int) -> list:
    """One request's verify step (what the wrapper calls): the guard's events, emitted."""
    guard = _state["guard"]
    if guard is None:
        return []
    try:
        events = guard.observe(guard.num_spec, int(num_correct_drafts))
    except Exception as exc:  # noqa: BLE001 - the guard never breaks serving
        _off(f"it failed: {type(exc).__name__}: {str(exc)[:160]}")
        return []
    if events:
        emit(guard, events)
    elif guard.streams["all"].seen >= _state["next_record"]:
        # a silent guard leaves a record too (at 32, 64, 128, ... drafts): the report then says it judged
        # this many drafts and nothing tripped, which a guard that never ran cannot say
        _state["next_record"] = 2 * guard.streams["all"].seen
        record(guard)
    return events


def record(guard: Guard) -> None:
    try:
        report.write("guard", **guard.to_dict())
    except Exception as exc:  # noqa: BLE001 - an unwritable report never stops serving
        get_logger().warning("spec-surgery: cannot record the guard: %s", exc)


def emit(guard: Guard, events: list) -> None:
    log = get_logger()
    trips = [e for e in events if isinstance(e, Trip)]
    for e in events:
        if isinstance(e, Ended):
            log.info("spec-surgery: guard %s episode ended after %d drafts (%s)", e.kind, e.drafts_seen, e.stream)
        else:
            log.warning("spec-surgery: %s %s (%s)", e.code, e.message, e.stream)
    record(guard)
    if trips and guard.config.action == "fail":
        raise SurgeryError(diag(trips[0].code, f"guard (action: fail) stopped the engine: {trips[0].message}"))


def _wrapper(fn):
    @functools.wraps(fn)
    def update_spec_correct_drafts_histogram(self, num_correct_drafts, *args, **kwargs):
        result = fn(self, num_correct_drafts, *args, **kwargs)
        observe(num_correct_drafts)
        return result

    setattr(update_spec_correct_drafts_histogram, _MARK, fn)
    return update_spec_correct_drafts_histogram


def state() -> dict:
    """The guard's record (None when off): for the report and tests."""
    guard = _state["guard"]
    return None if guard is None else guard.to_dict()
