"""The engine-asking driver (surgery/engine/ask/__init__.py) and the answer's diagnostics (check.py), with
stand-in runners run by this interpreter: no engine needed. A crash, a timeout, a run past the memory
bound and garbage output are coded results, never tracebacks; the protocol is the last stdout line."""
from __future__ import annotations

import json
import sys
import textwrap

import pytest

from surgery.engine.ask import Run, ask, ask_run, can_ask, verdicts_of
from surgery.engine.ask.check import answer_diagnostics, match_role

CASES = [{"id": "a"}, {"id": "b"}]


def runner(tmp_path, body: str):
    path = tmp_path / "runner.py"
    path.write_text("import json, sys, time\n" + textwrap.dedent(body), encoding="utf-8")
    return path


def test_an_answer_is_the_last_stdout_line(tmp_path):
    script = runner(tmp_path, """
        cases = json.load(sys.stdin)
        print("engine chatter on stdout")
        print("{not the answer")
        print(json.dumps({"engine": "vllm", "version": "9.9.9", "peak_rss_kb": 1,
                          "verdicts": [{"id": c["id"], "stage": None} for c in cases[:1]]}))
    """)
    run = ask_run("vllm", sys.executable, CASES, runner=script, timeout_s=60)
    assert run.failure is None and run.version == "9.9.9" and run.exit_code == 0
    assert run.peak_rss_kb > 1000  # the child's own rusage (a python is several MB), not the runner's word
    got = verdicts_of(run, CASES)
    assert got[0] == {"id": "a", "stage": None}
    assert got[1]["stage"] == "unasked" and got[1]["code"] == "garbage"  # a case left out is said


@pytest.mark.parametrize("body,code", [
    ("raise SystemExit('boom')\n", "crash"),
    ("print('no json at all')\n", "garbage"),
    ("import os; os.kill(os.getpid(), 9)\n", "crash"),
])
def test_a_failed_run_is_a_coded_result(tmp_path, body, code):
    got = ask("vllm", sys.executable, CASES, runner=runner(tmp_path, body), timeout_s=60)
    assert [v["stage"] for v in got] == ["unasked", "unasked"] and {v["code"] for v in got} == {code}
    assert got[0]["message"]


def test_a_run_past_its_time_is_killed_with_its_group(tmp_path):
    marker = tmp_path / "child.pid"
    script = runner(tmp_path, f"""
        import subprocess
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        open({str(marker)!r}, "w").write(str(child.pid))
        time.sleep(120)
    """)
    run = ask_run("vllm", sys.executable, CASES, runner=script, timeout_s=3)
    assert run.failure == "timeout" and "3 s" in run.detail
    import os

    pid = int(marker.read_text())
    for _ in range(50):  # the grandchild went with the process group (reaped by init, or a zombie at worst)
        try:
            state = open(f"/proc/{pid}/stat").read().split(")")[1].split()[0]
        except OSError:
            break
        if state == "Z":
            break
        import time

        time.sleep(0.1)
    else:
        pytest.fail("the runner's child outlived the timeout kill")


def test_a_run_past_its_memory_bound_is_killed(tmp_path):
    script = runner(tmp_path, """
        block = bytearray(400 * 1024 * 1024)  # touched: resident
        for i in range(0, len(block), 4096):
            block[i] = 1
        time.sleep(60)
    """)
    run = ask_run("vllm", sys.executable, CASES, runner=script, timeout_s=120, max_rss_mb=150)
    assert run.failure == "memory" and "150 MiB" in run.detail
    assert run.peak_rss_kb >= 150 * 1024


def test_no_interpreter_is_a_coded_result(tmp_path):
    run = ask_run("vllm", str(tmp_path / "no-python"), CASES)
    assert run.failure == "no-python"
    assert can_ask("vllm", str(tmp_path / "no-python"))[0] is False
    assert can_ask("nosuchengine", sys.executable)[0] is False


