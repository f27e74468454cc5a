"""Issue 42 class 8: output a person reads top down (surgery/text/render.py, the one text renderer).

validate: the verdict is stdout's first line; the findings go to stderr, errors then warnings, each once;
a finding repeated over layers is one line with the layer list; shipped recipes by name and line; notes
with --verbose; --json keeps everything (every severity, full locations)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from surgery.text.diagnostics import Diagnostic, Location
from surgery.text.render import compact, counts, group, ordered_lines, render_diagnostics, short_location
from surgery.resources import data_dir, recipes_dir
from verdictline import without_release as NOREL  # noqa: E402  (the judged release, issue 53)

HERE = Path(__file__).resolve().parent
CONFIGS = HERE / "data" / "configs"
E2B, E2B_ASSISTANT = CONFIGS / "gemma-4-E2B-it.json", CONFIGS / "gemma-4-E2B-it-assistant.json"
LLAMA, EAGLE3 = CONFIGS / "Llama-3.1-8B-Instruct.json", CONFIGS / "EAGLE3-LLaMA3.1-Instruct-8B.json"


def d(code, severity, message, loc=Location(), hint=None):
    return Diagnostic(code, severity, message, loc, hint)


def test_swapped_gemma_pair_reads_top_down(run_cli):
    """The issue's example: 35 SRG302s (one per draft layer) were 70+ lines. Now: one line per layer type."""
    rc, out, err = run_cli("validate", "gemma4-mtp", "--target", E2B_ASSISTANT, "--draft", E2B)
    assert rc == 1 and NOREL(out).startswith("INVALID: gemma4-mtp") and out.count("\n") == 1  # the verdict, on stdout
    lines = [line for line in err.splitlines() if not line.startswith("    hint:")]
    srg302 = [line for line in lines if "SRG302" in line]
    assert len(srg302) == 2, err
    assert "draft layers 0-3, 5-8, 10-13, 15-18, 20-23, 25-28, 30-33 (28 layers) are 'sliding_attention'" in srg302[0]
    assert "draft layers 4, 9, 14, 19, 24, 29, 34 (7 layers) are 'full_attention'" in srg302[1]
    assert len(lines) <= 8 and all(": error SRG" in line for line in lines), err
    assert all(line.startswith("recipe gemma4-mtp:") for line in lines)  # no install path
    assert str(recipes_dir()) not in err
    assert "6 errors" in out.splitlines()[0]
    # --json: every diagnostic, one per layer, with the full location
    rc, out, _ = run_cli("validate", "gemma4-mtp", "--target", E2B_ASSISTANT, "--draft", E2B, "--json")
    diags = json.loads(out)["diagnostics"]
    assert len([x for x in diags if x["code"] == "SRG302"]) == 35
    assert all(x["location"].startswith(str(recipes_dir() / "gemma4-mtp.yaml") + ":") for x in diags
               if x["code"] == "SRG302")


def test_verdict_first_then_errors_then_warnings_notes_with_verbose(run_cli, monkeypatch):
    monkeypatch.chdir(HERE.parent)
    # fp8 KV reaches the drafter (SRG647): the one warning of this setup
    flags = ("--tp", "2", "--engine-version", "0.32.0", "--kv-cache-dtype", "fp8")
    rc, out, err = run_cli("validate", "eagle3", "--target", LLAMA, "--draft", EAGLE3, *flags)
    assert rc == 0 and NOREL(out.splitlines()[0]).startswith("valid: eagle3 for llama -> llama")
    assert "1 warning," in out.splitlines()[0] and "notes (--verbose)" in out.splitlines()[0]
    severities = [line.split(": ")[1].split()[0] for line in err.splitlines() if not line.startswith("    ")]
    assert severities == ["warning"]  # no notes without --verbose
    rc, out, err_v = run_cli("validate", "eagle3", "--target", LLAMA, "--draft", EAGLE3, *flags, "--verbose")
    severities = [line.split(": ")[1].split()[0] for line in err_v.splitlines() if not line.startswith("    ")]
    assert severities[:1] == ["warning"] and set(severities[1:]) == {"note"} and len(severities) > 1
    assert "note SRG644" in err_v  # weights not read: a note (class 9)
    # paths under the working directory print relative to it
    assert "\ntests/data/configs/EAGLE3-LLaMA3.1-Instruct-8B.json: note SRG644" in err_v
    # --json keeps the notes
    rc, out, _ = run_cli("validate", "eagle3", "--target", LLAMA, "--draft", EAGLE3, *flags, "--json")
    sev = {x["severity"] for x in json.loads(out)["diagnostics"]}
    assert sev == {"warning", "info"}


def test_plan_prints_the_plan_and_findings_apart(run_cli):
    rc, out, err = run_cli("plan", "eagle3", "--target", LLAMA, "--draft", EAGLE3, "--engine-version", "0.32.0",
                           "--kv-cache-dtype", "fp8", "--verbose")
    assert out.startswith("plan eagle3  [OK]") and "1 warning," in out.splitlines()[0]
    assert "SRG640" in err and "SRG640" not in out and "SRG647" in err and "SRG647" not in out


