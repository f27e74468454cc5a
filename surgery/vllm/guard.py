"""The live acceptance guard in a vLLM engine: the scheduler's own per-step data, read once per step, judged by
surgery/guard/ (an adapter: where the counts come from, where a trip is said).

Where vLLM counts (vllm/v1/core/sched/scheduler.py, 0.32 and 0.34): `Scheduler.update_from_output` walks the
step's requests; for each one that had draft tokens scheduled (`scheduler_output.scheduled_spec_decode_tokens`)
and is still running, it takes the accepted count from the sampled ids (`len(sampled) -
num_sampled_tokens_per_step`) and calls `make_spec_decoding_stats`, which feeds `SpecDecodingStats.observe_draft`
(grammar-invalidated tokens, `scheduler_output.num_invalid_spec_tokens`, off the drafted count). The guard reads
the same per-step data once per step, before vLLM's own pass changes the requests' state: no wrapper per request
(at batch 32 on the H100 miniature one was half of the guard's ~100 us per step, issue 70). A request vLLM skips
is skipped here by the same tests: gone or finished (aborted while the step ran), its stale output dropped
(preempted and resumed in one step), nothing sampled. A request whose KV load failed is in its (remote) prefill
and has no draft scheduled. In `LLM(...)` and the server alike, with or without --disable-log-stats.

Two wrappers on `Scheduler` (AsyncScheduler inherits them):
- `__init__`: reads `additional_config.surgery.guard` over the selected recipe's `guard:` (`guard_config`;
  SRG475 stops the start), decides whether the guard is on (a recipe selected, or `enabled: true`), builds
  the `Guard` for the engine's method and k;
- `update_from_output`: the step's drafts as one histogram {(drafted, accepted): n} (`step_drafts`), then
  vLLM's own processing of the step, then the step's drafts judged together (`Guard.observe_counts`; the
  rules are judged every `check_every` drafts, never per token) and what the rules produced emitted: the
  coded log line, the Prometheus counters and gauges, the `guard` record of the SURGERY_REPORT file; with
  `action: fail` it then raises the trip's code, which stops the engine (in `LLM(...)` the caller's generate()
  raises it; in the server the engine core dies with it and the server shuts down).

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
import itertools
import logging
import operator
import sys
from collections import Counter
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
METHODS = ("__init__", "update_from_output")
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
    on = config.on(selected_recipe(vllm_config) is not None)
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


def step_drafts(scheduler: Any, scheduler_output: Any, model_runner_output: Any) -> dict:
    """One step's drafts as {(drafted, accepted): n}, from vLLM's own per-step data, read before its
    update_from_output changes the requests: what that method hands make_spec_decoding_stats, request by request
    (module docstring). The accepted count is the sampled ids past the tokens a step always samples; the
    drafted count leaves out the tokens a grammar invalidated.

    The usual step (every request with drafts still running, none finished or aborted since it was scheduled,
    no stale output, each sampled, no grammar) is counted in C loops (map, zip, Counter: ~0.1 us a request);
    any other step request by request, with vLLM's own tests (`_step_drafts_each`)."""
    scheduled = scheduler_output.scheduled_spec_decode_tokens
    if not scheduled:
        return {}
    always = scheduler.num_sampled_tokens_per_step
    finished = scheduler.finished_req_ids  # every request freed since this step was scheduled (_free_request)
    if (not always or getattr(scheduler_output, "num_invalid_spec_tokens", None)
            or (finished and not finished.isdisjoint(scheduled))):
        return _step_drafts_each(scheduler, scheduler_output, model_runner_output)
    try:
        stale = any(map(_STALE, map(scheduler.requests.__getitem__, scheduled)))
    except (KeyError, AttributeError):  # a request gone, or a release without stale outputs (0.26): one by one
        stale = True
    if stale:
        return _step_drafts_each(scheduler, scheduler_output, model_runner_output)
    drafted = set(map(len, scheduled.values()))
    if len(drafted) == 1 and len(scheduled) == len(model_runner_output.req_ids):
        # every row drafted the same k (the usual decode step): the histogram is the sampled lengths' alone
        (k,), sampled = drafted, _lengths(model_runner_output.sampled_token_ids)
        if k and sampled is not None and (0 not in sampled or not always):
            return {(k, n - always): sampled.count(n) for n in set(sampled)}
    # the batch's rows in order: each request's drafted tokens (none: not a draft) beside its sampled ids
    hist = Counter(zip(map(len, map(scheduled.get, model_runner_output.req_ids, _NONE)),
                       map(len, model_runner_output.sampled_token_ids)))
    out = {(drafted, n_sampled - always): n for (drafted, n_sampled), n in hist.items() if drafted}
    if len(out) < len(hist) and any(drafted and not n_sampled for drafted, n_sampled in hist):
        # a request with drafts that sampled nothing is not counted (vLLM's own test): request by request
        return _step_drafts_each(scheduler, scheduler_output, model_runner_output)
    return out


