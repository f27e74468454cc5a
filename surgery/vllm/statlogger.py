"""The `vllm.stat_logger_plugins` entry point: the acceptance guard's series on a default server's /metrics.

Why: the guard decides in the engine-core process (surgery/vllm/guard.py), where the scheduler counts
each draft; that process's Prometheus registry reaches the API server's /metrics only in Prometheus
multiprocess mode, which a default `vllm serve` does not use (issue 55, measured on 0.34). vLLM 0.32 and
0.34 load `StatLoggerBase` subclasses named in this entry-point group into the API server's AsyncLLM
(`load_stat_logger_plugin_factories`), one per engine, and hand each `record(scheduler_stats, ...)` every
step's `SchedulerStats`, whose `spec_decoding_stats` holds that step's drafts and accepted tokens per
position: the same counts the engine core's guard judged.

Where the guard runs, and why nothing is counted twice:
- the decisions stay in the engine core (per-draft counts, grammar-invalid tokens off, as vLLM counts;
  the log line, the report record and `action: fail` belong where the engine can be stopped, and
  `LLM(...)` never loads stat-logger plugins). No supported channel carries its results to the API
  server (SchedulerStats is a fixed, msgspec-serialised dataclass).
- so this logger builds a second `Guard` from the same `additional_config` and feeds it the same steps
  (`Guard.observe_counts`, once per step, as the engine core does after each step): same buckets, same
  windows, same rules (surgery/guard/judge.py is pure), hence the same trips. It only exports: no log line,
  no record, no action (the engine core's copy did those once).
- one process exports each series: with PROMETHEUS_MULTIPROC_DIR set (by the user, or by vLLM for
  several API servers) the engine core's series already reach /metrics and the multiprocess collector
  would add this process's counter to the engine core's: this logger then registers nothing.

vLLM turns `log_stats` on when a stat-logger plugin is installed ("custom stat loggers were found;
enabling logging without default stat loggers"), so `--disable-log-stats` keeps vLLM's own log lines
off but the scheduler's per-step counts on (what the guard needs; bench/guard_overhead.py measures it).
"""
from __future__ import annotations

import os
from typing import Any

from vllm.v1.metrics.loggers import StatLoggerBase

from ..guard.counts import Counts
from ..guard.judge import Trip


class GuardStatLogger(StatLoggerBase):
    """Per engine (vLLM's PerEngineStatLoggerAdapter makes one per engine index)."""

    def __init__(self, vllm_config: Any, engine_index: int = 0):
        self.engine_index = engine_index
        self.run = None
        self.exporting = not os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        try:
            from . import guard

            run = guard.build(vllm_config, quiet=True)
        except Exception:  # noqa: BLE001 - the engine core refused a bad `guard:` already (SRG475)
            return
        if run.guard is not None and self.exporting:
            self.run = run
            self.metrics = guard.metrics()

    def record(self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None,
               engine_idx: int = 0, *args, **kwargs) -> None:
        run = self.run
        spec = getattr(scheduler_stats, "spec_decoding_stats", None) if run is not None else None
        if spec is None or not spec.num_drafts:
            return
        try:
            counts = Counts(spec.num_drafts, list(spec.num_draft_tokens_per_pos),
                            list(spec.num_accepted_tokens_per_pos))
            events = run.guard.observe_counts(counts, counts.drafts)
            for e in events:
                if isinstance(e, Trip):
                    self.metrics.trip(e)
            last = run.guard.streams["all"].last
            if last is not run.last_numbers:
                run.last_numbers = last
                self.metrics.show(last, run.guard.break_even)
        except Exception:  # noqa: BLE001 - exporting never breaks serving; the engine core's guard decides
            self.run = None

    def log_engine_initialized(self) -> None:
        pass
