"""The stand-in scheduler the guard and canary tests (tests/vllm/test_guard_live.py, tests/vllm/test_canary.py) and the
guard's CPU bench (bench/guard_overhead.py) drive without an engine: one home, so all of them run the guard's
wrappers on the same copy of vLLM's per-step data.

- `StandIn`: vLLM's Scheduler as far as the guard sees it: `vllm_config`, `requests`, `num_sampled_tokens_per_step`,
  `update_from_output(scheduler_output, model_runner_output)` with vLLM's signature, and `has_requests` over a
  queue of canned steps (what the canary asks before each step);
- `GuardedScheduler`: the same, its methods wrapped by the guard's own wrappers (vguard.WRAPPERS), as install()
  wraps vLLM's;
- `step(scheduler, outs, ...)` / `inputs(...)`: one engine step of canned drafts {request id: (drafted, accepted)}
  as vLLM hands it to update_from_output: the scheduled draft tokens, the sampled ids (accepted + the one token every step
  samples), grammar-invalidated tokens, and requests that finished or whose output is dropped meanwhile;
- `config(...)`: the vllm_config the guard reads (recipe selection, `guard:`, k, method);
- `LogCapture`: the plugin's log lines ("vllm.surgery"), for the `captured` fixture (conftest.py) and the
  live engines' handlers.
The oracle that vLLM's Scheduler still reads these fields where the guard does: test_guard_live.py
test_vllm_counts_drafts_where_the_guard_reads_them.
"""
from __future__ import annotations

import logging
from types import SimpleNamespace

from surgery.vllm import guard as vguard


class Request:
    """A request as update_from_output's draft count reads it."""

    def __init__(self, finished: bool = False, stale: int = 0, drop: bool = False):
        self.finished, self.num_stale_output_tokens, self.drop_stale_output = finished, stale, drop

    def is_finished(self) -> bool:
        return self.finished


class StandIn:
    num_sampled_tokens_per_step = 1  # the token every step samples (vLLM's bonus token)

    def __init__(self, vllm_config):
        self.vllm_config = vllm_config
        self.requests: dict[str, Request] = {}
        self.finished_req_ids: set[str] = set()  # freed since the step was scheduled (vLLM's _free_request)
        self.queue: list[dict] = []  # canned steps: {request id: (drafted, accepted)}

    def update_from_output(self, scheduler_output, model_runner_output):
        return {}

    def has_requests(self):
        return bool(self.queue)


class GuardedScheduler(StandIn):
    pass


for _name, _factory in vguard.WRAPPERS.items():
    setattr(GuardedScheduler, _name, _factory(StandIn.__dict__[_name]))


def inputs(scheduler, outs: dict, invalid: dict | None = None, requests: dict | None = None) -> tuple:
    """(scheduler_output, model_runner_output) of one step of canned drafts {request id: (drafted, accepted)}, shaped
    as vLLM 0.34 hands them to update_from_output (the sampled ids in `req_ids` order; accepted None: nothing
    sampled); the scheduler's `requests` set to match (`requests`: request id -> Request for the ones that are not
    plainly running)."""
    scheduler.requests = {rid: (requests or {}).get(rid) or Request() for rid in outs}
    scheduler.finished_req_ids = {rid for rid, r in scheduler.requests.items() if r.finished}
    scheduler_output = SimpleNamespace(num_scheduled_tokens={rid: d + 1 for rid, (d, _) in outs.items()},
                                       scheduled_spec_decode_tokens={rid: [0] * d for rid, (d, _) in outs.items()},
                                       num_invalid_spec_tokens=invalid)
    model_runner_output = SimpleNamespace(req_ids=list(outs), sampled_token_ids=[
        [] if a is None else [0] * (a + scheduler.num_sampled_tokens_per_step) for _, a in outs.values()])
    return scheduler_output, model_runner_output


def step(scheduler, outs: dict, invalid: dict | None = None, requests: dict | None = None):
    """One step of canned drafts through `scheduler.update_from_output` (`inputs`)."""
    return scheduler.update_from_output(*inputs(scheduler, outs, invalid, requests))


def config(guard=None, recipe="eagle3", method="eagle3", k=3, **extra):
    """The vllm_config the guard reads; `guard` None: no `guard:` key; `extra`: more of vllm_config
    (the canary's model_config)."""
    surgery = {"recipe": recipe} if recipe else {}
    if guard is not None:
        surgery["guard"] = guard
    return SimpleNamespace(additional_config={"surgery": surgery},
                           speculative_config=SimpleNamespace(num_speculative_tokens=k, method=method,
                                                              parallel_drafting=False), **extra)


class LogCapture(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())

    @property
    def text(self) -> str:
        return "\n".join(self.lines)
