"""The live acceptance guard in a vLLM engine: the scheduler's own spec-decode counts, read where vLLM
makes them, judged by surgery/guard/judge.py.

Where vLLM 0.32 counts (vllm/v1/core/sched/scheduler.py): `Scheduler.update_from_output` walks the
step's requests; for each one that had draft tokens scheduled it calls
`make_spec_decoding_stats(stats, num_draft_tokens=, num_accepted_tokens=, num_invalid_spec_tokens=,
request_id=)`, which feeds `SpecDecodingStats.observe_draft` (drafts, accepted per position) and goes to
the front-end's loggers and Prometheus. It is called for every draft whether or not stats are logged
(`LLM(...)` runs with `disable_log_stats=True` by default: then it returns None and vLLM counts
nothing, but the call and its arguments are there). So the guard wraps it: the arguments are exactly
what vLLM would count (grammar-invalidated tokens taken off the drafted count, as vLLM does), in
`LLM(...)` and in the server alike, with or without --disable-log-stats.

Three wrappers on `Scheduler` (AsyncScheduler inherits them):
- `__init__`: reads `additional_config.surgery.guard` over the selected recipe's `guard:` (`guard_config`;
  SRG475 stops the start), decides whether the guard is on (a recipe selected, or `enabled: true`), builds
  the `Guard` for the engine's method and k;
- `make_spec_decoding_stats`: one `Guard.observe` per draft (a few integer additions; the rules are
  judged every `check_every` drafts, never per token);
- `update_from_output`: notes the step's batch size (for batch-size bands) and, after vLLM's own
  processing of the step, emits what the rules produced: the coded log line, the Prometheus counters
  and gauges, the `guard` record of the SURGERY_REPORT file; with `action: fail` it then raises the
  trip's code, which stops the engine (in `LLM(...)` the caller's generate() raises it; in the server
  the engine core dies with it and the server shuts down).

The scheduler runs in the engine-core process (in-process with VLLM_ENABLE_V1_MULTIPROCESSING=0), so
the metrics live in that process's Prometheus registry: visible to `LLM(...)` callers and in-process
engines, and to a server's /metrics in Prometheus multiprocess mode. A default server (no
PROMETHEUS_MULTIPROC_DIR) shows them through the stat-logger plugin (surgery/vllm/statlogger.py): the
API server's copy of the same rules, fed the same steps, exports them there; this process stays the one
that logs, records and stops.
"""
from __future__ import annotations

import functools
import importlib
import logging
import sys
from dataclasses import dataclass, field
from typing import Any

from ..text.diagnostics import SurgeryError, catalogue, diag
from ..guard.counts import Counts
from ..guard.judge import Ended, Guard, Trip
from ..guard.keys import CODES
from ..guard.precedence import Settings, engine_layer, recipe_layer, resolve
from ..guard.settings import GuardConfig
from . import state
from .log import (DIAGNOSTIC, GUARD_BREAK_EVEN, GUARD_COLLAPSE, GUARD_DRIFT, GUARD_ENDED, GUARD_EXPECTATION,
                  GUARD_ON, GUARD_SHAPE, get_logger)

TARGET = ("vllm.v1.core.sched.scheduler", "Scheduler")
METHODS = ("__init__", "make_spec_decoding_stats", "update_from_output")
_MARK = "__surgery_guard__"
# the line each trip kind logs (surgery/vllm/log.py): its format and the names of its fields, which are
# the keys of the trip's numbers (surgery/guard/judge.py), the stream first
LINES = {"collapse": (GUARD_COLLAPSE.fmt, GUARD_COLLAPSE.fields), "break_even": (GUARD_BREAK_EVEN.fmt, GUARD_BREAK_EVEN.fields),
         "shape": (GUARD_SHAPE.fmt, GUARD_SHAPE.fields), "drift": (GUARD_DRIFT.fmt, GUARD_DRIFT.fields),
         "expectation": (GUARD_EXPECTATION.fmt, GUARD_EXPECTATION.fields)}