def test_errors_of_a_failed_command_are_rendered_too(run_cli):
    rc, out, err = run_cli("validate", "gemma4-mtp", "--target", "/nowhere/config.json", "--draft", E2B)
    assert rc == 2 and err.startswith("/nowhere/config.json") and "error SRG001" in err
    assert out == "not checked: gemma4-mtp (1 error)\n"  # validate's first line is always a verdict
    typo = HERE / "corpus" / "recipes" / "op-name-typo.yaml"
    rc, out, err = run_cli("validate", typo, "--target", E2B, "--draft", E2B_ASSISTANT)
    assert rc == 1 and NOREL(out).startswith("INVALID: ") and "error SRG101" in err
    rc, out, err = run_cli("validate", "gemma4-mtp", "--draft", E2B, "--pp", "0")
    assert rc == 2 and err.startswith("error SRG011: ")  # no location: no '<input>:' prefix


def test_group_merges_one_varying_layer_and_drops_repeats():
    loc = Location("x.yaml", 3, 5, "layer_maps.m")
    diags = [d("SRG302", "error", f"draft layer {i} reads target layer 13's K/V", loc) for i in (0, 1, 2, 5)]
    diags += [d("SRG302", "error", "draft layer 9 reads target layer 14's K/V", loc)]
    diags += [d("SRG330", "warning", "same message"), d("SRG330", "warning", "same message")]
    lines = group(diags)
    assert [(line.diagnostic.message, line.count) for line in lines] == [
        ("draft layers 0-2, 5 (4 layers) read target layer 13's K/V", 4),
        ("draft layer 9 reads target layer 14's K/V", 1),
        ("same message", 2)]
    # two numbers varying together: the one with the most values is listed, the other splits the groups
    pairs = [d("SRG303", "error", f"draft layer {i} has head_dim 64 but target layer {t} has 128", loc)
             for i, t in ((0, 13), (1, 13), (2, 14))]
    assert [line.diagnostic.message for line in group(pairs)] == [
        "draft layers 0-1 (2 layers) have head_dim 64 but target layer 13 has 128",
        "draft layer 2 has head_dim 64 but target layer 14 has 128"]
    # different codes, severities, locations or hints never merge
    assert len(group([d("SRG302", "error", "draft layer 1 x", loc), d("SRG302", "error", "draft layer 2 x")])) == 2


def test_order_and_counts():
    diags = [d("SRG203", "info", "n1"), d("SRG640", "warning", "w1"), d("SRG302", "error", "e1"),
             d("SRG302", "error", "e1")]
    assert [line.diagnostic.code for line in ordered_lines(diags)] == ["SRG302", "SRG640"]
    assert [line.diagnostic.code for line in ordered_lines(diags, verbose=True)] == ["SRG302", "SRG640", "SRG203"]
    assert counts(diags) == "1 error, 1 warning, 1 note (--verbose)"
    assert counts(diags, verbose=True) == "1 error, 1 warning, 1 note"
    assert counts([]) == "" and render_diagnostics([]) == ""
    assert render_diagnostics([d("SRG070", "error", "m", hint="h")]) == "error SRG070: m\n    hint: h\n"


def test_short_locations():
    recipe = recipes_dir() / "gemma4-mtp.yaml"
    assert short_location(Location(str(recipe), 43, 11, "requires[4].that")) == "recipe gemma4-mtp:43"
    card = data_dir() / "engines" / "vllm.yaml"
    assert short_location(Location(str(card), key_path="limits.x")) == "surgery/data/engines/vllm.yaml limits.x"
    here = Path(os.getcwd()) / "some" / "config.json"
    assert short_location(Location(str(here), key_path="k")) == "some/config.json k"
    assert short_location(Location("/elsewhere/config.json", 2)) == "/elsewhere/config.json:2"
    assert short_location(Location("org/name@abc/config.json", key_path="k")) == "org/name@abc/config.json k"
    assert short_location(Location()) == "<input>"
    assert compact([5, 0, 1, 2, 7, 8]) == "0-2, 5, 7-8"


def test_failed_new_names_at_most_three_candidates(run_cli):
    """A failed `new` named every shipped recipe with its whole covered-type list (~60 types each); now the
    closest three with the one blocking reason each, long lists cut, the others by name; --json keeps all."""
    rc, out, err = run_cli("new", "--target", CONFIGS / "Qwen3-8B.json", "--draft", E2B_ASSISTANT)
    assert rc == 1 and "error SRG020" in err
    reasons = [line for line in err.splitlines() if line.startswith("      ") and ": SRG" in line]
    assert 1 <= len(reasons) <= 3 and "in all)" in err  # a recipe's covered types counted, not all listed
    assert all(line.count(", ") <= 6 for line in reasons), reasons
    rc, out, _ = run_cli("new", "--target", CONFIGS / "Qwen3-8B.json", "--draft", E2B_ASSISTANT, "--json")
    assert len(json.loads(out)["candidates"]) > 3
