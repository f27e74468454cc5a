"""`surgery convert` (issue 24, P3): round trips bit-identical (tensors and configs), ids translated
between conventions, provenance written, refusals coded with nothing left in OUT_DIR. Uses the
built-in EAGLE-3 head (surgery/data/pairs/eagle3) and the ModelOpt / SpecForge fixtures; no torch."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from surgery.cli import main
from surgery.text.diagnostics import SurgeryError
from surgery.formats.convert import converted
from surgery.commands.convert_folder import PROVENANCE, convert_folder, sha256

ROOT = Path(__file__).resolve().parents[2]
PAIRS = ROOT / "surgery" / "data" / "pairs"
DRAFT = PAIRS / "eagle3" / "draft"
TARGET = PAIRS / "llama-target"
FORMATS = ROOT / "tests" / "data" / "formats"


def _cfg(folder: Path) -> dict:
    return json.loads((folder / "config.json").read_text())


def test_eagle_to_speculators_and_back_is_bit_identical(tmp_path):
    convert_folder(str(DRAFT), "speculators", str(tmp_path / "spec"), target=str(TARGET), producer="vllm")
    spec = _cfg(tmp_path / "spec")
    assert spec["eagle_aux_hidden_state_layer_ids"] == [0, 7, 8] and spec["norm_before_residual"] is False
    assert spec["speculators_config"]["verifier"]["name_or_path"] == str(TARGET)
    convert_folder(str(tmp_path / "spec"), "eagle", str(tmp_path / "back"), target=str(TARGET))
    assert _cfg(tmp_path / "back") == _cfg(DRAFT)
    for name in ("model.safetensors", "tokenizer.json") if (DRAFT / "tokenizer.json").exists() else ("model.safetensors",):
        assert (tmp_path / "back" / name).read_bytes() == (DRAFT / name).read_bytes()
    prov = json.loads((tmp_path / "spec" / PROVENANCE).read_text())
    assert prov["source"]["sha256"]["model.safetensors"] == sha256(DRAFT / "model.safetensors")
    assert prov["tool"].startswith("spec-surgery ") and "eagle_aux_hidden_state_layer_ids" in prov["fields"]


@pytest.mark.parametrize("folder", ["modelopt-llama3.1-8b-eagle3", "specforge-llama3.1-8b-eagle3"])
def test_config_round_trips_through_speculators(folder):
    src = _cfg(FORMATS / folder)
    spec, _ = converted(src, "speculators", 32, verifier="meta-llama/Llama-3.1-8B-Instruct",
                        verifier_architectures=("LlamaForCausalLM",))
    back, _ = converted(spec, "modelopt" if "eagle_config" in src else "eagle", 32)
    assert back == src


def test_modelopt_ids_are_translated_into_vllms_convention():
    spec, why = converted(_cfg(FORMATS / "modelopt-llama3.1-8b-eagle3"), "speculators", 32, verifier="t",
                         verifier_architectures=("LlamaForCausalLM",))
    assert spec["eagle_aux_hidden_state_layer_ids"] == [2, 16, 29]  # ModelOpt [1, 15, 28] = layer outputs
    assert "modelopt" in why["eagle_aux_hidden_state_layer_ids"]


def _refused(argv, out: Path, code: str, capsys):
    rc = main(argv + ["--json"])
    result = json.loads(capsys.readouterr().out)
    assert rc != 0 and result["diagnostics"][0]["code"] == code
    assert not out.exists()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}-")]  # no staging left


def test_refusals_write_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    _refused(["convert", str(DRAFT), "--to", "speculators", str(out), "--target", str(TARGET)], out, "SRG660", capsys)
    _refused(["convert", str(DRAFT), "--to", "modelopt", str(out), "--target", str(TARGET), "--producer", "vllm"],
             out, "SRG662", capsys)  # vLLM id 0 (the embedding) has no output-of-layer id
    odd = tmp_path / "odd"
    shutil.copytree(DRAFT, odd)
    cfg = _cfg(odd)
    cfg["eagle_config"] = {"mystery": 1}
    (odd / "config.json").write_text(json.dumps(cfg))
    _refused(["convert", str(odd), "--to", "speculators", str(out), "--target", str(TARGET), "--producer", "vllm"],
             out, "SRG660", capsys)


def test_an_existing_out_dir_is_kept_without_force(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep").write_text("x")
    assert main(["convert", str(DRAFT), "--to", "speculators", str(out), "--target", str(TARGET), "--producer",
                 "vllm", "--json"]) == 2
    assert (out / "keep").read_text() == "x"
    with pytest.raises(SurgeryError):
        convert_folder(str(DRAFT), "speculators", str(out), target=str(TARGET), producer="vllm")


@pytest.mark.parametrize("draft", [FORMATS / "speculators-miniature-dflash", PAIRS / "dflash" / "draft",
                                   PAIRS / "dspark" / "draft"])
def test_block_drafters_are_refused_by_convert(draft, tmp_path, capsys):
    out = tmp_path / "out"
    _refused(["convert", str(draft), "--to", "eagle", str(out), "--target", str(TARGET)], out, "SRG666", capsys)
