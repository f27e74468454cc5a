"""Broken recipes and configs: every one must fail with a coded diagnostic at the right place,
the right exit status, no traceback, a well-formed --json object, and quickly: within CALL_LIMIT
function calls (tests/callcount.py; a count, the same on every machine: the wall-clock bound of 1 s
this file had is a timed assertion, which a loaded machine fails for no fault of the code, issue 48).

The corpus and its manifest live in tests/corpus/ (regenerate with tests/corpus/make_corpus.py).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from callcount import CALL_LIMIT, counted

from surgery import cli
from surgery.text.diagnostics import catalogue

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
REPO = HERE.parent
SHIPPED = REPO / "recipes" / "gemma4-mtp.yaml"
CASES = yaml.safe_load((CORPUS / "cases.yaml").read_text(encoding="utf-8"))
BY_ID = {c["id"]: c for c in CASES}

_LOC = re.compile(r"^(?P<file>[^ ]*?)(?::(?P<line>\d+)(?::(?P<col>\d+))?)?(?: (?P<key>\S+))?$")


def _generate(kind: str, tmp_path: Path) -> Path:
    if kind == "big_2mb":
        base = (CORPUS / "recipes" / "base.yaml").read_text(encoding="utf-8")
        path = tmp_path / "big_2mb.yaml"
        filler = "".join(f"# padding line {i:07d} " + "x" * 60 + "\n" for i in range(2 * 1024 * 1024 // 80 + 1))
        path.write_text(base + filler, encoding="utf-8")
        assert path.stat().st_size > 2 * 1024 * 1024
        return path
    raise ValueError(kind)


def argv_for(case: dict, tmp_path: Path, json_flag: bool = False) -> list[str]:
    recipe = case["recipe"]
    if recipe == "@shipped":
        recipe = str(SHIPPED)
    elif recipe.startswith("name:"):
        recipe = recipe[len("name:"):]
    elif recipe.startswith("@generated/"):
        recipe = str(_generate(case["generate"], tmp_path))
    argv = [case.get("command", "validate"), recipe]
    if case.get("target") is not None:
        argv += ["--target", case["target"]]
    if case.get("draft") is not None:
        argv += ["--draft", case["draft"]]
    argv += [str(a) for a in case.get("args", [])]
    if json_flag:
        argv.append("--json")
    return argv


_SHIPPED = re.compile(r"^recipe (?P<name>[\w.-]+)(?::(?P<line>\d+))?$")


def location_matches(location: str, expected: dict | None) -> bool:
    if expected is None:  # command-line usage errors carry no file location
        return True
    shipped = _SHIPPED.match(location)
    if shipped:  # text output names a shipped recipe by name and line only (issue 42); --json has the column and key
        return f"{shipped['name']}.yaml" == expected["file"] and \
            ("line" not in expected or (shipped["line"] is not None and int(shipped["line"]) == expected["line"]))
    m = _LOC.match(location)
    if not m:
        return False
    file = m["file"]
    if Path(file).name != expected["file"] and not file.endswith("/" + expected["file"]) and file != expected["file"]:
        return False
    for part in ("line", "col"):
        if part in expected and (m[part] is None or int(m[part]) != expected[part]):
            return False
    if "key" in expected and m["key"] != expected["key"]:
        return False
    return True


def _expected(case: dict) -> list[dict]:
    return [{"code": case["code"], "location": case["location"]}] + list(case.get("also", []))


def _describe(diags: list[dict]) -> str:
    return "\n".join(f"  {d.get('code')} @ {d.get('location')}: {d.get('message')}" for d in diags) or "  (none)"


def run_inprocess(argv: list[str], capsys) -> tuple[int, str, str, int]:
    """Exit status, stdout, stderr and the number of function calls the command made."""
    capsys.readouterr()
    rc, calls, _ = counted(cli.main, argv)
    out, err = capsys.readouterr()
    return rc, out, err, calls


@pytest.fixture
def in_corpus(monkeypatch):
    monkeypatch.chdir(CORPUS)


INPROCESS = [pytest.param(c, id=c["id"]) for c in CASES if not c.get("isolate")]
ALL = [pytest.param(c, id=c["id"]) for c in CASES]


@pytest.mark.parametrize("case", INPROCESS)
def test_text_output(case, capsys, tmp_path, in_corpus):
    rc, out, err, calls = run_inprocess(argv_for(case, tmp_path), capsys)
    assert "Traceback" not in err and "Traceback" not in out
    assert calls < CALL_LIMIT, f"{calls} function calls (limit {CALL_LIMIT})"
    assert rc == case["exit"], f"exit {rc}, expected {case['exit']}\nstdout:\n{out}\nstderr:\n{err}"
    lines = (out + "\n" + err).splitlines()
    for exp in _expected(case):
        code = exp["code"]
        found = False
        for line in lines:
            # a diagnostic with no location (a usage error) is printed without one
            m = re.match(r"^\s*(?:(?P<loc>.*?): )?(?:error|warning|note) (?P<code>SRG\d{3}): ", line)
            if m and m["code"] == code and location_matches(m["loc"] or "", exp["location"]):
                found = True
                break
        assert found, f"no {code} at {exp['location']} in output:\nstdout:\n{out}\nstderr:\n{err}"
        if exp is _expected(case)[0]:
            assert all(text in line for text in case.get("says", ())), (line, case.get("says"))


@pytest.mark.parametrize("case", INPROCESS)
def test_json_output(case, capsys, tmp_path, in_corpus):
    rc, out, err, calls = run_inprocess(argv_for(case, tmp_path, json_flag=True), capsys)
    assert "Traceback" not in err
    assert calls < CALL_LIMIT, f"{calls} function calls (limit {CALL_LIMIT})"
    assert rc == case["exit"], f"exit {rc}, expected {case['exit']}\nstdout:\n{out}\nstderr:\n{err}"
    obj = json.loads(out)  # exactly one JSON document on stdout
    assert isinstance(obj, dict)
    assert obj["ok"] is False
    diags = obj["diagnostics"]
    assert isinstance(diags, list) and diags
    for d in diags:
        assert {"code", "severity", "message", "location"} <= set(d), d
        assert re.fullmatch(r"SRG\d{3}", d["code"]), d
        assert d["code"] in catalogue(), d
        assert d["severity"] in ("error", "warning", "info"), d
        assert isinstance(d["message"], str) and d["message"], d
        assert isinstance(d["location"], str), d
    assert any(d["severity"] == "error" for d in diags)
    for exp in _expected(case):
        assert any(d["code"] == exp["code"] and location_matches(d["location"], exp["location"]) for d in diags), \
            f"no {exp['code']} at {exp['location']}; got:\n{_describe(diags)}"
    primary = [d for d in diags if d["code"] == case["code"] and location_matches(d["location"], case["location"])]
    assert any(all(text in d["message"] for text in case.get("says", ())) for d in primary), \
        f"no {case['code']} saying {case.get('says')}; got:\n{_describe(diags)}"


SUBPROCESS = [pytest.param(c, id=c["id"]) for c in CASES if c.get("subprocess") or c.get("isolate")]


@pytest.mark.parametrize("case", SUBPROCESS)
def test_subprocess(case, tmp_path):
    argv = argv_for(case, tmp_path, json_flag=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    try:
        proc = subprocess.run([sys.executable, "-m", "surgery", *argv], cwd=CORPUS, capture_output=True, text=True,
                              timeout=15, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`surgery {' '.join(argv)}` did not finish within 15 s")
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "SPEC-SURGERY-PWNED" not in proc.stdout + proc.stderr  # a python tag never executes
    assert proc.returncode == case["exit"], f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    obj = json.loads(proc.stdout)
    assert obj["ok"] is False
    for exp in _expected(case):
        assert any(d["code"] == exp["code"] and location_matches(d["location"], exp["location"])
                   for d in obj["diagnostics"]), _describe(obj["diagnostics"])


# ---------------------------------------------------------------------------------- the corpus itself

def test_corpus_is_big_enough_and_ids_unique():
    assert len(CASES) >= 45
    assert len(BY_ID) == len(CASES)


@pytest.mark.parametrize("case", ALL)
def test_case_files_exist_and_codes_are_catalogued(case):
    cat = catalogue()
    for exp in _expected(case):
        assert exp["code"] in cat, f"{exp['code']} is not in surgery/data/codes.yaml"
    # the manifest's exit is the catalogue's exit for the primary code (a case never invents its own)
    assert case["exit"] == int(cat[case["code"]].get("exit", 1)), case["id"]
    for side in ("target", "draft"):
        path = case.get(side)
        if path and "nope" not in path:
            assert (CORPUS / path).exists(), path
    recipe = case["recipe"]
    if recipe.startswith("recipes/") and "does-not-exist" not in recipe:
        assert (CORPUS / recipe).exists(), recipe


def test_corpus_does_not_depend_on_shared():
    for c in CASES:
        for key in ("recipe", "target", "draft"):
            value = str(c.get(key) or "")
            assert "../" not in value and not value.startswith("/"), c["id"]


def test_control_base_recipe_is_valid(capsys, in_corpus):
    """The base every corpus case edits is itself valid for the real pair (so each case breaks one thing)."""
    rc, out, err, _ = run_inprocess(["validate", "recipes/base.yaml", "--target", "configs/gemma-4-E2B-it.json",
                                     "--draft", "configs/gemma-4-E2B-it-assistant.json"], capsys)
    assert rc == 0, out + err


def test_control_shipped_recipe_is_valid(capsys, in_corpus):
    rc, out, err, _ = run_inprocess(["plan", str(SHIPPED), "--target", "configs/gemma-4-E2B-it.json",
                                     "--draft", "configs/gemma-4-E2B-it-assistant.json", "--json"], capsys)
    assert rc == 0, out + err
    plan = json.loads(out)
    assert plan["ok"] is True
    assert plan["layer_maps"]["kv_source"] == [{"draft": 0, "target": 13}, {"draft": 1, "target": 13},
                                               {"draft": 2, "target": 13}, {"draft": 3, "target": 14}]


# ---------------------------------------------------------------------------------- explain

@pytest.mark.parametrize("code", sorted(catalogue()))
def test_explain_every_code(code, capsys):
    rc, out, err, _ = run_inprocess(["explain", code], capsys)
    assert rc == 0, err
    assert code in out and catalogue()[code]["title"] in out
    rc, out, err, _ = run_inprocess(["explain", code, "--json"], capsys)
    assert rc == 0 and json.loads(out)["code"] == code


def test_explain_lists_all(capsys):
    rc, out, _, _ = run_inprocess(["explain"], capsys)
    assert rc == 0
    assert all(code in out for code in catalogue())


@pytest.mark.parametrize("code", ["SRG999", "XYZ", "SRG", ""])
def test_explain_unknown_code(code, capsys):
    rc, out, err, _ = run_inprocess(["explain", code], capsys)
    assert rc == 2
    assert "SRG012" in err and "Traceback" not in err


def test_explain_unknown_code_json(capsys):
    rc, out, err, _ = run_inprocess(["explain", "SRG999", "--json"], capsys)
    assert rc == 2
    obj = json.loads(out)
    assert obj["ok"] is False and obj["diagnostics"][0]["code"] == "SRG012"


def test_catalogue_entries_well_formed():
    for code, entry in catalogue().items():
        assert re.fullmatch(r"SRG\d{3}", code)
        assert entry.get("title") and entry.get("explain"), code
        assert int(entry.get("exit", 1)) in (1, 2), code
        assert entry.get("severity", "error") in ("error", "warning", "info"), code
