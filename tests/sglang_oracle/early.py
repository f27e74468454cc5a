"""The SGLang oracle's two runner processes (the grid, the release's lists), started as soon as the session
knows it will run tests/sglang_oracle (tests/conftest.py, pytest_collection_finish) and read by that module's
fixtures when its turn comes. They run beside the rest of the suite (mostly one busy core) instead of after
it; what they are asked and what the tests hold them to is unchanged (test_sglang_oracle.py).

Loaded by path under its own name: tests/release_oracle has a grid.py of its own, and `import grid` would
give whichever module was imported first.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import tempfile
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RELEASE = "0.5.23"
VENV = ROOT / ".cache" / "oracles" / f"sglang-{RELEASE}"
GRID_TIMEOUT_S, FACTS_TIMEOUT_S = 1500, 600


def load_grid():
    spec = importlib.util.spec_from_file_location("sglang_oracle_grid", HERE / "grid.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class EarlyRuns:
    """ask_run for the grid and for the lists, each in its own thread, started now."""

    def __init__(self, python: str):
        from surgery.engine.ask import ask_run

        grid = load_grid()
        self.root = Path(tempfile.mkdtemp(prefix="sglang-oracle-"))
        self.cases = [grid.materialise(c, self.root) for c in grid.cases()]
        self.runs: dict = {}
        self.errors: dict = {}
        # Events, not Thread.join / is_alive: a join interrupted by Ctrl-C leaves is_alive() saying False
        self.done = {"grid": threading.Event(), "facts": threading.Event()}

        def ask(name, payload, timeout_s):
            try:
                self.runs[name] = ask_run("sglang", python, payload, timeout_s=timeout_s)
            except BaseException as exc:  # noqa: BLE001 - raised again in the test that reads it
                self.errors[name] = exc
            finally:
                self.done[name].set()

        self.threads = {name: threading.Thread(target=ask, args=(name, payload, timeout_s), daemon=True,
                                               name=f"sglang-oracle-{name}")
                        for name, payload, timeout_s in (("grid", self.cases, GRID_TIMEOUT_S),
                                                         ("facts", {"facts": True}, FACTS_TIMEOUT_S))}
        for thread in self.threads.values():
            thread.start()

    def result(self, name: str):
        self.done[name].wait()
        if name in self.errors:
            raise self.errors[name]
        return self.runs[name]

    def close(self) -> None:
        """At the session's end: a runner still going (the session stopped early) is ended, by its own pid."""
        if not all(done.is_set() for done in self.done.values()):
            for pid in _own_runner_children():
                try:
                    os.killpg(pid, signal.SIGKILL)  # ask_run starts each runner in its own session
                except (ProcessLookupError, PermissionError):
                    pass
            for done in self.done.values():
                done.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)


def _own_runner_children() -> list[int]:
    """Pids of this process's children that run the SGLang runner."""
    me, out = str(os.getpid()), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = (entry / "stat").read_text().rsplit(")", 1)[1].split()[1]
            cmd = (entry / "cmdline").read_bytes()
        except (OSError, IndexError):
            continue
        if ppid == me and b"sglang_runner" in cmd:
            out.append(int(entry.name))
    return out


_RUNS: EarlyRuns | None = None


def start() -> EarlyRuns | None:
    """Start the runs once, where the release's venv is built (else the module's fixtures skip as before)."""
    global _RUNS
    if _RUNS is None and (VENV / "bin" / "python").is_file() and (VENV / ".stamp").is_file():
        _RUNS = EarlyRuns(str(VENV / "bin" / "python"))
    return _RUNS


def started() -> EarlyRuns | None:
    return _RUNS


def close() -> None:
    global _RUNS
    if _RUNS is not None:
        _RUNS.close()
        _RUNS = None
