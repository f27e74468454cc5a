"""Library log handlers follow the test's stderr.

vLLM (at each engine start), transformers and huggingface_hub bind a StreamHandler to the stream `sys.stderr` is
at that moment. Inside a test that uses `run_cli` (capsys) that stream is the test's capture, closed when the test
ends: every later line those loggers write in the session (vLLM's own warning from the torch.set_num_threads it
patches, say) then fails with "--- Logging error --- ... I/O operation on closed file", a traceback on stderr that
other modules' tests (tests/cli/test_apply_cli.py) rightly refuse. `surgery probe` starts vLLM in-process for
every vLLM pair, so after each probe test the handlers these libraries hold are pointed at whatever `sys.stderr`
is when a line is written."""
from __future__ import annotations

import logging
import sys

import pytest

LIBRARIES = ("vllm", "transformers", "huggingface_hub")


class _CurrentStderr:
    """A stream that is always the current sys.stderr (the test's capture, or the session's)."""

    def write(self, text):
        return sys.stderr.write(text)

    def flush(self):
        sys.stderr.flush()


@pytest.fixture(autouse=True)
def _log_streams_follow_stderr():
    yield
    for name in LIBRARIES:
        for handler in logging.getLogger(name).handlers:
            if type(handler) is logging.StreamHandler and not isinstance(handler.stream, _CurrentStderr):
                handler.stream = _CurrentStderr()  # not setStream: it flushes the old stream, which may be closed
