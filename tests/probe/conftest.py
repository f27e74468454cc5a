"""What an in-process vLLM leaves behind in this process, put right after each probe test or module.

Library log handlers follow the test's stderr. vLLM (at each engine start), transformers and huggingface_hub bind
a StreamHandler to the stream `sys.stderr` is at that moment. Inside a test that uses `run_cli` (capsys) that
stream is the test's capture, closed when the test ends: every later line those loggers write in the session
(vLLM's own warning from the torch.set_num_threads it patches, say) then fails with "--- Logging error --- ... I/O
operation on closed file", a traceback on stderr that other modules' tests (tests/cli/test_apply_cli.py) rightly
refuse. `surgery probe` starts vLLM in-process for every vLLM pair, so after each probe test the handlers these
libraries hold are pointed at whatever `sys.stderr` is when a line is written.

vLLM's CPU worker (vllm/v1/worker/cpu_worker.py `init_device`) also replaces `torch.set_num_threads`, process-wide
and for good, with a function that only logs "CPU backend doesn't allow to use `torch.set_num_threads` after the
thread binding, skip it."; surgery/vllm/engine.py's `shutdown` does not put it back. Every later
`torch.set_num_threads` in the session then does nothing: `surgery apply`'s one torch thread for the tiny pair
and its `--threads` (tests/cli/test_apply_cli.py) among them. The probe's engines are shut down inside their test
module, so after each probe module torch's own function, and the count the module started with, are put back."""
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


@pytest.fixture(scope="module", autouse=True)
def _torch_set_num_threads_back():
    """Set up before a probe module's own fixtures (which start the engines), torn down after them."""
    torch = sys.modules.get("torch")  # never imported here: a module that runs torch has imported it
    threads = torch.get_num_threads() if torch is not None else None
    yield
    torch = sys.modules.get("torch")
    if torch is not None and torch.set_num_threads is not torch._C.set_num_threads:
        torch.set_num_threads = torch._C.set_num_threads
        if threads is not None:
            torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _log_streams_follow_stderr():
    yield
    for name in LIBRARIES:
        for handler in logging.getLogger(name).handlers:
            if type(handler) is logging.StreamHandler and not isinstance(handler.stream, _CurrentStderr):
                handler.stream = _CurrentStderr()  # not setStream: it flushes the old stream, which may be closed
