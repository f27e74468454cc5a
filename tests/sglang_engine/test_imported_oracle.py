"""Opt-in (`-m slow`): SGLang's IMPORTED functions, in the separate SGLang venv, against surgery's
rules (tools/sglang_imported_oracle.py). Deselected by default because CI has no SGLang venv (SGLang
pins CUDA packages and another transformers); the default oracle runs the same functions cut from
the pinned wheel (test_oracle.py). Selected without a venv (SURGERY_SGLANG_PYTHON unset), it skips and
the reason says how to make one (`pytest -m slow -rs`)."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from testpaths import ROOT

pytestmark = pytest.mark.slow


def test_imported_sglang_functions_equal_the_rules():
    python = os.environ.get("SURGERY_SGLANG_PYTHON")
    if not python:
        pytest.skip("needs an SGLang venv: set SURGERY_SGLANG_PYTHON to the python of an SGLang venv (bash scripts/sglang_venv.sh /tmp/sgl "
                    "-> /tmp/sgl/bin/python)")
    env = dict(os.environ, PYTHONPATH=f"{ROOT}:{ROOT / 'tools' / 'sglang_cpu_stubs'}", SGLANG_USE_CPU_ENGINE="1")
    res = subprocess.run([python, str(ROOT / "tools" / "sglang_imported_oracle.py")], capture_output=True, text=True,
                         env=env, timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    result = json.loads(res.stdout.strip().splitlines()[-1])
    assert result["sglang"] == "0.5.21" and result["cases"] >= 32 and result["mismatches"] == []