def test_the_real_runner_is_run_by_path_and_imports_nothing_of_surgery(tmp_path):
    """The vLLM runner, run by an interpreter without site-packages (so without vLLM and without surgery):
    it reads its cases and fails on `import vllm` alone, a coded crash; never on an import of surgery."""
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n", encoding="utf-8")
    python.chmod(0o755)
    run = ask_run("vllm", str(python), [{"id": "x"}], timeout_s=120)
    assert run.failure == "crash" and "No module named 'vllm'" in run.detail, run.detail
    assert "surgery" not in run.detail.replace("surgery/engine/ask", "")


# --- the answer as diagnostics ---------------------------------------------------------------------------
def codes(diags):
    return [(d.code, d.severity) for d in diags]


def test_a_construction_refusal_is_an_error_naming_engine_release_message_and_frame():
    verdict = {"id": "validate", "stage": "construct", "refusals": [
        {"model": "draft", "type": "ValueError", "message": "24 is not divisible by\x1b[31m 3" + "x" * 5000,
         "where": "vllm/distributed/utils.py:59"}], "shapes": {}, "unconstructed": []}
    run = Run(engine="vllm", version="0.34.0", seconds=1.5, peak_rss_kb=900 * 1024)
    diags = answer_diagnostics("vLLM", "0.34.0", run, verdict, None)
    assert codes(diags) == [("SRG760", "error"), ("SRG765", "info")]
    d = diags[0]
    assert "vLLM 0.34.0 refuses to construct the draft" in d.message and "vllm/distributed/utils.py:59" in d.message
    assert len(d.message) < 1200 and "\x1b" not in d.render()  # bounded, escaped


def test_config_refusal_other_release_and_gaps_are_said():
    run = Run(engine="vllm", version="0.32.0+cpu")
    verdict = {"stage": "config", "type": "ValidationError", "message": "Total number of attention heads",
               "where": "vllm/engine/arg_utils.py:1", "refusals": [], "unconstructed": ["draft: method 'ngram' builds no draft model"]}
    assert codes(answer_diagnostics("vLLM", "0.34.0", run, verdict, None)) == [
        ("SRG766", "warning"), ("SRG761", "error"), ("SRG763", "warning"), ("SRG765", "info")]
    env = {"stage": "unjudged", "refusals": [{"model": "target", "type": "RuntimeError", "message": "No CUDA GPUs",
                                              "where": None, "unjudged": True}],
           "unconstructed": ["target: this environment cannot build it"]}
    assert codes(answer_diagnostics("vLLM", None, Run(engine="vllm", version="0.34.0"), env, None)) == [
        ("SRG763", "warning"), ("SRG765", "info")]
    failed = Run(engine="vllm", failure="timeout", detail="the runner ran past 600 s and was killed")
    diags = answer_diagnostics("vLLM", "0.34.0", failed, {"stage": "unasked", "code": "timeout"}, None)
    assert codes(diags) == [("SRG764", "warning")] and "(timeout)" in diags[0].message


def test_shapes_against_headers_by_the_class_naming():
    params = {"model.layers.0.self_attn.qkv_proj.weight": [6144, 8192], "model.fc.weight": [4096, 12288],
              "model.embed_tokens.weight": [128256, 4096], "lm_head.weight": [32064, 4096],
              "draft_id_to_target_id": [32000]}
    naming = {"substr": {"midlayer.": "layers.0.", "t2d": None},
              "packed": {"qkv_proj": ["q_proj", "k_proj", "v_proj"]}}
    header = {"midlayer.self_attn.q_proj.weight": [4096, 8192], "midlayer.self_attn.k_proj.weight": [1024, 8192],
              "midlayer.self_attn.v_proj.weight": [1024, 8192], "fc.weight": [4096, 8192],
              "lm_head.weight": [32000, 4096], "t2d": [128256], "d2t": [32000], "k_scale": [1]}
    wrong, compared, missed = match_role(params, header, naming)
    assert wrong == [("fc.weight", [4096, 8192], "model.fc.weight", [4096, 12288])]  # fc sized from 2, not 3 layers
    assert compared == 5 and missed == 1  # q + k + v + fc + lm_head (padded vocab); d2t has another name
    header["midlayer.self_attn.k_proj.weight"] = [512, 8192]
    wrong, _, _ = match_role(params, header, naming)
    assert ("midlayer.self_attn.q_proj.weight + midlayer.self_attn.k_proj.weight + midlayer.self_attn.v_proj.weight",
            [5632, 8192], "model.layers.0.self_attn.qkv_proj.weight", [6144, 8192]) in wrong


