"""Issue 42 classes 3 and 7: config defaults applied the way transformers applies them, and said aloud.

- A field absent from config.json takes its transformers config class's declared default
  (surgery/data/config_class_defaults.json, generated from the installed transformers and checked
  against it in tests/test_config_class_defaults.py), plus the derivations config_defaults.yaml holds.
- A member-geometry default (sizes, layer counts, layer_types, KV sharing) that decides a KV map or a
  compared value is a warning, SRG208, naming what it decided; family-wide ones (token ids) are notes.
- gemma-3-27b-it's text_config omits bos_token_id: Gemma3TextConfig's 2 applies (was a false SRG331
  "bos 2 vs None"); the pair is still refused on its vocabularies (262144 vs 262208), as vLLM's
  verify_equal_vocab_size_if_draft_model refuses it.
"""
from __future__ import annotations

import copy
import json

import pytest

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from testpaths import CONFIGS  # noqa: E402

E2B = CONFIGS / "gemma4" / "gemma-4-E2B-it.json"
E2B_ASSISTANT = CONFIGS / "gemma4" / "gemma-4-E2B-it-assistant.json"


def _validate(run_cli, tmp_path, recipe, target, draft):
    paths = []
    for name, cfg in (("target.json", target), ("draft.json", draft)):
        if isinstance(cfg, dict):
            p = tmp_path / name
            p.write_text(json.dumps(cfg))
            paths.append(p)
        else:
            paths.append(cfg)
    rc, out, err = run_cli("validate", recipe, "--target", paths[0], "--draft", paths[1], "--json")
    assert "Traceback" not in err
    return rc, json.loads(out)


def _without(path, key, level="text_config"):
    cfg = json.loads(path.read_text())
    (cfg[level] if level else cfg).pop(key)
    return cfg


def _codes(out, severity=None):
    return [d["code"] for d in out["diagnostics"] if severity is None or d["severity"] == severity]


def test_the_published_e2b_pair_uses_no_default(run_cli, tmp_path):
    rc, out = _validate(run_cli, tmp_path, "gemma4-mtp", E2B, E2B_ASSISTANT)
    assert rc == 0 and "SRG208" not in _codes(out) and "SRG203" not in _codes(out)
    assert [r["target"] for r in out["layer_maps"]["kv_source"]] == [13, 13, 13, 14]


@pytest.mark.parametrize("key,targets", [
    ("layer_types", [14, 14, 14, 11]),  # Gemma4TextConfig: period 6, last layer forced full (E2B's is period 5)
    ("num_kv_shared_layers", [33, 33, 33, 34]),  # class default 0: no KV-shared tail
])
def test_a_default_that_moves_the_kv_map_is_said_aloud(run_cli, tmp_path, key, targets):
    rc, out = _validate(run_cli, tmp_path, "gemma4-mtp", _without(E2B, key), E2B_ASSISTANT)
    said = [d for d in out["diagnostics"] if d["code"] == "SRG208"]
    assert rc == 0 and len(said) == 1 and said[0]["severity"] == "warning"
    assert [r["target"] for r in out["layer_maps"]["kv_source"]] == targets
    shown = ", ".join(f"{i}->{t}" for i, t in enumerate(targets))
    assert f"text_config.{key}" in said[0]["location"] and f"kv_source ({shown})" in said[0]["message"]


def test_a_missing_layer_count_is_the_class_default_and_refused_against_the_layer_list(run_cli, tmp_path):
    rc, out = _validate(run_cli, tmp_path, "gemma4-mtp", _without(E2B, "num_hidden_layers"), E2B_ASSISTANT)
    assert rc != 0
    bad = [d for d in out.get("diagnostics", []) if d["code"] == "SRG202"] if isinstance(out, dict) else []
    assert bad and "config class's default" in bad[0]["message"]


def test_a_missing_hidden_size_is_the_class_default_compared_aloud(run_cli, tmp_path):
    rc, out = _validate(run_cli, tmp_path, "gemma4-mtp", _without(E2B, "hidden_size"), E2B_ASSISTANT)
    assert rc == 1 and "SRG314" in _codes(out, "error")  # Gemma4TextConfig's 2304 is not the assistant's 1536
    said = [d for d in out["diagnostics"] if d["code"] == "SRG208"]
    assert said and "target.hidden_size = 2304" in said[0]["message"]


def test_a_missing_backbone_width_is_the_class_default_compared_aloud(run_cli, tmp_path):
    rc, out = _validate(run_cli, tmp_path, "gemma4-mtp", E2B, _without(E2B_ASSISTANT, "backbone_hidden_size", None))
    said = [d for d in out["diagnostics"] if d["code"] == "SRG208"]
    assert rc == 0 and [d["severity"] for d in said] == ["warning"]
    assert "draft.backbone_hidden_size = 1536" in said[0]["message"]


def test_a_required_size_with_no_class_default_is_an_error(run_cli, tmp_path):
    cfg = json.loads(E2B_ASSISTANT.read_text())
    cfg["model_type"] = "no_such_family"  # no transformers class, so no default
    cfg.pop("backbone_hidden_size")
    cfg["text_config"] = {k: v for k, v in cfg["text_config"].items() if k != "hidden_size"}
    cfg["text_config"]["model_type"] = "no_such_family_text"
    rc, out, err = run_cli("validate", "gemma4-mtp", "--target", E2B, "--draft",
                           _write(tmp_path / "d.json", cfg), "--json")
    assert rc != 0 and "Traceback" not in err
    assert "SRG201" in out + err


def _write(p, cfg):
    p.write_text(json.dumps(cfg))
    return p


def test_gemma3_27b_bos_is_the_class_default(run_cli, tmp_path):
    rc, out = _validate(run_cli, tmp_path, "draft-model", CONFIGS / "gemma-3-27b-it.json", CONFIGS / "gemma-3-1b-it.json")
    assert rc == 1 and set(_codes(out, "error")) == {"SRG313"}  # 262144 vs 262208: vLLM refuses the vocabularies
    assert "SRG331" not in _codes(out)
    notes = [d["message"] for d in out["diagnostics"] if d["code"] == "SRG203"]
    assert any("bos_token_id" in m and "2" in m for m in notes)
    # the same vocabulary: then the pair is valid (bos 2 = 2, eos [1, 106] = [1, 106])
    draft = json.loads((CONFIGS / "gemma-3-1b-it.json").read_text())
    draft["vocab_size"] = 262208
    rc, out = _validate(run_cli, tmp_path, "draft-model", CONFIGS / "gemma-3-27b-it.json", draft)
    assert rc == 0 and _codes(out, "error") == []


def test_an_int_eos_in_the_other_sides_list_is_the_same_tokenizer(run_cli, tmp_path):
    target = json.loads((CONFIGS / "Llama-3.1-8B-Instruct.json").read_text())  # eos [128001, 128008, 128009]
    draft = json.loads((CONFIGS / "Llama-3.2-1B-Instruct.json").read_text())
    draft["eos_token_id"] = 128009
    rc, out = _validate(run_cli, tmp_path, "draft-model", target, copy.deepcopy(draft))
    assert "SRG331" not in _codes(out)
    draft["eos_token_id"] = 2
    rc, out = _validate(run_cli, tmp_path, "draft-model", target, draft)
    assert "SRG331" in _codes(out, "error")
