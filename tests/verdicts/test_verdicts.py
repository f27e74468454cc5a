"""The verdict corpus (issue 42): real public configs and training templates, each with the verdict
vLLM would give and where that comes from (tests/verdicts/cases.yaml; how to write a case:
tests/verdicts/README.md).

Each case runs `surgery validate / new / plan` in-process with `--json`, the way a user would, and
compares the exit status and the diagnostics by severity. The expected verdict is the right one, not
today's: where surgery still disagrees, the case carries `xfail:` with the issue-42 class, and the
marker is strict, so the fix turns it into an XPASS failure that says to remove the marker.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from surgery import cli

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CASES = yaml.safe_load((HERE / "cases.yaml").read_text(encoding="utf-8"))
KNOWN_KEYS = {"id", "command", "recipe", "target", "draft", "args", "drop", "expect", "why", "source", "xfail", "vllm",
              "engine_check"}
EXPECT_KEYS = {"exit", "errors", "errors_any", "warnings", "notes", "absent", "no_warnings", "said_aloud", "recipe",
               "not_recipe", "not_alternative", "kv_source", "hint_names", "not_format"}


def _config_file(path: str) -> Path:
    p = ROOT / path
    return p / "config.json" if p.is_dir() else p


def _materialise(case: dict, side: str, tmp_path: Path) -> str:
    """The side's config as given, or a copy with the case's `drop:` keys removed (dotted paths):
    derived inputs are built from the real file at test time, never stored as if published."""
    drops = (case.get("drop") or {}).get(side)
    if not drops:
        return str(ROOT / case[side])
    cfg = json.loads(_config_file(case[side]).read_text(encoding="utf-8"))
    for dotted in drops:
        node, *path = cfg, *dotted.split(".")
        for part in path[:-1]:
            node = node[part]
        assert path[-1] in node, f"{case['id']}: {dotted} not in {case[side]}"
        del node[path[-1]]
    out = tmp_path / side
    out.mkdir()
    (out / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return str(out)


def argv_for(case: dict, tmp_path: Path) -> list[str]:
    cmd = case["command"]
    argv = [cmd] + ([case["recipe"]] if cmd != "new" else [])
    argv += ["--target", _materialise(case, "target", tmp_path), "--draft", _materialise(case, "draft", tmp_path)]
    argv += [str(a) for a in case.get("args", [])]
    argv += ["--format", "json"] if cmd == "plan" else ["--json"]
    return argv


def run(case: dict, tmp_path: Path, capsys) -> tuple[int, dict, str]:
    capsys.readouterr()
    rc = cli.main(argv_for(case, tmp_path))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, json.loads(out), err


def check(case: dict, rc: int, doc: dict) -> list[str]:
    """Every way the run differs from the case's expectation (empty: it holds)."""
    exp = case["expect"]
    diags = doc.get("diagnostics", [])
    by = {s: {d["code"] for d in diags if d["severity"] == s} for s in ("error", "warning", "info")}
    loud = by["error"] | by["warning"]
    wrong = []
    exits = exp["exit"] if isinstance(exp["exit"], list) else [exp["exit"]]
    if rc not in exits:
        wrong.append(f"exit {rc}, expected {exp['exit']}")
    if case["command"] != "new" and rc == 0 and by["error"]:
        wrong.append(f"exit 0 with errors {sorted(by['error'])}")
    if rc == 1 and not by["error"]:
        wrong.append("exit 1 without an error diagnostic")
    wrong += [f"no error {c}" for c in exp.get("errors", []) if c not in by["error"]]
    if exp.get("errors_any") and not by["error"] & set(exp["errors_any"]):
        wrong.append(f"none of {exp['errors_any']} as an error")
    wrong += [f"no warning {c}" for c in exp.get("warnings", []) if c not in by["warning"]]
    wrong += [f"no note {c}" for c in exp.get("notes", []) if c not in by["info"]]
    wrong += [f"{c} at warning/error level" for c in exp.get("absent", []) if c in loud]
    if exp.get("no_warnings") and by["warning"]:
        wrong.append(f"warnings {sorted(by['warning'])}")
    if "said_aloud" in exp:
        key = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(exp['said_aloud'])}(?![A-Za-z0-9_])")  # the key, not a longer one
        if not any(d["severity"] in ("error", "warning") and key.search(d["location"] + " " + d["message"]) for d in diags):
            wrong.append(f"nothing at warning/error level names {exp['said_aloud']}")
    if "hint_names" in exp and not any(exp["hint_names"] in (d.get("hint") or "") for d in diags
                                       if d["severity"] == "error"):
        wrong.append(f"no error hint names {exp['hint_names']!r}")
    if "not_format" in exp and any(d["code"] == "SRG652" and d["message"].startswith(f"draft format {exp['not_format']} ")
                                   for d in diags):
        wrong.append(f"draft read as format {exp['not_format']!r} (SRG652)")
    if "recipe" in exp and doc.get("recipe") != exp["recipe"]:
        wrong.append(f"recipe {doc.get('recipe')!r}, expected {exp['recipe']!r}")
    if "not_recipe" in exp and doc.get("recipe") == exp["not_recipe"]:
        wrong.append(f"recipe {exp['not_recipe']!r}")
    if "not_alternative" in exp and exp["not_alternative"] in (doc.get("alternatives") or []):
        wrong.append(f"{exp['not_alternative']!r} among the alternatives {doc.get('alternatives')}")
    if "kv_source" in exp:
        got = [m["target"] for m in sorted(doc["layer_maps"]["kv_source"], key=lambda m: m["draft"])]
        if got != exp["kv_source"]:
            wrong.append(f"kv_source {got}, expected {exp['kv_source']}")
    return wrong


