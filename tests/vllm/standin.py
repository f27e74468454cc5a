"""The stand-in scheduler the guard and canary tests drive without an engine (tests/vllm/test_guard_live.py,
tests/vllm/test_canary.py): one home, so both test the guard's wrappers on the same copy of vLLM's signatures.

- `StandIn`: vLLM's Scheduler as far as the guard sees it: `vllm_config`, `make_spec_decoding_stats` and
  `update_from_output` with vLLM's signatures (update_from_output calls make_spec_decoding_stats per request,
  with keywords, like vLLM; the step's `invalid` tokens per request, when it has them), and `has_requests`
  over a queue of canned steps (what the canary asks before each step);
- `GuardedScheduler`: the same, its methods wrapped by the guard's own wrappers (vguard.WRAPPERS), as install()
  wraps vLLM's;
- `config(...)`: the vllm_config the guard reads (recipe selection, `guard:`, k, method);
- `LogCapture`: the plugin's log lines ("vllm.surgery"), for the `captured` fixture (conftest.py) and the
  live engines' handlers.
The oracle that vLLM's Scheduler still has these signatures: test_guard_live.py
test_vllm_counts_drafts_where_the_guard_reads_them.
"""
from __future__ import annotations

import logging
from types import SimpleNamespace

from surgery.vllm import guard as vguard


class StandIn:
    def __init__(self, vllm_config):
        self.vllm_config = vllm_config
        self.queue: list[dict] = []  # canned steps: {request id: (drafted, accepted)}

    def make_spec_decoding_stats(self, spec_decoding_stats, num_draft_tokens, num_accepted_tokens,
                                 num_invalid_spec_tokens, request_id):
        return None  # log_stats off, as in LLM(...) by default

    def update_from_output(self, scheduler_output, model_runner_output):
        invalid = getattr(scheduler_output, "invalid", None)
        for rid, (drafted, accepted) in model_runner_output.items():
            self.make_spec_decoding_stats(None, num_draft_tokens=drafted, num_accepted_tokens=accepted,
                                          num_invalid_spec_tokens=invalid, request_id=rid)
        return {}

    def has_requests(self):
        return bool(self.queue)


class GuardedScheduler(StandIn):
    pass


for _name, _factory in vguard.WRAPPERS.items():
    setattr(GuardedScheduler, _name, _factory(StandIn.__dict__[_name]))


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
