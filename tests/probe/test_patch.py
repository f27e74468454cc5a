"""`--write` closes the loop (issue 66): the patch names the draft's config.json by an absolute path and its
weight edits by operation; `validate / plan / apply --patch FILE` run a copy of the draft that says it; a
patch measured on another draft is refused; an exported built-in pair is recognised as its built-in pair
(surgery/probe/patch.py, pairmatch.py). Config and headers only: no engine."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from surgery.pairs import builtin_pair, export
from surgery.probe.pairmatch import HEAD_WEIGHTS, PAIR, TARGET, recognise
from surgery.probe.patch import patched_draft
from surgery.probe.write import document

from .heads import LLAMA, PAIRS

IDS = "eagle_aux_hidden_state_layer_ids"


def _head(tmp_path, ids):
    folder = tmp_path / "head"
    shutil.copytree(PAIRS / "eagle3/draft", folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg[IDS] = ids
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def _decided(answers, candidate="c"):
    row = {"name": candidate, "as_served": False, "error": None, "acceptance": 0.8, "mean_prompt_acceptance": 0.8,
           "prompts": 8, "stopped_early": False, "per_position": [0.9, 0.8, 0.7], "mean_length": 3.4}
    return {"decision": {"status": "decided", "outcome": "changed", "why": "w", "candidate": candidate,
                         "answers": answers, "covers": list(answers)},
            "candidates": [row], "engine": "vllm", "release": "0.32.0", "counts": {},
            "prompts": {"source": "builtin", "count": 8, "max_new_tokens": 48, "k": 3}}


def _write(tmp_path, result, draft) -> Path:
    doc = document(result, draft, LLAMA, {})
    path = tmp_path / "patch.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_the_patch_names_an_absolute_file_and_validate_takes_it(tmp_path, run_cli, monkeypatch):
    """The head written one layer late: validate refuses it (SRG317); with the probe's patch it is valid."""
    head = _head(tmp_path, [1, 8, 9])
    answer = {"name": "ids [0, 7, 8]", "as_served": False, "edits": {IDS: [0, 7, 8]}}
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path, _decided({f"SRG659 {IDS}": answer}), Path("head"))  # given relative: written absolute
    doc = yaml.safe_load(path.read_text())
    assert Path(doc["config_patch"]["file"]).is_absolute() and doc["config_patch"]["set"] == {IDS: [0, 7, 8]}
    assert doc["probe"]["covers"] == [f"SRG659 {IDS}"] and doc["probe"]["release"] == "0.32.0"
    code, out, _ = run_cli("validate", "eagle3", "--target", LLAMA, "--draft", head, "--json")
    assert code == 1 and "SRG317" in out
    code, out, _ = run_cli("validate", "eagle3", "--target", LLAMA, "--draft", head, "--patch", path, "--json")
    assert code == 0, out
    assert json.loads((head / "config.json").read_text())[IDS] == [1, 8, 9]  # the draft itself is never changed


def test_tensor_edits_are_made_again_by_name(tmp_path):
    from safetensors.torch import load_file

    head = _head(tmp_path, [0, 7, 8])
    answer = {"name": "the target's input_embeddings", "as_served": False, "edits": {},
              "tensors": {"embed_tokens.weight": "dropped"}, "tensor_ops": {"embed_tokens.weight": "drop"}}
    src = tmp_path / "src"
    shutil.copytree(head, src)
    from safetensors.torch import save_file

    tensors = load_file(str(src / "model.safetensors"))
    tensors["embed_tokens.weight"] = load_file(str(LLAMA / "model.safetensors"))["model.embed_tokens.weight"]
    save_file(tensors, str(src / "model.safetensors"), metadata={"format": "pt"})
    path = _write(tmp_path, _decided({"SRG613 input_embeddings": answer}), src)
    out = patched_draft(path, src, tmp_path / "patched")
    assert "embed_tokens.weight" not in load_file(str(out / "model.safetensors"))
    assert "embed_tokens.weight" in load_file(str(src / "model.safetensors"))


def test_a_patch_for_another_draft_is_refused(tmp_path, run_cli):
    head = _head(tmp_path, [1, 8, 9])
    answer = {"name": "ids [0, 7, 8]", "as_served": False, "edits": {IDS: [0, 7, 8]}}
    path = _write(tmp_path, _decided({f"SRG659 {IDS}": answer}), head)
    other = tmp_path / "other"
    shutil.copytree(PAIRS / "eagle3-outputs/draft", other)
    cfg = json.loads((other / "config.json").read_text())
    cfg["draft_vocab_size"] = 264
    (other / "config.json").write_text(json.dumps(cfg))
    code, out, _ = run_cli("validate", "eagle3", "--target", LLAMA, "--draft", other, "--patch", path, "--json")
    assert code == 2 and "SRG011" in out and "measured on" in out
    bad = tmp_path / "bad.yaml"
    bad.write_text("probe: {}\n")
    code, out, _ = run_cli("validate", "eagle3", "--target", LLAMA, "--draft", head, "--patch", bad, "--json")
    assert code == 2 and "no config_patch" in out


def test_an_exported_pair_is_recognised_as_its_built_in_pair(tmp_path):
    """issue 66: the probe took 12 generic prompts and no expectation for an exported pair (74.1 % there,
    70.7 % in apply on the pair's 8 held-out prompts)."""
    export("eagle3", tmp_path / "exp")
    t, d = tmp_path / "exp/target", tmp_path / "exp/draft"
    recognise.cache_clear()
    pair, how = recognise("eagle3", t, d)
    assert pair is not None and pair.recipe == "eagle3" and how == PAIR and len(pair.prompts) == 8
    cfg = json.loads((d / "config.json").read_text())
    cfg["norm_before_residual"] = True  # the question the user asks: the weights are still the pair's head
    (d / "config.json").write_text(json.dumps(cfg))
    recognise.cache_clear()
    assert recognise("eagle3", t, d)[1] == HEAD_WEIGHTS
    recognise.cache_clear()
    assert recognise("eagle3", t, PAIRS / "eagle3-outputs/draft")[1] == TARGET  # its prompts, no expectation
    recognise.cache_clear()
    assert recognise("eagle", t, d)[1] == TARGET  # the eagle pair shares the target; its own draft is not this
    assert recognise("dflash", tmp_path, d) == (None, None)
    assert builtin_pair("eagle3").prompts == pair.prompts


def test_the_plugin_refuses_a_served_draft_that_does_not_say_the_patch(tmp_path):
    """vLLM has no override for a draft's config: with additional_config.surgery.patch the plugin's start-up check
    refuses a draft that does not say the patch (SRG505), and passes the folder --write-draft wrote."""
    from types import SimpleNamespace

    from surgery.vllm.config_check import patch_not_said

    head = _head(tmp_path, [1, 8, 9])
    answer = {"name": "ids [0, 7, 8]", "as_served": False, "edits": {IDS: [0, 7, 8]}}
    path = _write(tmp_path, _decided({f"SRG659 {IDS}": answer}), head)
    served = patched_draft(path, head, tmp_path / "served")

    def check(folder):
        raw = json.loads((folder / "config.json").read_text())
        cfg = SimpleNamespace(additional_config={"surgery": {"recipe": "eagle3", "patch": str(path)}})
        return patch_not_said(cfg, SimpleNamespace(draft=SimpleNamespace(raw=raw, source=str(folder / "config.json"))))

    (found,) = check(head)
    assert found.code == "SRG505" and found.severity == "error" and "[0, 7, 8]" in found.message
    assert check(served) == []
    assert patch_not_said(SimpleNamespace(additional_config={}), None) == []
