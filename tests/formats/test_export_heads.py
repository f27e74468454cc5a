"""The built-in heads exported in every format (issue 24): what each format can hold, what it
refuses and how a user proceeds, byte-identical round trips through all three formats, and the
serving guard (SRG656 for the runner that will serve). Config-level: no engine starts; the heads
are served for real in tests/vllm/test_formats_serve.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from surgery.cli import main
from surgery.text.diagnostics import SurgeryError
from surgery.facts import read_facts
from surgery.commands.convert_folder import PROVENANCE, convert_folder
from surgery.formats.findings import misread_by_runner

ROOT = Path(__file__).resolve().parents[2]
PAIRS = ROOT / "surgery" / "data" / "pairs"
TARGET = PAIRS / "llama-target"
BUILTIN = PAIRS / "eagle3" / "draft"  # vLLM ids (0, 7, 8)
OUTPUTS = PAIRS / "eagle3-outputs" / "draft"  # vLLM ids (1, 7, 8) = ModelOpt / SpecForge (0, 6, 7)
EAGLE1 = PAIRS / "eagle" / "draft"


def _cfg(folder: Path) -> dict:
    return json.loads((folder / "config.json").read_text())


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.name != PROVENANCE}


def test_the_second_head_goes_through_every_format_and_back_byte_for_byte(tmp_path):
    """eagle -> modelopt -> speculators -> eagle: every file identical to the shipped head."""
    convert_folder(str(OUTPUTS), "modelopt", str(tmp_path / "mo"), target=str(TARGET), producer="vllm")
    mo = _cfg(tmp_path / "mo")
    assert mo["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 6, 7]  # output of layer k
    assert "eagle_aux_hidden_state_layer_ids" not in mo
    convert_folder(str(tmp_path / "mo"), "speculators", str(tmp_path / "spec"), target=str(TARGET))
    assert _cfg(tmp_path / "spec")["eagle_aux_hidden_state_layer_ids"] == [1, 7, 8]  # vLLM's convention
    convert_folder(str(tmp_path / "spec"), "eagle", str(tmp_path / "back"), target=str(TARGET))
    assert _files(tmp_path / "back") == _files(OUTPUTS)


def test_the_shipped_head_cannot_be_modelopt_and_the_hint_is_a_way_that_works(tmp_path, capsys):
    out = tmp_path / "mo"
    rc = main(["convert", str(BUILTIN), "--to", "modelopt", str(out), "--target", str(TARGET), "--producer", "vllm",
               "--json"])
    d = json.loads(capsys.readouterr().out)["diagnostics"][0]
    assert rc != 0 and d["code"] == "SRG662" and not out.exists()
    assert "--to speculators" in d["hint"]
    spec = tmp_path / "spec"
    assert main(["convert", str(BUILTIN), "--to", "speculators", str(spec), "--target", str(TARGET), "--producer",
                 "vllm", "--json"]) == 0
    capsys.readouterr()
    assert main(["validate", "eagle3", "--target", str(TARGET), "--draft", str(spec), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True


@pytest.mark.parametrize("to", ["speculators", "eagle", "modelopt"])
def test_the_eagle1_head_has_no_other_format(tmp_path, to):
    with pytest.raises(SurgeryError) as err:
        convert_folder(str(EAGLE1), to, str(tmp_path / "out"), target=str(TARGET))
    assert err.value.diagnostics[0].code == "SRG663" and "eagle3" in err.value.diagnostics[0].message
    assert not (tmp_path / "out").exists()


def _export(tmp_path, src, to):
    out = tmp_path / f"{src.parent.name}-{to}"
    convert_folder(str(src), to, str(out), target=str(TARGET), producer="vllm")
    return read_facts(out)


def test_the_runner_that_serves_a_modelopt_export_reads_other_layers(tmp_path):
    """The serving guard the plugin raises at engine start: the ModelOpt export of the second head is
    read one layer early by the legacy runner and on the defaults by the v2 runner; its speculators and
    eagle exports are read right by both."""
    target = read_facts(TARGET)
    mo = _export(tmp_path, OUTPUTS, "modelopt")
    legacy, v2 = misread_by_runner(mo, target, "legacy"), misread_by_runner(mo, target, "v2")
    assert [d.code for d in legacy] == ["SRG656"] and "[0, 6, 7]" in legacy[0].message
    assert "[1, 7, 8]" in legacy[0].message and "--to speculators" in legacy[0].hint
    assert [d.code for d in v2] == ["SRG656"] and "[2, 4, 5]" in v2[0].message
    for to in ("speculators", "eagle"):
        for src in (OUTPUTS, BUILTIN):
            facts = _export(tmp_path, src, to)
            assert misread_by_runner(facts, target, "legacy") == misread_by_runner(facts, target, "v2") == []


@pytest.mark.parametrize("to", ["speculators", "eagle", "modelopt"])
def test_validate_plan_new_accept_every_export(tmp_path, capsys, to):
    """Every format the second head is exported in is read by validate / plan / new (audit: the slow
    test in tests/vllm/test_families.py); new picks eagle3 from the format."""
    out = tmp_path / to
    convert_folder(str(OUTPUTS), to, str(out), target=str(TARGET), producer="vllm")
    for cmd in ("validate", "plan"):
        rc = main([cmd, "eagle3", "--target", str(TARGET), "--draft", str(out), "--json"])
        r = json.loads(capsys.readouterr().out)
        codes = [d["code"] for d in r.get("diagnostics", ())]
        assert "SRG652" in codes, codes  # the format line
        assert (rc == 0) == (to != "modelopt"), (cmd, codes)  # ModelOpt: SRG656, the ids misread
    rc = main(["new", "--target", str(TARGET), "--draft", str(out), "--json"])
    r = json.loads(capsys.readouterr().out)
    assert rc == 0 and r["recipe"] == "eagle3" and r["draft_format"]["format"] == to


def test_the_speculators_export_names_the_verifiers_architectures(tmp_path):
    """The speculators library's own config class (VerifierConfig) requires them, vLLM does not read
    them: without them the library refused our export (bench/speculators_crosscheck.py)."""
    convert_folder(str(BUILTIN), "speculators", str(tmp_path / "spec"), target=str(TARGET), producer="vllm")
    verifier = _cfg(tmp_path / "spec")["speculators_config"]["verifier"]
    assert verifier == {"name_or_path": str(TARGET), "architectures": _cfg(TARGET)["architectures"]}


def test_apply_serves_a_speculators_files_k_unless_asked_otherwise(tmp_path):
    from surgery.commands.vllm_apply import draft_format, serving_k

    out = tmp_path / "spec"
    convert_folder(str(OUTPUTS), "speculators", str(out), target=str(TARGET), producer="vllm", k=5)
    head = draft_format(out)
    assert serving_k(head, None) == (5, []) and serving_k(head, 5) == (5, [])
    k, notes = serving_k(head, 2)
    assert k == 2 and [n.code for n in notes] == ["SRG655"]
    assert serving_k(draft_format(OUTPUTS), None) == (3, [])


def test_new_takes_the_method_from_the_format(tmp_path):
    """A format-marked draft: only recipes for the method the format states are candidates; the
    others are listed with the reason (a plain config is matched as before)."""
    from surgery.new import choose

    out = tmp_path / "mo"
    convert_folder(str(OUTPUTS), "modelopt", str(out), target=str(TARGET), producer="vllm")
    result = choose(read_facts(TARGET), read_facts(out))
    assert result.chosen.name == "eagle3" and result.draft_format["method"] == "eagle3"
    from surgery.recipe import load_recipe

    # recipes for another method (peagle is eagle3 + parallel drafting: the same method, judged on fit)
    others = [c for c in result.candidates if (load_recipe(c.name).engine or {}).get("vllm", {}).get("method") != "eagle3"]
    assert others and all(not c.applies and any("modelopt-format head" in r.message for r in c.reasons)
                          for c in others)
    assert choose(read_facts(TARGET), read_facts(EAGLE1)).draft_format is None
