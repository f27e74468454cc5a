"""Models named by hub id (issue 33), against the local hub (hubserver.py) with real-size repos:
validation before download, the pin in every output, the cache, offline reruns, coded failures."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hub.repos import EAGLE3, LLAMA, TINY_HEAD, TINY_TARGET

ROOT = Path(__file__).resolve().parents[2]
PAIR = ["--target", LLAMA, "--draft", EAGLE3]


def validate_json(run_cli, *args):
    code, out, err = run_cli("validate", "eagle3", *args, "--json")
    return code, json.loads(out), err


def test_acceptance_pair_validates_with_weights_for_under_2_mb(run_cli, hubenv, monkeypatch):
    """The issue's acceptance command: a gated 8B target + a speculators EAGLE-3 head, --weights."""
    code, data, err = validate_json(run_cli, *PAIR, "--engine", "vllm", "--weights")
    assert code == 0, err
    pins = {side: data[side]["pin"] for side in ("target", "draft")}
    assert pins["target"]["commit"] == hubenv.repos[LLAMA].main and pins["target"]["source"] == "hub"
    assert pins["draft"]["commit"] == hubenv.repos[EAGLE3].main and pins["draft"]["repo_id"] == EAGLE3
    declared = hubenv.declared_bytes(LLAMA, EAGLE3)
    assert declared > 17e9
    served = hubenv.served_bytes()
    assert served == data["fetched"]["bytes"]  # what we count is what the server sent
    assert served < 2 << 20, f"{served} bytes fetched"
    assert data["weights"]["target"]["tensors"] == 291 and data["weights"]["draft"]["tensors"] == 16
    assert any("d2t" in r for r in data["weights"]["data_reads"])
    # the same command offline: from the cache, no request at all
    hubenv.reset_log()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, again, err = validate_json(run_cli, *PAIR, "--engine", "vllm", "--weights")
    assert code == 0, err
    assert hubenv.log == [] and again["fetched"]["requests"] == 0
    assert again["target"]["pin"]["commit"] == pins["target"]["commit"]
    assert again["target"]["pin"]["source"] == "hf-cache"
    assert again["weights"] == data["weights"]


def test_text_output_names_the_pins_and_the_cost(run_cli, hubenv):
    code, out, err = run_cli("validate", "eagle3", *PAIR)
    assert code == 0, err
    assert f"target: {LLAMA}@{hubenv.repos[LLAMA].main} (hub" in out
    assert f"draft: {EAGLE3}@{hubenv.repos[EAGLE3].main} (hub" in out
    assert "fetched: " in out


def test_revision_forms_pin_the_same_commit(run_cli, hubenv):
    sha = hubenv.repos[TINY_TARGET].revisions["v1"]
    for ref, commit in ((f"{TINY_TARGET}@v1", sha), (f"{TINY_TARGET}@{sha}", sha),
                        (TINY_TARGET, hubenv.repos[TINY_TARGET].main)):
        code, data, err = validate_json(run_cli, "--target", ref, "--draft", TINY_HEAD)
        assert code == 0, err
        assert data["target"]["pin"]["commit"] == commit, ref


def test_a_cached_commit_sha_needs_no_request(run_cli, hubenv):
    code, _, err = validate_json(run_cli, "--target", f"{TINY_TARGET}@v1", "--draft", TINY_HEAD)
    assert code == 0, err
    hubenv.reset_log()
    sha = hubenv.repos[TINY_TARGET].revisions["v1"]
    code, data, err = validate_json(run_cli, "--target", f"{TINY_TARGET}@{sha}", "--draft", TINY_HEAD)
    assert code == 0, err
    assert not any(TINY_TARGET in r["path"] for r in hubenv.log)  # the head's branch is asked, the sha is not
    assert data["target"]["pin"]["source"] == "hf-cache"


@pytest.mark.parametrize("ref,code_expected", [
    ("no-such-org/no-such-model", "SRG051"),
    (f"{TINY_TARGET}@no-such-branch", "SRG052"),
])
def test_unknown_repo_and_revision_are_coded(run_cli, hubenv, ref, code_expected):
    code, out, err = run_cli("validate", "eagle3", "--target", ref, "--draft", TINY_HEAD)
    assert code == 2
    assert code_expected in err and "Traceback" not in err
    assert "hint:" in err


def test_gated_repo_without_token_is_coded(run_cli, hubenv, monkeypatch):
    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.setenv("HF_TOKEN_PATH", str(Path(os.environ["HF_HOME"]) / "no-token"))
    code, out, err = run_cli("validate", "eagle3", *PAIR)
    assert code == 2 and "SRG053" in err and "Traceback" not in err
    assert "HF_TOKEN" in err and "hf auth login" in err and "licence" in err


