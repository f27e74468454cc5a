"""surgery/formats without vLLM (config-level, milliseconds): recognition, conventions, the findings
`surgery validate` shows for each published format, and coded refusals of malformed speculators files.
The vLLM oracle for the same files is tests/vllm/test_formats_oracle.py."""
from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from surgery.text.diagnostics import SurgeryError
from surgery.facts import facts_from_config, read_facts
from surgery.formats import format_of, recognise
from surgery.formats.conventions import default_ids, from_vllm, runner_reads, to_vllm, trained_on
from surgery.formats.findings import format_findings

ROOT = Path(__file__).resolve().parents[2]
FORMATS = ROOT / "tests" / "data" / "formats"
TARGET = ROOT / "tests" / "data" / "configs" / "Llama-3.1-8B-Instruct.json"
SPEC = FORMATS / "speculators-llama3.1-8b-eagle3"


def _codes(draft, **kw):
    return [d.code for d in format_findings(read_facts(draft), read_facts(TARGET), **kw)]


def _validate(draft, *extra):
    return subprocess.run([sys.executable, "-m", "surgery", "validate", "eagle3", "--target", str(TARGET),
                           "--draft", str(draft), "--json", *extra], cwd=ROOT, capture_output=True, text=True)


@pytest.mark.parametrize("folder,name,producer", [
    ("speculators-llama3.1-8b-eagle3", "speculators", "speculators"),
    ("modelopt-llama3.1-8b-eagle3", "modelopt", "modelopt"),
    ("specforge-llama3.1-8b-eagle3", "eagle", None),
    ("sglang-llama3.1-8b-eagle3-ids", "eagle", None),
])
def test_each_format_is_recognised(folder, name, producer):
    fmt = format_of(read_facts(FORMATS / folder))
    assert (fmt.name, fmt.producer) == (name, producer)


def test_a_speculators_head_validates_for_its_target_with_exit_0():
    """The issue's acceptance case (was SRG010 `model_type` missing)."""
    proc = _validate(SPEC)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    notes = [d for d in json.loads(proc.stdout)["diagnostics"] if d["code"] == "SRG652"]
    assert len(notes) == 1
    assert "legacy runner [2, 16, 29]" in notes[0]["message"] and "v2 runner [2, 16, 29]" in notes[0]["message"]
    assert "verifier meta-llama/Llama-3.1-8B-Instruct = target" in notes[0]["message"]


def test_speculators_facts_are_the_layer_config_plus_the_head_fields():
    f = read_facts(SPEC)
    assert (f.model_type, f.architectures) == ("llama", ("Eagle3LlamaForCausalLM",))
    assert (f["hidden_size"], f["vocab_size"], f["draft_vocab_size"], f["num_hidden_layers"]) == (4096, 128256, 32000, 1)


def test_conventions_translate_as_the_table_says():
    assert default_ids("vllm", 32) == (2, 16, 29)
    assert to_vllm(default_ids("modelopt", 32), "modelopt") == (2, 16, 29)  # same layers, other numbering
    assert to_vllm(default_ids("specforge", 32), "specforge") == (2, 16, 29)
    assert to_vllm((1, 15, 28), "sglang") == (2, 16, 29)
    assert to_vllm((2, 16, 29), "sglang") == (2, 16, 29)  # sglang#25454: +1 only when the first id is 1
    assert from_vllm((2, 16, 29), "modelopt") == (1, 15, 28)
    with pytest.raises(SurgeryError) as exc:
        from_vllm((0, 7, 8), "modelopt")  # output-of-layer ids cannot name the embedding
    assert exc.value.diagnostics[0].code == "SRG662"


def test_modelopt_nested_ids_mismatch_on_the_legacy_runner_and_split_the_runners():
    draft = FORMATS / "modelopt-llama3.1-8b-eagle3"
    fmt = format_of(read_facts(draft))
    assert runner_reads(fmt, 32) == {"legacy": ((1, 15, 28), "eagle_config.eagle_aux_hidden_state_layer_ids"),
                                     "v2": ((2, 16, 29), "engine default (2, L // 2, L - 3)")}
    assert trained_on(fmt, 32)[0] == (2, 16, 29)
    codes = _codes(draft)
    assert codes.count("SRG656") == 1 and "SRG657" in codes
    assert _validate(draft).returncode == 1


def test_explicit_ids_in_a_plain_config_are_ambiguous_until_the_producer_is_named():
    draft = FORMATS / "sglang-llama3.1-8b-eagle3-ids"
    assert "SRG659" in _codes(draft) and "SRG656" not in _codes(draft)
    assert _codes(draft, producer="sglang").count("SRG656") == 2  # both runners read [1, 15, 28]
    assert "SRG656" not in _codes(draft, producer="vllm")
    assert _validate(draft, "--producer", "sglang").returncode == 1


def test_absent_norm_before_residual_is_flagged_and_k_is_checked():
    draft = FORMATS / "speculators-llama3.1-8b-eagle3-nbr-absent"
    assert "SRG658" in _codes(draft)
    assert "SRG658" not in _codes(SPEC)
    assert "SRG655" in _codes(SPEC, num_speculative_tokens=5)
    assert "SRG655" not in _codes(SPEC, num_speculative_tokens=3)


def _spec_cfg():
    return json.loads((SPEC / "config.json").read_text())


