"""Independent reads side by side: the draft's and the target's config, their safetensors headers.

Why: by hub id every read is a round trip, and `surgery validate --weights` made them one after the
other, so the user waited on latency, not bytes (issue 47: 4.1 s at 100 ms round trip for 25 small
requests). Two independent sides run in two threads; the reads themselves stay what they were (each
bounded, cached, counted), and local models are not threaded at all (nothing to wait on).

Errors keep their order: when both sides fail, the first thunk's error is raised, as the sequential
code raised it.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .source import ModelSource, is_hub_ref


def side_by_side(*thunks: Callable[[], Any], threaded: bool = True) -> list[Any]:
    """The thunks' results, in order; run concurrently when `threaded` and there is more than one."""
    if not threaded or len(thunks) < 2:
        return [t() for t in thunks]
    from concurrent.futures import ThreadPoolExecutor  # only when a hub read waits: not on a local validate's path

    with ThreadPoolExecutor(max_workers=len(thunks), thread_name_prefix="surgery-read") as pool:
        futures = [pool.submit(t) for t in thunks]
        errors = [f.exception() for f in futures]  # waits for every side: no thread outlives the call
    for e in errors:
        if e is not None:
            raise e
    return [f.result() for f in futures]


def any_remote(*refs: Any) -> bool:
    """True when one of the references is a hub id (a path that exists locally is never one)."""
    for ref in refs:
        if ref is None:
            continue
        if isinstance(ref, ModelSource):
            if type(ref).__name__ == "HubSource":
                return True
            continue
        if is_hub_ref(str(ref)):
            return True
    return False
