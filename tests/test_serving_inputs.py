"""What a server start reads before vLLM does anything: recipe names and paths, the built-in pair
(`surgery pair export`), its byte-level tokenizer, and the SURGERY_REPORT writer. No vLLM needed."""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from surgery import pairs
from surgery.cli import main
from surgery.text.diagnostics import SurgeryError
from surgery.tinymodels import bytevocab
from surgery.tinymodels import tinypair as tiny
from surgery.recipe import load_recipe
from surgery.vllm import report as rep

TEXTS = ["def __init__(self, ", "import os\nimport sys\n\n", "é ü 中文 \t\r\n\x00 \x7f", ""]


# --------------------------------------------------------------------------- recipe names and paths


def test_misspelled_shipped_name_gets_did_you_mean():
    with pytest.raises(SurgeryError) as ei:
        load_recipe("gemma4_mtp")
    d = ei.value.diagnostics[0]
    assert d.code == "SRG013" and d.hint.startswith("did you mean gemma4-mtp?")
    assert "eagle3" in d.hint  # the list of what exists


def test_unrelated_name_keeps_catalogue_hint():
    with pytest.raises(SurgeryError) as ei:
        load_recipe("zzzzqqqq")
    assert ei.value.diagnostics[0].hint == "run `surgery recipes` to list the shipped recipes"


def test_missing_recipe_file_hint_speaks_of_recipes(tmp_path):
    with pytest.raises(SurgeryError) as ei:
        load_recipe(tmp_path / "nothere.yaml")
    d = ei.value.diagnostics[0]
    assert d.code == "SRG001" and "recipe" in d.message and "recipe" in d.hint and "config.json" not in d.hint


# --------------------------------------------------------------------------- tokenizer


def test_committed_tokenizer_files_equal_a_fresh_build():
    from surgery.tinymodels.bytetokenizer import tokenizer_files

    fresh = tokenizer_files()
    assert set(fresh) == {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}
    for side in ("target", "draft"):
        for name, text in fresh.items():
            assert (tiny.WEIGHTS_DIR / side / name).read_text(encoding="utf-8") == text, (side, name)


def test_tokenizer_is_the_pairs_byte_encoding():
    from surgery.tinymodels.bytetokenizer import build_tokenizer

    tok = build_tokenizer()
    for text in TEXTS:
        ids = tok.encode(text).ids
        assert ids == bytevocab.encode(text), text
        assert tok.decode(ids) == text == bytevocab.decode(ids)
    assert tok.get_vocab_size() <= bytevocab.VOCAB_SIZE
    cfg = json.loads((tiny.WEIGHTS_DIR / "target" / "config.json").read_text())
    assert max(tok.get_vocab().values()) < cfg["vocab_size"]


def test_transformers_loads_the_exported_tokenizer(tmp_path):
    transformers = pytest.importorskip("transformers")
    out = pairs.export("gemma4-mtp", tmp_path)
    tok = transformers.AutoTokenizer.from_pretrained(out["target"])
    for text in TEXTS[:3]:
        assert tok(text).input_ids == bytevocab.encode(text)
        assert tok.decode(tok(text).input_ids, skip_special_tokens=True) == text
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (bytevocab.BOS_ID, bytevocab.EOS_ID, bytevocab.PAD_ID)


# --------------------------------------------------------------------------- surgery pair export


def test_pair_export_writes_model_folders(tmp_path, capsys):
    assert main(["pair", "export", "gemma4-mtp", str(tmp_path / "p")]) == 0
    for side in ("target", "draft"):
        folder = tmp_path / "p" / side
        names = sorted(f.name for f in folder.iterdir())
        assert names == ["config.json", "model.safetensors", "special_tokens_map.json", "tokenizer.json",
                         "tokenizer_config.json"], names
        assert (folder / "model.safetensors").read_bytes() == (tiny.WEIGHTS_DIR / side / "model.safetensors").read_bytes()
    assert "wrote" in capsys.readouterr().out
    # the exported folders validate against the recipe they were exported for
    assert main(["validate", "gemma4-mtp", "--target", str(tmp_path / "p" / "target"),
                 "--draft", str(tmp_path / "p" / "draft")]) == 0