_NONE = itertools.repeat(())


def _lengths(rows: list) -> bytes | None:
    """The rows' lengths as bytes (a C loop; `count` is one too); None past 255 tokens in a row."""
    try:
        return bytes(map(len, rows))
    except ValueError:
        return None
_STALE = operator.attrgetter("num_stale_output_tokens")


def _index(model_runner_output: Any) -> dict:
    """Request id -> its row of the sampled ids (0.32 hands it; 0.34 hands the ids in batch order)."""
    index = getattr(model_runner_output, "req_id_to_index", None)
    if index is None:
        ids = model_runner_output.req_ids
        index = dict(zip(ids, range(len(ids))))
    return index


def _step_drafts_each(scheduler: Any, scheduler_output: Any, model_runner_output: Any) -> dict:
    """`step_drafts` request by request, with the tests update_from_output applies before it counts a draft: the
    request gone or finished (aborted while the step ran), its stale output dropped (preempted and resumed in one
    step), nothing sampled; grammar-invalidated tokens off the drafted count."""
    sampled = model_runner_output.sampled_token_ids
    index = _index(model_runner_output)
    invalid = getattr(scheduler_output, "num_invalid_spec_tokens", None) or {}
    always = scheduler.num_sampled_tokens_per_step
    requests = scheduler.requests
    hist: dict = {}
    for req_id, tokens in scheduler_output.scheduled_spec_decode_tokens.items():
        request = requests.get(req_id)
        if not tokens or request is None or request.is_finished() or (
                getattr(request, "num_stale_output_tokens", 0) and request.drop_stale_output):
            continue
        generated = sampled[index[req_id]] if sampled else ()
        if not generated and always:
            continue
        key = (len(tokens) - invalid.get(req_id, 0), max(len(generated) - always, 0))
        hist[key] = hist.get(key, 0) + 1
    return hist


def _step_wrapper(orig):
    @functools.wraps(orig)
    def update_from_output(self, scheduler_output, model_runner_output, *args, **kwargs):
        run = guard_run(self)
        if run is None or run.guard is None:
            return orig(self, scheduler_output, model_runner_output, *args, **kwargs)
        try:
            hist = step_drafts(self, scheduler_output, model_runner_output)
        except Exception as exc:  # noqa: BLE001 - the guard never breaks serving
            disable(run, exc)
            return orig(self, scheduler_output, model_runner_output, *args, **kwargs)
        result = orig(self, scheduler_output, model_runner_output, *args, **kwargs)
        try:
            if hist and run.paused:  # the canary's drafts: its own counts, not the live window
                if run.canary_counts is not None:
                    run.canary_counts.add(Counts.from_histogram(hist, run.guard.num_spec))
            elif hist:
                # the step's drafts judged together, as the API server's stat logger gets them
                # (SchedulerStats.spec_decoding_stats): both feeds make the same buckets and decisions;
                # the bands' batch is the step's drafts, which both sides know
                events = run.guard.observe_step(hist)
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


WRAPPERS = {"__init__": _init_wrapper, "update_from_output": _step_wrapper}


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
        self.positions: dict = {}  # position -> its acceptance gauge

    def trip(self, t: Trip) -> None:
        self.trips.labels(kind=t.kind, stream=t.stream).inc()

    def show(self, numbers: dict | None, break_even: float | None = None) -> None:
        if not numbers:
            return
        for i, rate in enumerate(numbers["per_position"]):
            gauge = self.positions.get(i)
            if gauge is None:  # one labelled child per position, looked up once
                gauge = self.positions[i] = self.acceptance.labels(position=str(i))
            gauge.set(rate)
        self.mean_length.set(numbers["mean_length"])
        self.break_even.set(float("nan") if break_even is None else break_even)


_metrics: Metrics | None = None


def metrics() -> Metrics:
    global _metrics
    if _metrics is None:
        _metrics = Metrics()
    return _metrics
