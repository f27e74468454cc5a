"""Shared fixtures for the vLLM CPU tests (in-process engine, tiny Gemma 4 pair).

Every test here is marked ``vllm``; the whole folder is skipped when vLLM is not importable.
One plain (no draft) engine per session provides the greedy baseline.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
for p in (str(REPO), str(HERE)):
    if p not in sys.path:
        sys.path.insert(0, p)

if importlib.util.find_spec("vllm") is None or importlib.util.find_spec("torch") is None:
    collect_ignore_glob = ["test_*.py"]  # skip cleanly: nothing here can run without vLLM
else:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine + worker in this process
    os.environ.pop("SURGERY_RECIPE", None)  # recipe selection is per test, never inherited

SEED = 1  # seed 1 gives varied greedy continuations on the default tiny target


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.vllm)


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory):
    """Default layout (target s s f s | s f, draft s s s f, 2 KV heads), copy draft."""
    import tiny_vllm_pair as tp

    return tp.build(tmp_path_factory.mktemp("gemma4_tiny"), tp.DEFAULT, seed=SEED, draft_kind="copy")


@pytest.fixture(scope="session")
def baseline_outputs(tiny_pair):
    """Greedy outputs of the target alone (no draft); the engine is shut down right away."""
    import tiny_vllm_pair as tp

    llm = tp.make_llm(tiny_pair[0])
    try:
        return tp.generate(llm)
    finally:
        tp.shutdown(llm)
