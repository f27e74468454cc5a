"""`surgery explain CODE` says the exit status a run raising that code really returns (issue 53): a warning
or a note leaves the verdict valid (exit 0), an error of the checks exits 1, a usage or load error exits 2.
Each case runs `surgery validate` in this process on configs that raise the code and compares its exit
with what `explain` prints, so a change to either side is caught."""
from __future__ import annotations

import json
import re

import pytest

from testpaths import CONFIGS, E2B, E2B_ASSISTANT
from surgery.commands.explain import exit_status
from surgery.text.diagnostics import catalogue

LLAMA = CONFIGS / "Llama-3.1-8B-Instruct.json"
EAGLE3 = CONFIGS / "EAGLE3-LLaMA3.1-Instruct-8B.json"  # unquantised: an fp8 KV cache reaching it is SRG647

# (validate arguments, a code the run raises, the severity it is raised with and the catalogue gives it)
CASES = {
    "warning": (["eagle3", "--target", LLAMA, "--draft", EAGLE3, "--kv-cache-dtype", "fp8"], "SRG647", "warning"),
    "note": (["eagle3", "--target", LLAMA, "--draft", EAGLE3], "SRG203", "info"),
    "error": (["gemma4-mtp", "--target", E2B_ASSISTANT, "--draft", E2B], "SRG302", "error"),  # the pair swapped
    "load error": (["gemma4-mtp", "--target", CONFIGS / "no-such-config.json", "--draft", E2B], "SRG001", "error"),
}


def validate(run_cli, argv) -> tuple[int, list[dict]]:
    rc, out, _ = run_cli("validate", *argv, "--json")
    return rc, json.loads(out)["diagnostics"]


def explained(run_cli, code: str) -> tuple[str, int]:
    rc, out, _ = run_cli("explain", code)
    assert rc == 0
    found = re.search(r"\(severity (\w+), exit (\d+)\)", out.splitlines()[0])
    assert found, out
    return found.group(1), int(found.group(2))


@pytest.mark.parametrize("kind", list(CASES))
def test_explain_gives_the_exit_validate_returns(run_cli, kind):
    argv, code, severity = CASES[kind]
    rc, diags = validate(run_cli, argv)
    assert severity in {d["severity"] for d in diags if d["code"] == code}, (code, diags)
    assert catalogue()[code].get("severity", "error") == severity  # explain speaks of this severity
    said_severity, said_exit = explained(run_cli, code)
    assert said_severity == severity
    assert said_exit == rc, f"explain {code} says exit {said_exit}; validate raising it returns {rc}"
    # --json carries the same figure
    _, out, _ = run_cli("explain", code, "--json")
    assert json.loads(out)["exit"] == rc


def test_warnings_and_notes_exit_0_even_where_the_catalogue_writes_exit_1():
    """codes.yaml's `exit` is the status "when this code is an error"; a few warnings / notes carry 1 there."""
    listed = [c for c, e in catalogue().items() if e.get("severity") in ("warning", "info") and "exit" in e]
    assert listed, "no warning or note with an `exit` entry left: drop this test"
    for code in listed:
        assert exit_status(code, catalogue()[code]["severity"]) == 0, code


@pytest.mark.parametrize("kind", list(CASES))
def test_a_verdict_exits_with_its_worst_finding(run_cli, kind):
    """Every finding as it was raised (its severity may differ from the catalogue's default): validate's exit
    is the highest of their exit statuses, so the rule explain prints is the one the CLI follows."""
    rc, diags = validate(run_cli, CASES[kind][0])
    assert rc == max(exit_status(d["code"], d["severity"]) for d in diags), diags


def test_explain_json_list_has_each_codes_exit(run_cli):
    rc, out, _ = run_cli("explain", "--json")
    listed = json.loads(out)
    assert rc == 0 and set(listed) == set(catalogue())
    for code, entry in listed.items():
        assert entry["exit"] == exit_status(code, entry["severity"]), code
