"""The engine integrations' log lines: one definition each (surgery/text/loglines.py), logged by the code
and parsed by the tests through that definition.

Issue 34: the server test looked for "KV caches bound: 4/4" after the count had become 8/8, and
nothing noticed. Here: each defined line parses back what it printed; the code logs each line
through its constant (no copy of its text left in the package); and each line is read by at least
one test through `.find`, so none can stop being checked without this file failing.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from surgery.text.loglines import LogLine
from surgery.sglang import log as sglang_log
from surgery.vllm import log as vllm_log

ROOT = Path(__file__).resolve().parents[1]
LINES = {f"{mod.__name__}.{name}": line for mod in (vllm_log, sglang_log)
         for name, line in vars(mod).items() if isinstance(line, LogLine)}


def test_the_lines_are_defined():
    assert {"surgery.vllm.log.CHECKED", "surgery.vllm.log.APPLIED", "surgery.vllm.log.KV_BOUND", "surgery.vllm.log.WARMED",
            "surgery.vllm.log.REFRESHED", "surgery.vllm.log.DIAGNOSTIC", "surgery.sglang.log.APPLIED"} <= set(LINES)


@pytest.mark.parametrize("name", sorted(LINES))
def test_a_line_parses_back_what_it_printed(name):
    line = LINES[name]
    shaped = dict(line.shapes)
    values = ["" if f in shaped else f"v{i} x" if spec == "s" else str(-7 + i)
              for i, (f, spec) in enumerate(zip(line.fields, re.findall(r"%([sd])", line.fmt)))]
    printed = line.render(*[int(v) if v.lstrip("-").isdigit() else v for v in values])
    for prefix in ("", "(Worker pid=12) INFO 12-03 10:00:00 [live_apply.py:97] "):
        [found] = line.find("other line\n" + prefix + printed + "\nanother line")
        assert [found[f] for f in line.fields] == values and found["line"] == prefix + printed


def test_a_line_with_empty_fields_parses():
    text = vllm_log.APPLIED.render("r", 3, "", 0, "0 not applicable", "PASS", 5, "", "", "")
    [found] = vllm_log.APPLIED.find(text)
    assert found["layer_maps"] == found["failed"] == found["hint_problems"] == "" and found["checks"] == "5"


def test_a_failed_verification_and_hint_problems_split_where_they_were_joined():
    """`%s%s`: the failed checks, then the hint problems (live_apply.after_draft_loaded)."""
    failed = ": share_kv_0 identity (x; y); copy_attr_2 same value"
    problems = "; SRG324 attention_backend: inherit_target, but ...; SRG324 method"
    has_own = "SRG512 load_format=dummy: has own weights = yes for every role the draft declares (random)"
    text = vllm_log.APPLIED.render("r", 3, "m: 0->1", 0, "0 not applicable", "FAIL, rolled back", 5, has_own, failed,
                                   problems)
    [found] = vllm_log.APPLIED.find(text)
    assert (found["verification"], found["has_own"], found["failed"], found["hint_problems"]) == \
        ("FAIL, rolled back", has_own, failed, problems)


def test_another_message_is_not_found():
    assert vllm_log.KV_BOUND.find(vllm_log.REFRESHED.render(3)) == []
    assert vllm_log.KV_BOUND.find("spec-surgery: KV caches bound: x/8 checks hold") == []


@pytest.mark.parametrize("fmt,fields", [("a %s %d", ("one",)), ("a %s", ("one", "two")), ("a %r", ("x",)),
                                        ("100%% %s", ("x",))])
def test_field_names_must_match_the_format(fmt, fields):
    with pytest.raises(ValueError):
        LogLine(fmt, fields)


def _sources(folder: Path):
    return [(p, p.read_text(encoding="utf-8")) for p in sorted(folder.rglob("*.py"))]


LOG_MODULES = {ROOT / "surgery" / "vllm" / "log.py", ROOT / "surgery" / "sglang" / "log.py"}


@pytest.mark.parametrize("name", sorted(LINES))
def test_the_code_logs_each_line_through_its_constant(name):
    """No copy of a defined line's text is left in the package (its longest literal stretch after the
    common `spec-surgery: ` is in no string outside the log modules), and its `.fmt` is logged."""
    module, const = name.rsplit(".", 1)
    stretch = max(re.split(r"%[sd]", LINES[name].fmt.removeprefix("spec-surgery: ")), key=len)
    uses = 0
    for path, text in _sources(ROOT / "surgery"):
        tree = ast.parse(text)
        if path not in LOG_MODULES and len(stretch) >= 12:
            copies = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                      and stretch in n.value]
            assert not copies, f"{path.relative_to(ROOT)}:{copies} repeats {stretch!r} of {name}"
        uses += sum(1 for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr == "fmt"
                    and isinstance(node.value, ast.Name) and node.value.id == const)
    assert uses, f"nothing logs {name}"


@pytest.mark.parametrize("name", sorted(LINES))
def test_each_line_is_read_by_a_test(name):
    module, const = name.rsplit(".", 1)
    readers = [path.relative_to(ROOT) for path, text in _sources(ROOT / "tests") if path != Path(__file__)
               and re.search(rf"from {re.escape(module)} import [^\n]*\b{const}\b", text)
               and f"{const}.find(" in text]
    assert readers, f"no test finds {name} in a log (import it and use {const}.find)"