@dataclass
class GuardRun:
    """The guard of one scheduler (one engine): the decisions, plus what the step wrapper needs."""

    guard: Guard | None
    batch: int = 0  # requests in the step being processed
    step: dict | None = None  # the step's drafts, {(drafted, accepted): n}, judged at its end (_step_wrapper)
    paused: bool = False  # the start-up canary's drafts are judged on their own (surgery/vllm/canary.py)
    pending: list = field(default_factory=list)  # trips / episode ends not yet emitted
    last_numbers: Any = None  # the evaluation the gauges show
    stopped: Any = None  # the Diagnostic `action: fail` stopped the engine with
    canary_counts: Any = None  # the canary's drafts (Counts) while paused
    canary: Any = None  # the canary's result (surgery/vllm/canary.py), in the record


def guard_setting(vllm_config: Any) -> Settings:
    """The merged settings (surgery/guard/precedence.py `resolve`): the selected recipe's `guard:` (None without a
    recipe), then additional_config.surgery.guard. A built-in pair's measured expectation reaches vLLM only through
    the engine's config (`surgery apply --ablate` puts it there): a served model is not known to be a miniature.
    The recipe machinery (recipe, selection) is imported here, when a scheduler or the start-up check asks, never
    with the plugin, which every process vLLM starts imports (tests/test_no_heavy_imports.py)."""
    from .selection import load_selected_recipe, selected_recipe, surgery_config

    ref = selected_recipe(vllm_config)
    recipe = load_selected_recipe(ref) if ref is not None else None
    return resolve(recipe_layer(recipe), engine_layer(surgery_config(vllm_config).get("guard")))


def guard_config(vllm_config: Any) -> tuple[Settings, GuardConfig]:
    """(the merged settings, checked): SRG475 at the recipe key or the additional_config key that is bad."""
    settings = guard_setting(vllm_config)
    return settings, settings.config()


def build(vllm_config: Any, quiet: bool = False) -> GuardRun:
    """The guard for an engine config (SRG475 on a bad `guard:`); GuardRun(None) when it is off.
    `quiet`: no start lines (the API server's copy, surgery/vllm/statlogger.py: the engine core says them)."""
    from .selection import selected_recipe  # the recipe machinery loads here, not with the plugin

    settings, config = guard_config(vllm_config)
    on = config.enabled if config.enabled is not None else selected_recipe(vllm_config) is not None
    if not on:
        return GuardRun(None)
    log = get_logger()
    spec = getattr(vllm_config, "speculative_config", None)
    num_spec = int(getattr(spec, "num_speculative_tokens", 0) or 0) if spec is not None else 0
    if num_spec <= 0 and quiet:
        return GuardRun(None)
    if num_spec <= 0:
        log.info(DIAGNOSTIC.fmt, diag("SRG477", "guard off: the engine has no speculative decoding").render())
        return GuardRun(None)
    method = getattr(spec, "method", None)
    guard = settings.guard(config, num_spec, method, bool(getattr(spec, "parallel_drafting", False)))
    if quiet:
        return GuardRun(guard)
    log.info(GUARD_ON.fmt, method, num_spec, f"{config.floor:.3f}", config.min_drafts,
             "off" if guard.break_even is None else f"{guard.break_even:.2f}", guard.cost_source, config.window,
             config.check_every, config.action)
    if guard.break_even is None:
        log.info(DIAGNOSTIC.fmt, diag("SRG477", f"guard: the break-even rule is off ({guard.cost_source}); give "
                                      "round_cost or draft_cost to judge it").render())
    return GuardRun(guard)


def guard_run(scheduler: Any) -> GuardRun | None:
    """The GuardRun the scheduler's wrapped __init__ recorded (None before it ran, or elsewhere)."""
    st = state.get(scheduler)
    return st.guard if st is not None else None


def _init_wrapper(orig):
    @functools.wraps(orig)
    def __init__(self, *args, **kwargs):
        orig(self, *args, **kwargs)
        st = state.of(self)
        if st.guard is None:  # a subclass's __init__ calling super() sets it up once
            st.guard_started(build(self.vllm_config))

    setattr(__init__, _MARK, orig)
    return __init__


