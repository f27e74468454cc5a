"""The plugin's logger: a child of vLLM's own `vllm` logger.

vLLM configures exactly one logger tree, `vllm.*` (handler, format with the process tag such as
`(EngineCore pid=...)`, level from VLLM_LOGGING_LEVEL), in every process it starts; loggers outside
that tree have no handler there, so the plugin's lines never reached a server's log. Logging under
`vllm.surgery` makes them print wherever vLLM prints, with vLLM's default logging, on the server and
offline alike. Without vLLM (unit tests, other engines) it is a plain `surgery.vllm` logger.
"""
from __future__ import annotations

import logging

NAME = "vllm.surgery"


def get_logger() -> logging.Logger:
    try:
        from vllm.logger import init_logger
    except Exception:  # noqa: BLE001 - vLLM absent or broken: still log somewhere
        return logging.getLogger("surgery.vllm")
    return init_logger(NAME)
