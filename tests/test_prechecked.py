"""Shipped recipes skip the run-time schema check only when their bytes are the ones checked at
build time (surgery/prechecked.py); anything else is checked as before."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from surgery.text.diagnostics import SurgeryError
from surgery.recipe import parse_recipe
from surgery.resources import shipped_recipes

ROOT = Path(__file__).resolve().parent.parent


def test_every_shipped_recipe_is_recorded():
    record = json.loads((ROOT / "surgery" / "data" / "prechecked_recipes.json").read_text())
    assert sorted(record["recipes"]) == sorted(p.name for p in shipped_recipes())


def test_a_shipped_recipe_loads_without_jsonschema():
    probe = ("import sys\nfrom surgery.recipe import load_recipe\nload_recipe('gemma4-mtp')\n"
             "print('jsonschema' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_an_edited_shipped_recipe_is_schema_checked_at_run_time():
    text = (ROOT / "recipes" / "gemma4-mtp.yaml").read_text()
    parse_recipe(text)  # as shipped: fine
    edited = text.replace("\nops:", "\nnot_a_key: 1\nops:", 1)
    assert edited != text
    with pytest.raises(SurgeryError) as exc:
        parse_recipe(edited)
    assert exc.value.diagnostics[0].code == "SRG101"


def test_a_changed_schema_voids_the_record(monkeypatch, tmp_path):
    from surgery import prechecked

    schema = tmp_path / "recipe.schema.json"
    schema.write_text((ROOT / "schemas" / "recipe.schema.json").read_text() + "\n")
    monkeypatch.setattr(prechecked, "schemas_dir", lambda: tmp_path)
    prechecked._record.cache_clear()
    try:
        assert not prechecked.already_checked((ROOT / "recipes" / "gemma4-mtp.yaml").read_text())
    finally:
        prechecked._record.cache_clear()
