"""The tiny Gemma 4 pair's cache (surgery/tinymodels/tinypair.py) where the committed weights are absent: it
uses a cache that tools/build_tiny_pair.py built, and otherwise says how to build one (SRG001); the
package never runs a file of tools/ itself."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from surgery.text.diagnostics import SurgeryError
from surgery.tinymodels import tinypair as pair


def test_missing_pair_is_srg001_naming_the_builder(tmp_path, monkeypatch):
    monkeypatch.setenv("SURGERY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(pair, "WEIGHTS_DIR", tmp_path / "no-weights")
    with pytest.raises(SurgeryError) as ei:
        pair.ensure_tiny_pair()
    (d,) = ei.value.diagnostics
    assert d.code == "SRG001" and "tools/build_tiny_pair.py" in d.hint
    assert not (tmp_path / "cache" / "tiny-gemma4" / "target").exists()


def test_a_built_cache_serves_an_install_without_weights(tmp_path, monkeypatch):
    if not (pair.WEIGHTS_DIR / "target" / "model.safetensors").is_file():
        pytest.skip("no committed tiny weights in this checkout")
    root = tmp_path / "tiny-gemma4"
    for side in ("target", "draft"):  # what `python tools/build_tiny_pair.py` leaves in the cache
        shutil.copytree(pair.WEIGHTS_DIR / side, root / side)
    monkeypatch.setenv("SURGERY_CACHE", str(tmp_path))
    monkeypatch.setattr(pair, "WEIGHTS_DIR", tmp_path / "no-weights")
    assert pair.ensure_tiny_pair() == (root / "target", root / "draft")


def test_package_runs_no_file_of_tools():
    text = Path(pair.__file__).read_text(encoding="utf-8")
    assert "spec_from_file_location" not in text and "exec_module" not in text
