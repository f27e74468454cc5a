"""Two helpers the in-process and the multi-process vLLM tests share (stdlib only: the rank processes of
tests/vllm/dist_worker_ext.py import it too)."""
from __future__ import annotations

import os
from contextlib import contextmanager


@contextmanager
def env(**kv):
    """Set (value) or unset (None) environment variables for the block; restored afterwards. vLLM reads
    SURGERY_* and its own variables when an engine starts, so monkeypatch's function scope is too coarse."""
    old = {k: os.environ.get(k) for k in kv}
    try:
        for k, v in kv.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = str(v)
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def exception_text(exc: BaseException | None) -> str:
    """The exception and everything it was raised from / during (vLLM wraps ours in its own)."""
    parts, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        parts.append(f"{type(exc).__name__}: {exc}")
        exc = exc.__cause__ or exc.__context__
    return "\n".join(parts)