def test_invalid_token_is_coded(run_cli, hubenv, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_expired")
    code, out, err = run_cli("validate", "eagle3", "--target", TINY_TARGET, "--draft", TINY_HEAD)
    assert code == 2 and "SRG053" in err and "refused the token" in err and "hf auth login" in err


def test_offline_with_nothing_cached_names_the_files_to_fetch(run_cli, hubenv, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, out, err = run_cli("validate", "eagle3", *PAIR)
    assert code == 2 and "SRG050" in err
    assert f"hf download {EAGLE3} config.json" in err  # the draft is read first
    assert hubenv.log == []


def test_unreachable_hub_is_coded(run_cli, hubenv, monkeypatch):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    code, out, err = run_cli("validate", "eagle3", *PAIR)
    assert code == 2 and "SRG054" in err and "HF_HUB_OFFLINE" in err


def test_speculators_head_alone_takes_its_verifier(run_cli, hubenv):
    code, data, err = validate_json(run_cli, "--draft", EAGLE3)
    assert code == 0, err
    assert data["target"]["pin"]["repo_id"] == LLAMA
    note = [d for d in data["diagnostics"] if d["code"] == "SRG058"]
    assert note and LLAMA in note[0]["message"] and hubenv.repos[LLAMA].main in note[0]["message"]
    code, out, err = run_cli("validate", "eagle3", "--draft", EAGLE3)
    assert code == 0 and "SRG058" in out


def test_draft_without_verifier_and_no_target_is_coded(run_cli, hubenv):
    code, out, err = run_cli("validate", "eagle3", "--draft", TINY_HEAD)
    assert code == 2 and "SRG059" in err


def test_local_paths_import_no_hub_client():
    """`surgery validate` on local paths imports neither huggingface_hub nor our hub package."""
    probe = ("import sys, io, contextlib\nfrom surgery.cli import main\n"
             "with contextlib.redirect_stdout(io.StringIO()):\n"
             f"    rc = main(['validate', 'gemma4-mtp', '--target', {str(ROOT / 'tests/corpus/configs/gemma-4-E2B-it.json')!r},"
             f" '--draft', {str(ROOT / 'tests/corpus/configs/gemma-4-E2B-it-assistant.json')!r}])\n"
             "print(rc, sorted(m for m in sys.modules if m.startswith(('huggingface_hub', 'surgery.hub', 'urllib.request'))))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.stdout.strip() == "0 []", proc.stdout + proc.stderr


def test_gemma4_31b_pair_plans_by_name(run_cli, hubenv):
    """The issue's second acceptance pair: the assistant's layers read target layers 58 / 59 (the
    last sliding and the last full-attention layer of the 60), by hub id and by `@<sha>`."""
    from hub.repos import GEMMA, GEMMA_ASSISTANT

    for target in (GEMMA, f"{GEMMA}@{hubenv.repos[GEMMA].main}"):
        code, out, err = run_cli("plan", "gemma4-mtp", "--target", target, "--draft", GEMMA_ASSISTANT, "--json")
        assert code == 0, err
        data = json.loads(out)
        assert [(r["draft"], r["target"]) for r in data["layer_maps"]["kv_source"]] == [(0, 58), (1, 58), (2, 58), (3, 59)]
        assert data["target"]["pin"]["commit"] == hubenv.repos[GEMMA].main
    code, out, err = run_cli("validate", "gemma4-mtp", "--target", GEMMA, "--draft", GEMMA_ASSISTANT, "--weights",
                             "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["fetched"]["bytes"] < 2 << 20 and hubenv.declared_bytes(GEMMA, GEMMA_ASSISTANT) > 60e9


@pytest.mark.parametrize("text,hub", [
    ("meta-llama/Llama-3.1-8B-Instruct", True), ("org/name@v1.0", True), ("org/name@refs/pr/1", True),
    ("configs/nope.json", False),  # a file name: a missing path, SRG001
    ("tests/nope", False),  # `tests` is a local folder: the user means a path
    ("./org/name", False), ("/abs/path", False), ("name-only", False), ("a/b/c", False), ("org--x/name", False),
])
def test_what_counts_as_a_hub_reference(text, hub):
    from surgery.text.diagnostics import SurgeryError
    from surgery.facts.modelref import open_model
    from surgery.modelfiles.source import parse_hub_ref

    if not hub:
        with pytest.raises(SurgeryError) as exc:
            open_model(text)
        assert exc.value.diagnostics[0].code == "SRG001"
    else:
        assert parse_hub_ref(text) is not None


def test_a_source_says_whether_its_files_are_on_disk(hubenv, tmp_path):
    """What callers used to learn from `isinstance(src, LocalSource)` (issue 43): a folder or a config file
    answers is_local with its folder and each file's path; a hub model answers not local, no path."""
    from surgery.facts.modelref import open_model

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    (tmp_path / "m" / "draft.json").write_text("{}")
    folder, config_file = open_model(str(tmp_path / "m")), open_model(str(tmp_path / "m" / "draft.json"))
    for src in (folder, config_file):
        assert src.is_local and src.local_folder == tmp_path / "m"
        assert src.local_path("model.safetensors") == tmp_path / "m" / "model.safetensors"
    assert (folder.is_config_file, config_file.is_config_file) == (False, True)
    hub = open_model(TINY_HEAD)
    assert not hub.is_local and hub.local_folder is None and hub.local_path("config.json") is None


def test_the_verifier_target_reaches_the_checks_without_touching_args(hubenv):
    """--target left out: the verifier the head names is the target the checks read, --weights included
    (surgery/options.py CheckOptions.target); the parsed namespace is left as given (issue 43)."""
    import io

    from surgery.cli import build_parser
    from surgery.commands.validate import cmd_plan

    args = build_parser().parse_args(["validate", "eagle3", "--draft", EAGLE3, "--weights", "--json"])
    given = dict(vars(args))
    out = io.StringIO()
    assert cmd_plan(args, out, io.StringIO()) == 0
    data = json.loads(out.getvalue())
    assert LLAMA in data["weights"]["target"]["folder"] and data["target"]["pin"]["repo_id"] == LLAMA
    assert vars(args) == given