def _observe_wrapper(orig):
    @functools.wraps(orig)
    def make_spec_decoding_stats(self, spec_decoding_stats, num_draft_tokens, num_accepted_tokens,
                                 num_invalid_spec_tokens=None, request_id=None, *args, **kwargs):
        result = orig(self, spec_decoding_stats, num_draft_tokens, num_accepted_tokens, num_invalid_spec_tokens,
                      request_id, *args, **kwargs)
        run = guard_run(self)
        if run is not None and num_draft_tokens and run.step is not None:
            # per request only a histogram bump: the per-position counts are made once per step
            # (at batch 32 on a miniature, per-request Counts.observe was ~1 % of a GPU decode step)
            if num_invalid_spec_tokens:
                num_draft_tokens -= num_invalid_spec_tokens.get(request_id, 0)
            key = (num_draft_tokens, num_accepted_tokens)
            run.step[key] = run.step.get(key, 0) + 1
        return result

    setattr(make_spec_decoding_stats, _MARK, orig)
    return make_spec_decoding_stats


def _step_wrapper(orig):
    @functools.wraps(orig)
    def update_from_output(self, scheduler_output, *args, **kwargs):
        run = guard_run(self)
        if run is None or run.guard is None:
            return orig(self, scheduler_output, *args, **kwargs)
        run.batch = len(getattr(scheduler_output, "num_scheduled_tokens", None) or ())
        run.step = {}
        try:
            result = orig(self, scheduler_output, *args, **kwargs)
        finally:
            hist, run.step = run.step, None
        try:
            step = step_counts(hist, run.guard.num_spec) if hist else None
            if step is not None and run.paused:  # the canary's drafts: its own counts, not the live window
                if run.canary_counts is not None:
                    run.canary_counts.add(step)
            elif step is not None:
                # the step's drafts judged together, as the API server's stat logger gets them
                # (SchedulerStats.spec_decoding_stats): both feeds make the same buckets and decisions;
                # the bands' batch is the step's drafts, which both sides know
                events = run.guard.observe_counts(step, step.drafts)
                if events:
                    run.pending.extend(events)
            last = run.guard.streams["all"].last
            if last is not run.last_numbers:
                run.last_numbers = last
                metrics().show(last, run.guard.break_even)
            if run.pending:
                emit(run)
        except SurgeryError:
            raise  # action: fail
        except Exception as exc:  # noqa: BLE001 - the guard never breaks serving
            disable(run, exc)
        return result

    setattr(update_from_output, _MARK, orig)
    return update_from_output


def step_counts(hist: dict, num_spec: int) -> Counts:
    """One step's drafts as per-position counts, from {(drafted, accepted): n}."""
    step = Counts.sized(num_spec)
    for (drafted, accepted), n in hist.items():
        step.observe_n(drafted, accepted, n)
    return step


WRAPPERS = {"__init__": _init_wrapper, "make_spec_decoding_stats": _observe_wrapper,
            "update_from_output": _step_wrapper}


def _scheduler_class():

    return getattr(importlib.import_module(TARGET[0]), TARGET[1], None)


def install(module: str = "") -> list[str]:
    """Wrap the scheduler's methods (idempotent). A method missing in this vLLM: SRG476, no guard."""
    try:
        cls = _scheduler_class()
    except Exception as exc:  # noqa: BLE001 - a vLLM without the module
        cls, why = None, f"{type(exc).__name__}: {exc}"
    else:
        why = f"{TARGET[0]} has no {TARGET[1]}"
    missing = [m for m in METHODS if cls is None or m not in cls.__dict__]
    if missing:
        get_logger().warning(DIAGNOSTIC.fmt, diag("SRG476", f"cannot wrap {'.'.join(TARGET)}: "
                             + (why if cls is None else f"no {', '.join(missing)}")).render())
        return []
    wrapped = []
    for name in METHODS:
        fn = cls.__dict__[name]
        if not getattr(fn, _MARK, None):
            setattr(cls, name, WRAPPERS[name](fn))
        wrapped.append(f"{TARGET[0]}.{TARGET[1]}.{name}")
    return wrapped


def uninstall() -> None:
    """Restore vLLM's scheduler methods (where vLLM imported its scheduler; nothing is imported here)."""

    module = sys.modules.get(TARGET[0])
    cls = getattr(module, TARGET[1], None) if module is not None else None
    if cls is None:
        return
    for name in METHODS:
        orig = getattr(cls.__dict__.get(name), _MARK, None) if cls is not None else None
        if orig is not None:
            setattr(cls, name, orig)