def test_shape_mismatch_diagnostics_name_the_tensor():
    run = Run(engine="vllm", version="0.34.0")
    verdict = {"stage": None, "refusals": [], "unconstructed": [], "shapes_at": {"tp": 1, "pp": 1},
               "shapes": {"target": {}, "draft": {"model.fc.weight": [16, 48]}}, "naming": {}}
    diags = answer_diagnostics("vLLM", "0.34.0", run, verdict, {"draft": {"fc.weight": [16, 32]}, "target": {}})
    assert codes(diags) == [("SRG762", "error"), ("SRG765", "info")]
    assert diags[0].location.key_path == "fc.weight" and "[16, 32]" in diags[0].message
    assert "draft 1 of 1 checkpoint tensors compared" in diags[1].message
    # shapes taken at tp 2 are never compared with whole tensors: said, not judged
    verdict["shapes_at"] = {"tp": 2, "pp": 1}
    assert codes(answer_diagnostics("vLLM", "0.34.0", run, verdict, {"draft": {"fc.weight": [16, 32]}})) == [
        ("SRG763", "warning"), ("SRG765", "info")]


def test_the_protocol_is_json_in_json_out(tmp_path):
    """The runner gets the cases exactly as given, as JSON on stdin."""
    script = runner(tmp_path, """
        cases = json.load(sys.stdin)
        print(json.dumps({"engine": "vllm", "version": "1", "verdicts": [{"id": c["id"], "echo": c} for c in cases]}))
    """)
    cases = [{"id": "x", "target": "/t", "draft": "/d", "method": "eagle3", "tp": 2, "pp": 1, "hf_overrides": {"a": 1}}]
    got = ask("vllm", sys.executable, cases, runner=script, timeout_s=60)
    assert got[0]["echo"] == json.loads(json.dumps(cases[0]))


def test_the_default_interpreter_is_this_one_only_if_it_imports_the_engine(monkeypatch):
    import surgery.engine.ask as ask_mod
    from surgery.engine.ask import check as check_mod

    monkeypatch.setattr(ask_mod, "can_ask", lambda engine, python: (True, ""))
    assert ask_mod.default_python("vllm") == sys.executable
    monkeypatch.setattr(ask_mod, "can_ask", lambda engine, python: (False, "no vllm"))
    assert ask_mod.default_python("vllm") is None
    monkeypatch.setattr(check_mod, "default_python", lambda engine: None)
    diags = check_mod.engine_check(engine="vllm", release="0.34.0", python=None, draft_raw={}, target_raw={},
                                   method="eagle3")
    assert codes(diags) == [("SRG764", "warning")]
    assert "this interpreter cannot import it and no --engine-python was given" in diags[0].message


def test_the_runs_folder_is_removed_with_what_the_runner_left_in_it(tmp_path, monkeypatch):
    """The runner's working folder goes, files the engine wrote there included (vLLM and SGLang write caches
    and locks where they run): nothing is left in the temp folder after a run."""
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(temp))
    script = runner(tmp_path, """
        import pathlib
        cases = json.load(sys.stdin)
        pathlib.Path("engine-cache").mkdir()
        pathlib.Path("engine-cache", "lock").write_text("x")
        print(json.dumps({"engine": "vllm", "version": "9.9.9", "verdicts": []}))
    """)
    run = ask_run("vllm", sys.executable, CASES, runner=script, timeout_s=60)
    assert run.failure is None and run.version == "9.9.9"
    assert list(temp.iterdir()) == []
