"""The plugin's logger: a child of vLLM's own `vllm` logger.

vLLM configures exactly one logger tree, `vllm.*` (handler, format with the process tag such as
`(EngineCore pid=...)`, level from VLLM_LOGGING_LEVEL), in every process it starts; loggers outside
that tree have no handler there, so the plugin's lines never reached a server's log. Logging under
`vllm.surgery` makes them print wherever vLLM prints, with vLLM's default logging, on the server and
offline alike. Without vLLM (unit tests, other engines) it is a plain `surgery.vllm` logger.

The lines themselves are defined here once (surgery/text/loglines.py says why): the plugin logs
`LINE.fmt`, and tests/vllm/test_server.py, test_startup.py and tests/test_no_silent_gaps.py find
them in a real log with `LINE.find(text)`.
"""
from __future__ import annotations

import logging

from ..text.loglines import LogLine

NAME = "vllm.surgery"

# startup.py, in the API server process: the recipe resolved against the engine's configs
CHECKED = LogLine("spec-surgery: recipe %s checked against the target and draft configs before loading: "
                  "%d operations planned (pp=%d, tp=%d, kv_cache_dtype=%s)",
                  ("recipe", "operations", "pp", "tp", "kv_cache_dtype"))
# live_apply.py, in each worker: the plan applied to the live draft and target, and verified;
# `failed` is empty or ": <check>; <check>", `hint_problems` empty or "; SRGnnn <message>; ..."
# `has_own` says where the has-own answers came from (the checkpoint's names, or a dummy load: SRG512)
APPLIED = LogLine("spec-surgery: recipe %s applied: %d operations (%s), %d skipped, %s, verification %s "
                  "(%d checks); %s%s%s",
                  ("recipe", "operations", "layer_maps", "skipped", "summary", "verification", "checks",
                   "has_own", "failed", "hint_problems"),
                  shapes=(("has_own", r"(?:(?:SRG\d{3} )?load_format=\S+: has own weights[^;]*?)?"),
                          ("failed", r"(?:: .*?)?"), ("hint_problems", r"(?:; SRG\d{3} .*)?")))
# live_apply.py, in each worker, once the KV caches are bound (kv_cache_checks)
KV_BOUND = LogLine("spec-surgery: KV caches bound: %d/%d checks hold (draft KV caches are their target's "
                   "tensors, in their target's KV-cache groups; captured hidden-state layers as planned)",
                   ("held", "checks"))
# live_apply.py, after the engine's profile / warm-up forwards, before the first request (stage `warmed`);
# `fix` empty or "; SRG517 ...", `problems` empty or ": SRGnnn ..."
WARMED = LogLine("spec-surgery: warmed up (after the profile / warm-up forwards, before the first request): "
                 "%d/%d checks hold (every check of the plan again, values in all representations, captured "
                 "layers, identities, KV caches)%s%s", ("held", "checks", "fix", "problems"),
                 shapes=(("fix", r"(?:; SRG517 .*?)?"), ("problems", r"(?:: .*)?")))
# live_apply.py, after vLLM reloaded the weights
REFRESHED = LogLine("spec-surgery: refreshed %d copied attributes after weight reload", ("attributes",))
# a coded diagnostic (warning or info) the plugin logs instead of raising
DIAGNOSTIC = LogLine("spec-surgery: %s", ("diagnostic",))

# guard.py, in the engine-core process (the scheduler), once per engine: the acceptance guard is on
GUARD_ON = LogLine("spec-surgery: guard on: method %s drafting %d tokens; collapse under position-0 acceptance %s "
                   "after %d drafts; break-even mean accepted length %s (%s); window %d drafts, judged every %d; "
                   "action %s", ("method", "num_spec", "floor", "min_drafts", "break_even", "cost", "window",
                                 "check_every", "action"))
# guard.py: one line per trip, once per episode (surgery/guard/judge.py says what each number is). `stream` is
# empty for all drafts or " (batch 2-4)" for a batch-size band; rates are fractions with 3 decimals
_STREAM = (("stream", r"(?: \(batch [^)]*\))?"),)
GUARD_COLLAPSE = LogLine("spec-surgery: guard SRG470 acceptance collapsed%s: position-0 acceptance %s is under the "
                         "floor %s over the last %d drafts (per-position acceptance %s, mean accepted length %s)",
                         ("stream", "position0", "floor", "drafts", "per_position", "mean_length"), shapes=_STREAM)
GUARD_BREAK_EVEN = LogLine("spec-surgery: guard SRG471 speculation is costing throughput%s: mean accepted length %s "
                           "is under the break-even %s over the last %d drafts (per-position acceptance %s)",
                           ("stream", "mean_length", "break_even", "drafts", "per_position"), shapes=_STREAM)
GUARD_SHAPE = LogLine("spec-surgery: guard SRG472 acceptance shape of a wiring fault%s: a %s at position %d: "
                      "conditional acceptance %s after %s over the last %d drafts (conditional per position %s)",
                      ("stream", "shape", "position", "rate", "previous", "drafts", "conditional"), shapes=_STREAM)
GUARD_DRIFT = LogLine("spec-surgery: guard SRG473 acceptance drifted%s: %s over the last %d drafts, %s points under "
                      "the first full window's %s (limit %s points)",
                      ("stream", "acceptance", "drafts", "points", "reference", "limit"), shapes=_STREAM)
GUARD_EXPECTATION = LogLine("spec-surgery: guard SRG474 acceptance under the expected%s: %s (tolerance %s) over the "
                            "last %d drafts", ("stream", "detail", "tolerance", "drafts"), shapes=_STREAM)
# guard.py: an episode ends (the rule no longer holds on the window); the kind's line may come again
GUARD_ENDED = LogLine("spec-surgery: guard %s episode of %s ended%s after %d drafts: the rule no longer holds on the window",
                      ("code", "kind", "stream", "drafts_seen"), shapes=_STREAM)


def get_logger() -> logging.Logger:
    try:
        from vllm.logger import init_logger
    except Exception:  # noqa: BLE001 - vLLM absent or broken: still log somewhere
        return logging.getLogger("surgery.vllm")
    return init_logger(NAME)
