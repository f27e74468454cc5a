"""Opt-in (`-m slow`, about 4 minutes): real SGLang 0.5.21 on this CPU, in the SGLang venv
(scripts/sglang_venv.sh), with spec-surgery's `sglang.srt.plugins` entry point installed there
(`pip install --no-deps -e .`). For each family the speculative engine gets to its draft-load
point: the hook applies the recipe to SGLang's own draft and target models and verifies it, and
the log line shows SGLang's wiring before and the recipe's after. SGLang then stops at the blocker
docs/sglang.md names (no EAGLE attention backend on this CPU). Deselected by default because CI
has no SGLang venv; selected without one (SURGERY_SGLANG_PYTHON unset) each test skips and the
reason says how to make one (`pytest -m slow -rs` lists it), so `-m slow` is not red on a machine
that lacks it."""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from testpaths import ROOT

from surgery.sglang.log import APPLIED

pytestmark = pytest.mark.slow
BLOCKER = "ValueError: EAGLE is not supported in attention backend torch_native"


def sglang_python() -> str:
    python = os.environ.get("SURGERY_SGLANG_PYTHON")
    if not python:
        pytest.skip("needs an SGLang venv: set SURGERY_SGLANG_PYTHON to the python of an SGLang venv with spec-surgery installed in it "
                    "(bash scripts/sglang_venv.sh /tmp/sgl && /tmp/sgl/bin/pip install --no-deps -e .)")
    return python


def export(name: str, folder) -> None:
    from surgery.cli import main

    assert main(["pair", "export", name, str(folder), "--force"]) == 0


def run_engine(recipe: str, algorithm: str, pair) -> str:
    env = dict(os.environ, SURGERY_RECIPE=recipe, SGLANG_USE_CPU_ENGINE="1",
               PYTHONPATH=str(ROOT / "tools" / "sglang_cpu_stubs"))
    try:
        res = subprocess.run([sglang_python(), str(ROOT / "tools" / "sglang_cpu_run.py"), algorithm, str(pair), "1"],
                             capture_output=True, text=True, env=env, timeout=70, cwd=ROOT)
        out = res.stdout + res.stderr
    except subprocess.TimeoutExpired as exc:  # SGLang's Engine() waits after its scheduler died
        out = (exc.stdout or b"").decode() + (exc.stderr or b"").decode() if isinstance(exc.stdout, bytes) \
            else (exc.stdout or "") + (exc.stderr or "")
    return out


def applied_line(out: str) -> dict[str, str]:
    """The fields of the first APPLIED line in SGLang's output (surgery/sglang/log.py)."""
    lines = APPLIED.find(out)
    assert lines, out[-3000:]
    return lines[0]


def wirings(line: dict[str, str]) -> tuple[dict, dict]:
    return tuple(json.loads(line[k].replace("'", '"')) for k in ("sglang_wiring", "after_recipe"))


def test_eagle3_on_sglang_verified_at_draft_load_with_the_planned_capture(tmp_path):
    export("eagle3", tmp_path)
    cfg_file = tmp_path / "draft" / "config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = [1, 4, 7]  # ids SGLang can capture (SRG362 otherwise)
    cfg_file.write_text(json.dumps(cfg))
    out = run_engine("eagle3", "EAGLE3", tmp_path)
    line = applied_line(out)
    assert line["verification"] == "PASS" and "0 not applicable" in line["summary"], line
    assert wirings(line) == ({"input_embeddings": "target", "lm_head": "own"},) * 2
    assert "set layers_to_capture=[2, 4, 5]; the planned [1, 4, 7] put back" in out and BLOCKER in out


def test_eagle3_builtin_ids_are_refused_in_sglangs_scheduler(tmp_path):
    export("eagle3", tmp_path)
    out = run_engine("eagle3", "EAGLE3", tmp_path)
    assert "SRG362" in out and "[0, 8]" in out


@pytest.mark.parametrize("recipe, algorithm", [("eagle", "EAGLE"), ("mtp", "NEXTN")])
def test_eagle_and_mtp_on_sglang_wire_as_sglang_does(tmp_path, recipe, algorithm):
    export(recipe, tmp_path)
    line = applied_line(out := run_engine(recipe, algorithm, tmp_path))
    assert line["verification"] == "PASS", line
    assert wirings(line) == ({"input_embeddings": "target", "lm_head": "target"},) * 2 and BLOCKER in out


def test_a_head_of_its_own_sglang_replaces_is_kept_by_the_recipe(tmp_path):
    """The ablation row live: the EAGLE head brings its own, different embedding and lm_head."""
    import torch
    from safetensors.torch import load_file, save_file

    export("eagle", tmp_path)
    weights_file = tmp_path / "draft" / "model.safetensors"
    tensors = load_file(str(weights_file))
    g = torch.Generator().manual_seed(7)
    rows, width = 264, 64
    tensors["embed_tokens.weight"] = torch.randn(rows, width, generator=g) * 0.02
    tensors["lm_head.weight"] = torch.randn(rows, width, generator=g) * 0.02
    save_file(tensors, str(weights_file), metadata={"format": "pt"})
    line = applied_line(run_engine("eagle", "EAGLE", tmp_path))
    assert line["verification"] == "PASS" and line["difference"] == "the recipe rewired input_embeddings, lm_head"
    assert wirings(line) == ({"input_embeddings": "target", "lm_head": "target"},
                             {"input_embeddings": "own", "lm_head": "own"})
    shutil.rmtree(tmp_path / "draft")