def installed() -> bool:
    cls = _scheduler_class()
    return cls is not None and all(getattr(cls.__dict__.get(m), _MARK, None) for m in METHODS)


def disable(run: GuardRun, exc: BaseException) -> None:
    """The guard failed (a bug, a metrics registry refusing a name): said once, and off for this engine;
    the engine keeps serving."""
    run.guard, run.pending = None, []
    get_logger().warning(DIAGNOSTIC.fmt, diag("SRG476", f"the acceptance guard failed and is off for this engine: "
                                              f"{type(exc).__name__}: {str(exc)[:200]}").render())


def emit(run: GuardRun) -> None:
    """Log, count and record what the rules produced; with `action: fail` stop with the first trip's code."""
    log = get_logger()
    events, run.pending = run.pending, []
    trips = [e for e in events if isinstance(e, Trip)]
    for e in events:
        suffix = "" if e.stream == "all" else f" ({e.stream})"
        if isinstance(e, Ended):
            log.info(GUARD_ENDED.fmt, CODES[e.kind], e.kind, suffix, e.drafts_seen)
            continue
        fmt, fields = LINES[e.kind]
        level = logging.ERROR if catalogue()[e.code].get("severity", "error") == "error" else logging.WARNING
        log.log(level, fmt, suffix, *[e.numbers[f] for f in fields[1:]])
        metrics().trip(e)
    write_record(run)
    if trips and run.guard.config.action == "fail":
        first = trips[0]
        run.stopped = diag(first.code, f"guard (action: fail) stopped the engine: {first.message}")
        raise SurgeryError(run.stopped)


def write_record(run: GuardRun) -> None:
    """The guard's record as the `guard` key of the SURGERY_REPORT file (rank 0's), read-modify-write."""
    from . import report

    path = report.report_path(0)
    if path is None:
        return
    try:
        record = run.guard.to_dict()
        if run.canary is not None:
            record["canary"] = run.canary
        report.update(path, guard=record)
    except (OSError, ValueError) as exc:
        get_logger().warning(DIAGNOSTIC.fmt, diag("SRG420", f"cannot write the guard's record to {path}: "
                                                  f"{getattr(exc, 'strerror', None) or exc}").render())


class Metrics:
    """`surgery_guard_trips_total{kind, stream}` and the window's gauges
    (`surgery_guard_acceptance{position}`, `surgery_guard_mean_accepted_length`,
    `surgery_guard_break_even`), in this process's Prometheus registry (created once per process:
    Prometheus refuses a name registered twice)."""

    def __init__(self):
        import prometheus_client as prom

        self.trips = prom.Counter("surgery_guard_trips", "Acceptance guard trips (surgery/guard/judge.py), once per episode",
                                  labelnames=["kind", "stream"])
        kw = {"multiprocess_mode": "mostrecent"}
        self.acceptance = prom.Gauge("surgery_guard_acceptance", "Per-position acceptance over the guard's window",
                                     labelnames=["position"], **kw)
        self.mean_length = prom.Gauge("surgery_guard_mean_accepted_length",
                                      "Mean accepted length (bonus token included) over the guard's window", **kw)
        self.break_even = prom.Gauge("surgery_guard_break_even", "The mean accepted length under which speculation "
                                     "costs throughput (the break-even rule's threshold; NaN: rule off)", **kw)
        for kind in CODES:  # every kind shows 0 before its first trip (a rate() over it needs the series)
            self.trips.labels(kind=kind, stream="all")

    def trip(self, t: Trip) -> None:
        self.trips.labels(kind=t.kind, stream=t.stream).inc()

    def show(self, numbers: dict | None, break_even: float | None = None) -> None:
        if not numbers:
            return
        for i, rate in enumerate(numbers["per_position"]):
            self.acceptance.labels(position=str(i)).set(rate)
        self.mean_length.set(numbers["mean_length"])
        self.break_even.set(float("nan") if break_even is None else break_even)


_metrics: Metrics | None = None


def metrics() -> Metrics:
    global _metrics
    if _metrics is None:
        _metrics = Metrics()
    return _metrics