def _param(case: dict):
    marks = []
    if case.get("xfail"):
        marks.append(pytest.mark.xfail(strict=True, reason=f"{case['xfail']} -- once this passes, remove the "
                                                           f"xfail from tests/verdicts/cases.yaml"))
    return pytest.param(case, id=case["id"], marks=marks)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_verdict(case, tmp_path, capsys):
    rc, doc, err = run(case, tmp_path, capsys)
    wrong = check(case, rc, doc)
    codes = sorted((d["severity"], d["code"]) for d in doc.get("diagnostics", []))
    assert not wrong, f"{case['id']}: {'; '.join(wrong)}\n  why: {case['why']}\n  source: {case['source']}\n  got: {codes}"


# ------------------------------------------------------------------------------ the corpus itself

def test_corpus_shape():
    ids = [c["id"] for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(CASES) >= 60
    for c in CASES:
        assert set(c) <= KNOWN_KEYS and set(c["expect"]) <= EXPECT_KEYS, c["id"]
        assert c["command"] in ("validate", "new", "plan") and c["why"] and c["source"], c["id"]
        assert c["vllm"] in ("accepts", "refuses", "silent-failure", "n/a"), c["id"]
        if c.get("xfail"):
            assert c["xfail"].startswith("class "), c["id"]  # the issue-42 class the fix belongs to
        for side in ("target", "draft"):
            assert _config_file(c[side]).is_file(), (c["id"], c[side])


def test_every_corpus_config_names_its_source_and_is_used():
    used = {Path(c[s]).name for c in CASES for s in ("target", "draft")}
    for path in sorted((HERE / "configs").glob("*.json")):
        cfg = json.loads(path.read_text(encoding="utf-8"))
        assert cfg.get("_source") and cfg.get("_confidence") in ("verbatim", "reconstructed"), path.name
        assert path.name in used, f"{path.name} is in no case"


def test_readme_counts_match_the_corpus():
    text = (HERE / "README.md").read_text(encoding="utf-8")
    refusals = sum(c["vllm"] == "refuses" for c in CASES)
    xfails = sum(bool(c.get("xfail")) for c in CASES)
    assert f"**{len(CASES)} cases**" in text and f"**{refusals} vLLM refusals**" in text
    assert f"**{xfails} xfail**" in text
