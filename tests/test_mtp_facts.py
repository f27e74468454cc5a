"""MTP facts read as data (issue 18): the family's count field, vLLM's default and cap, the per-step
pattern, derived layer counts, required fields; bad values are coded (SRG205), never a traceback.
What vLLM itself does with the same configs is checked in tests/test_oracle_mtp_coverage.py."""
from __future__ import annotations

import copy

import pytest

from surgery.text.diagnostics import SurgeryError
from surgery.facts import facts_from_config, read_config
from testpaths import CONFIGS


def cfg(name: str) -> dict:
    return read_config(CONFIGS / name)[0]


def facts(c: dict):
    return facts_from_config(c, "config.json")


def test_count_field_per_family_and_where_it_lives():
    q = cfg("qwen3_5/Qwen3.5.json")  # text_config.mtp_num_hidden_layers
    assert facts(q)["num_mtp_layers"] == 1
    q["text_config"]["mtp_num_hidden_layers"] = 3
    assert facts(q)["num_mtp_layers"] == 3 and facts(q)["num_nextn_predict_layers"] is None
    ink = cfg("inkling/Inkling.json")  # mtp_config.num_nextn_predict_layers (a nested dict)
    assert facts(ink)["num_mtp_layers"] == 2
    mm = cfg("minimax_m3/MiniMax-M3.json")  # num_mtp_modules, default 1
    mm["text_config"].pop("num_mtp_modules")
    f = facts(mm)
    assert f["num_mtp_layers"] == 1 and any(d.key == "num_mtp_modules" for d in f.defaults_used)


def test_served_cap_and_pattern_step():
    flash = cfg("mimo_v2/MiMo-V2-Flash.json")
    assert (facts(flash)["num_mtp_layers"], facts(flash)["num_mtp_layers_served"]) == (3, 1)
    nem = cfg("nemotron_h/Nemotron-H-MTP.json")
    nem["mtp_hybrid_override_pattern"] = "*E*"
    assert facts(nem)["mtp_layers_per_step"] == 3


def test_derived_num_hidden_layers_is_recorded():
    lc = cfg("longcat_flash/LongCat-Flash.json")
    f = facts(lc)
    assert f["num_hidden_layers"] == 2 * lc["num_layers"]
    assert any(d.key == "num_hidden_layers" and "num_layers" in str(d.value) for d in f.defaults_used)
    nem = cfg("nemotron_h/Nemotron-H-MTP.json")
    assert facts(nem)["num_hidden_layers"] == len(nem["layers_block_type"])
    explicit = copy.deepcopy(lc)
    explicit["num_hidden_layers"] = 10  # an explicit value wins
    assert facts(explicit)["num_hidden_layers"] == 10


def test_required_fields_and_layer_types():
    q4 = cfg("qwen4_exp/Qwen4-Exp.json")
    assert facts(q4)["mtp_missing_keys"] == []
    q4["text_config"].pop("hc_count")
    assert facts(q4)["mtp_missing_keys"] == ["hc_count"]
    dots = cfg("dots3_note/Dots3-Note.json")
    assert facts(dots)["mtp_layer_types_count"] is None
    dots["mtp_layer_types"] = ["sliding_attention", "full_attention"]
    assert facts(dots)["mtp_layer_types_count"] == 2


@pytest.mark.parametrize("name, path, value", [
    ("longcat_flash/LongCat-Flash.json", ("num_layers",), "28"),
    ("nemotron_h/Nemotron-H-MTP.json", ("layers_block_type",), 4),
    ("inkling/Inkling.json", ("mtp_config", "num_nextn_predict_layers"), -1),
    ("qwen3_5/Qwen3.5.json", ("text_config", "mtp_num_hidden_layers"), True),
    ("nemotron_h/Nemotron-H-MTP.json", ("mtp_hybrid_override_pattern",), ""),
    ("dots3_note/Dots3-Note.json", ("mtp_layer_types",), "sliding_attention"),
])
def test_bad_mtp_fields_are_coded(name, path, value):
    c = cfg(name)
    node = c
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(SurgeryError) as exc:
        facts(c)
    assert exc.value.diagnostics[0].code == "SRG205"
