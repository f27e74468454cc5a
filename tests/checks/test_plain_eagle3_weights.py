"""Issue 35, `--weights`: the checkpoint's fc is the EAGLE-3 marker a plain config lacks.

A head whose config.json says `LlamaForCausalLM` with no config marker (no `draft_vocab_size`, no aux ids)
is refused under eagle3 from the config alone (SRG207). With `--weights`, an `fc.weight` whose input is
2-5 x hidden wide shows it is an EAGLE-3 head: `surgery validate/plan --weights` accepts it with the SRG206
info line naming the fc; no fc, or another width (1 x, 6 x, not a multiple), keeps SRG207 with what the
weights showed. Tiny checkpoints written byte by byte (tests/tiny_checkpoints.py).
"""
from __future__ import annotations

import json

import pytest

import tiny_checkpoints as tc
from surgery.engine.servedarch import fc_marker

H = tc.HIDDEN


def _plain_config() -> dict:
    """An EAGLE-3 head's config as a training template leaves it: plain name, no marker."""
    return tc.llama_config(num_hidden_layers=1)


def _tensors(fc_in: int | None) -> dict:
    t = tc.eagle3_tensors(lm_head=False, d2t=None, t2d=False)  # full vocabulary: lm_head is the target's
    del t["fc.weight"]
    if fc_in is not None:
        t["fc.weight"] = tc.rand([H, fc_in], 20)
    return t


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("plain_eagle3")
    out = {"target": tc.write_folder(root / "target", tc.llama_config(), tc.target_tensors())}
    for name, fc_in in {"fc3": 3 * H, "fc2": 2 * H, "fc5": 5 * H, "fc1": H, "fc6": 6 * H, "fc_odd": 3 * H + 1,
                        "no_fc": None}.items():
        out[name] = tc.write_folder(root / name, _plain_config(), _tensors(fc_in))
    return out


def _run(run_cli, folders, head, command="validate", *extra):
    code, out, err = run_cli(command, "eagle3", "--target", folders["target"], "--draft", folders[head], "--json",
                             *extra)
    doc = json.loads(out)
    return code, doc


def _diags(doc, code):
    return [d for d in doc["diagnostics"] if d["code"] == code]


def test_config_alone_refuses_the_plain_head(run_cli, folders):
    code, doc = _run(run_cli, folders, "fc3")
    assert code == 1 and [d["severity"] for d in _diags(doc, "SRG207")] == ["error"] and not _diags(doc, "SRG206")


@pytest.mark.parametrize("head,k", [("fc3", 3), ("fc2", 2), ("fc5", 5)])
@pytest.mark.parametrize("command", ["validate", "plan"])
def test_an_fc_of_2_to_5_x_hidden_accepts_it_with_the_info_line(run_cli, folders, head, k, command):
    code, doc = _run(run_cli, folders, head, command, "--weights")
    assert not _diags(doc, "SRG207") and not _diags(doc, "SRG204")
    info = _diags(doc, "SRG206")
    assert len(info) == 1 and info[0]["severity"] == "info"
    msg = info[0]["message"]
    assert "LlamaForCausalLM -> Eagle3LlamaForCausalLM" in msg
    assert f"fc.weight [{H}, {k * H}]" in msg and f"= {k} x hidden {H}" in msg
    assert info[0]["location"].endswith("fc.weight") or "fc.weight" in info[0]["location"]
    # 3 x hidden is what the default capture (3 layers) feeds: the plan is valid; 2 or 5 is the fc
    # width SRG609 already checks against the captured layers
    if k == 3:
        assert code == 0 and doc["ok"] is True
    else:
        assert "SRG609" in {d["code"] for d in doc["diagnostics"]}


@pytest.mark.parametrize("head,seen", [("no_fc", "has no fc.weight"), ("fc1", f"takes {H} inputs = 1 x hidden"),
                                       ("fc6", f"takes {6 * H} inputs = 6 x hidden"),
                                       ("fc_odd", f"takes {3 * H + 1} inputs")])
def test_no_fc_or_another_width_keeps_srg207(run_cli, folders, head, seen):
    code, doc = _run(run_cli, folders, head, "validate", "--weights")
    refused = _diags(doc, "SRG207")
    assert code == 1 and len(refused) == 1 and refused[0]["severity"] == "error"
    assert seen in refused[0]["message"] and "not 2-5 x hidden" in refused[0]["message"]
    assert not _diags(doc, "SRG206")


def test_text_output_names_the_marker(run_cli, folders):
    code, out, err = run_cli("plan", "eagle3", "--target", folders["target"], "--draft", folders["fc3"], "--weights",
                             "--verbose")  # SRG206 is a note: shown by --verbose, on stderr
    assert code == 0 and "note SRG206" in err and "EAGLE-3 marker from the weights: fc.weight" in err


def test_a_config_marker_needs_no_weights_marker(run_cli, folders, tmp_path):
    """draft_vocab_size in the config: SRG206 from the config (as before), one line, no weights wording."""
    head = tc.write_folder(tmp_path / "marked", {**_plain_config(), "draft_vocab_size": tc.DRAFT_VOCAB},
                           tc.eagle3_tensors())
    code, out, _ = run_cli("validate", "eagle3", "--target", folders["target"], "--draft", head, "--weights", "--json")
    info = [d for d in json.loads(out)["diagnostics"] if d["code"] == "SRG206"]
    assert len(info) == 1 and "draft_vocab_size" in info[0]["message"] and "from the weights" not in info[0]["message"]


def test_fc_marker_rule():
    cfg = {"hidden_size": 64}
    assert [fc_marker((64, k * 64), cfg) for k in range(1, 7)] == [None, 2, 3, 4, 5, None]
    assert fc_marker((64, 193), cfg) is None and fc_marker((192,), cfg) is None and fc_marker(None, cfg) is None
    # target_hidden_size is the unit when the head's own width differs (vLLM: fc in = n_aux x target_hidden_size)
    assert fc_marker((64, 3 * 128), {"hidden_size": 64, "target_hidden_size": 128}) == 3
    assert fc_marker((64, 3 * 64), {"hidden_size": 64, "target_hidden_size": 128}) is None
    assert fc_marker((64, 128), {}) is None