def test_pair_export_refuses_to_overwrite_and_force_replaces(tmp_path, capsys):
    dest = tmp_path / "p"
    pairs.export("gemma4-mtp", dest)
    (dest / "target" / "stale.txt").write_text("x")
    assert main(["pair", "export", "gemma4-mtp", str(dest)]) == 2
    assert "SRG035" in capsys.readouterr().err
    assert main(["pair", "export", "gemma4-mtp", str(dest), "--force", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    assert not (dest / "target" / "stale.txt").exists()
    assert not [p for p in dest.iterdir() if p.name.startswith(".")]  # no temp folders left


def test_pair_export_unknown_name_lists_what_exists(tmp_path, capsys):
    assert main(["pair", "export", "mimo-v2-mtp", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert "SRG034" in err and "gemma4-mtp" in err and "deepseek-mtp" in err and "mimo-v2-mtp" in err
    assert not (tmp_path / "p").exists()


def test_pair_list(capsys):
    assert main(["pair", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == sorted(pairs.builtin_pairs())
    assert all(Path(pairs.PAIRS_DIR / e[s]).is_dir() for e in pairs.builtin_pairs().values() for s in ("target", "draft"))


def test_every_pair_names_a_shipped_recipe():
    from surgery.resources import shipped_recipes

    assert set(pairs.builtin_pairs()) <= {p.stem for p in shipped_recipes()}
    for name, entry in pairs.builtin_pairs().items():  # a registry entry names only known builders
        assert entry.get("rebuild") in (None, *pairs._REBUILDERS), name
        assert entry.get("tokenizer") in (None, "byte"), name


# --------------------------------------------------------------------------- SURGERY_REPORT writer


def _plan():
    from surgery.facts import read_facts
    from surgery.plan import Runtime
    from surgery.resolver import resolve

    return resolve(load_recipe("gemma4-mtp"), read_facts(tiny.WEIGHTS_DIR / "draft"),
                   read_facts(tiny.WEIGHTS_DIR / "target"), Runtime(engine="vllm"))


def test_report_keys_and_verified_flag():
    from surgery.applier.core import ApplyReport, Check, VerifyReport
    from surgery.text.diagnostics import diag

    plan = _plan()
    ver = VerifyReport([Check("op0", "x", True)])
    na = [diag("SRG321", "op9: not performed")]
    loaded = rep.build_report(plan, ApplyReport(["op0"], na, [], 0.01), ver)
    assert list(loaded) == list(rep.KEYS)
    assert loaded["stage"] == "loaded" and loaded["verified"] is True and loaded["kv_binding"] is None
    assert loaded["not_applicable"][0]["code"] == "SRG321" and loaded["plan"]["recipe"] == "gemma4-mtp"
    bound = rep.build_report(plan, ApplyReport(["op0"], [], [], 0.01), ver, kv_checks=[Check("op0", "kv", False)])
    assert bound["stage"] == "kv_bound" and bound["verified"] is False and bound["kv_binding"]["ok"] is False
    assert rep.build_report(plan, None, None)["verified"] is False  # nothing verified is not "verified"


def test_report_write_is_atomic_and_update_keeps_keys(tmp_path, monkeypatch):
    path = tmp_path / "sub" / "report.json"
    monkeypatch.setenv(rep.ENV_REPORT, str(path))
    assert rep.report_path() == path and rep.report_path(2) == tmp_path / "sub" / "report.json.rank2"
    stop, seen = threading.Event(), []

    def reader():  # a monitor polling the file never sees a partial document
        while not stop.is_set():
            if path.exists():
                seen.append(json.loads(path.read_text())["stage"])

    t = threading.Thread(target=reader)
    t.start()
    try:
        for i in range(200):
            rep.write_json_atomic(path, {"stage": f"s{i}", "pad": "x" * 20000})
    finally:
        stop.set()
        t.join()
    assert seen and all(s.startswith("s") for s in seen)
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    data = rep.update(path, findings=[{"code": "SRG700"}])
    assert data["findings"] == [{"code": "SRG700"}] and rep.read_report(path)["stage"] == "s199"
    assert [p.name for p in path.parent.iterdir()] == ["report.json"]


def test_report_unwritable_is_a_coded_warning(tmp_path, monkeypatch):
    import logging
    from types import SimpleNamespace

    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(rep.ENV_REPORT, str(blocker / "report.json"))  # parent is a file
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    from surgery.vllm.log import get_logger

    logger = get_logger()
    logger.addHandler(handler)
    try:
        from surgery.vllm import state

        proposer = SimpleNamespace()
        state.of(proposer).plan = _plan()
        assert rep.write_for_proposer(proposer, rank=0) is None
    finally:
        logger.removeHandler(handler)
    assert any("SRG420" in r.getMessage() for r in records)


def test_no_report_without_env(monkeypatch):
    from types import SimpleNamespace

    from surgery.vllm import state

    monkeypatch.delenv(rep.ENV_REPORT, raising=False)
    proposer = SimpleNamespace()
    state.of(proposer).plan = object()
    assert rep.write_for_proposer(proposer, rank=0) is None
    assert os.environ.get(rep.ENV_REPORT) is None