def test_the_verifier_is_compared_with_the_target(tmp_path):
    cfg = _spec_cfg()
    cfg["speculators_config"]["verifier"]["name_or_path"] = "Qwen/Qwen3-8B"
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    found = format_findings(read_facts(tmp_path), read_facts(TARGET))
    assert [(d.code, d.severity) for d in found if d.code == "SRG654"] == [("SRG654", "warning")]
    cfg["speculators_config"]["verifier"]["architectures"] = ["Qwen3ForCausalLM"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    found = format_findings(read_facts(tmp_path), read_facts(TARGET))
    assert [(d.code, d.severity) for d in found if d.code == "SRG654"] == [("SRG654", "error")]


def test_unread_speculators_fields_are_visible_lines():
    cfg = _spec_cfg()
    cfg["mystery_flag"] = True
    cfg["speculators_config"]["proposal_methods"].insert(0, {"proposal_type": "tree", "speculative_tokens": 8})
    facts = facts_from_config(cfg, "x/config.json")
    msgs = [d.message for d in format_findings(facts, read_facts(TARGET)) if d.code == "SRG653"]
    assert any("mystery_flag" in m for m in msgs) and any("proposal_methods[0]" in m for m in msgs)
    assert format_of(facts).speculators.num_speculative_tokens == 8  # vLLM 0.32 takes the first


@pytest.mark.parametrize("edit,code", [
    (lambda c: c.pop("transformer_layer_config"), "SRG650"),
    (lambda c: c["speculators_config"].pop("verifier"), "SRG650"),
    (lambda c: c["speculators_config"].update(proposal_methods=[]), "SRG650"),
    (lambda c: c["speculators_config"]["proposal_methods"][0].update(speculative_tokens="3"), "SRG650"),
    (lambda c: c.update(speculators_model_type="medusa"), "SRG651"),
    (lambda c: c["transformer_layer_config"].update(model_type="gemma4"), "SRG651"),
])
def test_malformed_speculators_files_are_coded_errors(edit, code):
    cfg = copy.deepcopy(_spec_cfg())
    edit(cfg)
    with pytest.raises(SurgeryError) as exc:
        facts_from_config(cfg, "x/config.json")
    assert exc.value.diagnostics[0].code == code


def test_recognise_needs_no_facts():
    assert recognise({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}).name == "hf"


MINI_TARGET = ROOT / "surgery" / "data" / "pairs" / "llama-target"


def _validate_dflash(draft):
    return subprocess.run([sys.executable, "-m", "surgery", "validate", "dflash", "--target", str(MINI_TARGET),
                           "--draft", str(draft), "--json"], cwd=ROOT, capture_output=True, text=True)


def test_speculators_dflash_validates_and_the_plan_shows_the_captured_ids():
    """The speculators form of the built-in dflash pair's draft: exit 0, the plan captures the file's
    aux ids [1, 7, 8] (= the native pair's target_layer_ids [0, 6, 7] + 1), SRG652 names both numberings."""
    r = _validate_dflash(FORMATS / "speculators-miniature-dflash")
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    native = json.loads((ROOT / "surgery/data/pairs/dflash/draft/config.json").read_text())["dflash_config"]
    assert out["layer_sets"]["aux_layers"] == [i + 1 for i in native["target_layer_ids"]] == [1, 7, 8]
    msg = next(d["message"] for d in out["diagnostics"] if d["code"] == "SRG652")
    assert "captures [1, 7, 8]" in msg and "dflash_config.target_layer_ids [0, 6, 7]" in msg
    assert not [d for d in out["diagnostics"] if d["severity"] == "error"]


def test_a_speculators_dflash_file_with_unshifted_ids_is_a_coded_error():
    r = _validate_dflash(FORMATS / "speculators-miniature-dflash-unshifted")
    assert r.returncode != 0
    found = [d for d in json.loads(r.stdout)["diagnostics"] if d["code"] == "SRG665"]
    assert found and found[0]["severity"] == "error" and "one layer early" in found[0]["message"]


def test_speculators_dspark_file_reads_its_ids_minus_one():
    facts = read_facts(FORMATS / "speculators-miniature-dspark")
    assert facts["eagle_aux_hidden_state_layer_ids"] == [1, 7, 8]
    assert facts["block_draft_target_layer_ids"] == [0, 6, 7]
    assert facts.raw["dspark_bonus_anchor"] is True and facts.raw["markov_rank"] == 16
    assert format_of(facts).speculators.method == "dspark"


def test_dflash2_is_refused_naming_why():
    cfg = json.loads((FORMATS / "speculators-miniature-dflash" / "config.json").read_text())
    cfg["speculators_model_type"] = "dflash2"
    with pytest.raises(SurgeryError) as exc:
        facts_from_config(cfg, "x/config.json")
    assert exc.value.diagnostics[0].code == "SRG664" and "no recipe" in exc.value.diagnostics[0].message


def test_the_plugin_refuses_the_unshifted_dflash_file_at_engine_start():
    """misread_by_runner is what surgery/vllm/config_check.py raises before any weight loads."""
    from surgery.formats.findings import misread_by_runner

    target = read_facts(MINI_TARGET)
    for runner in ("legacy", "v2"):
        bad = misread_by_runner(read_facts(FORMATS / "speculators-miniature-dflash-unshifted"), target, runner)
        assert [d.code for d in bad] == ["SRG665"]
        assert misread_by_runner(read_facts(FORMATS / "speculators-miniature-dflash"), target, runner) == []
