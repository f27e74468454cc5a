"""The plugin's logger: a child of vLLM's own `vllm` logger.

vLLM configures exactly one logger tree, `vllm.*` (handler, format with the process tag such as
`(EngineCore pid=...)`, level from VLLM_LOGGING_LEVEL), in every process it starts; loggers outside
that tree have no handler there, so the plugin's lines never reached a server's log. Logging under
`vllm.surgery` makes them print wherever vLLM prints, with vLLM's default logging, on the server and
offline alike. Without vLLM (unit tests, other engines) it is a plain `surgery.vllm` logger.

The lines themselves are defined here once (surgery/loglines.py says why): the plugin logs
`LINE.fmt`, and tests/vllm/test_server.py, test_startup.py and tests/test_no_silent_gaps.py find
them in a real log with `LINE.find(text)`.
"""
from __future__ import annotations

import logging

from ..loglines import LogLine

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


def get_logger() -> logging.Logger:
    try:
        from vllm.logger import init_logger
    except Exception:  # noqa: BLE001 - vLLM absent or broken: still log somewhere
        return logging.getLogger("surgery.vllm")
    return init_logger(NAME)
