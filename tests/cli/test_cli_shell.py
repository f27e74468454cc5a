"""Shell habits and `surgery new`.

- every command takes `--json` and prints parseable JSON (errors too);
- no ANSI escape codes in pipes (non-TTY), NO_COLOR honoured; `apply`'s progress lines only on a TTY;
- `surgery --help` and every subcommand's help show an example and the exit codes;
- every shipped recipe starts with the yaml-language-server `$schema` line (their validity under
  plain `jsonschema` is tests/test_schema_oracle.py::test_shipped_recipes_valid_under_both);
- `surgery new` picks the right shipped recipe for the shipped config pairs, writes a recipe that
  validates against the pair, and says why when none fits (SRG020, exit 1)."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testpaths import CONFIGS, E2B, E2B_ASSISTANT, ROOT
from surgery.cli import build_parser
from surgery.resources import schemas_dir, shipped_recipes
from verdictline import without_release as NOREL  # noqa: E402  (the judged release, issue 53)

SCHEMA_LINE = "# yaml-language-server: $schema=../schemas/recipe.schema.json"
ESC = "\x1b"


def _subparsers():
    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


COMMANDS = sorted(_subparsers())


def test_commands_are_known():
    assert set(COMMANDS) == {"validate", "plan", "explain", "recipes", "new", "apply", "audit", "pair", "convert", "doctor",
                             "releases", "probe"}


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_has_json_example_and_exit_codes(name):
    sub = _subparsers()[name]
    helptext = sub.format_help()
    if name == "pair":  # `surgery pair list|export`: --json on each action
        actions = next(a for a in sub._actions if isinstance(a, argparse._SubParsersAction)).choices
        assert all("--json" in {o for a in p._actions for o in a.option_strings} for p in actions.values())
    else:
        assert "--json" in {o for a in sub._actions for o in a.option_strings}
    assert "example" in helptext and f"surgery {name}" in helptext.split("example", 1)[1]
    assert "exit codes: 0" in helptext


def test_main_help_has_examples_and_exit_codes():
    out = build_parser().format_help()
    assert "examples:" in out and "surgery new --target" in out
    assert "exit codes: 0 fine" in out and "NO_COLOR" in out


def test_version(capsys):
    from surgery import __version__
    from surgery.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"spec-surgery {__version__}"


@pytest.mark.parametrize("args", [
    ["recipes", "--json"],
    ["explain", "--json"],
    ["explain", "SRG302", "--json"],
    ["validate", "gemma4-mtp", "--target", E2B, "--draft", E2B_ASSISTANT, "--json"],
    ["plan", "gemma4-mtp", "--target", E2B, "--draft", E2B_ASSISTANT, "--json"],
    ["new", "--target", E2B, "--draft", E2B_ASSISTANT, "--json"],
])
def test_json_output_parses(run_cli, args):
    code, out, _ = run_cli(*args)
    assert code == 0
    json.loads(out)


@pytest.mark.parametrize("args,exit_code", [
    (["validate", "gemma4-mtp", "--target", E2B, "--draft", E2B_ASSISTANT, "--pp", "2", "--json"], 1),
    (["plan", "no-such-recipe", "--target", E2B, "--draft", E2B_ASSISTANT, "--json"], 2),
    (["explain", "SRG999", "--json"], 2),
    (["new", "--target", E2B, "--draft", "/nonexistent/config.json", "--json"], 2),
    (["new", "--target", E2B, "--draft", CONFIGS / "Llama-3.2-1B-Instruct.json", "--json"], 1),
    (["recipes", "--bogus", "--json"], 2),
])
def test_json_output_on_failure(run_cli, args, exit_code):
    code, out, err = run_cli(*args)
    assert code == exit_code
    doc = json.loads(out)
    assert doc["ok"] is False and any(d["severity"] == "error" for d in doc["diagnostics"])
    if args[0] != "validate":  # a resolved plan is the JSON answer; input errors also go to stderr
        assert "SRG" in err


def _pipe(*args, env_extra=None):
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "CLICOLOR_FORCE")}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "surgery", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)


@pytest.mark.parametrize("env_extra", [None, {"NO_COLOR": "1"}, {"TERM": "xterm-256color"}])
def test_no_escape_codes_in_pipes(env_extra):
    runs = [
        _pipe("recipes", env_extra=env_extra),
        _pipe("--help", env_extra=env_extra),
        _pipe("plan", "gemma4-mtp", "--target", E2B, "--draft", E2B_ASSISTANT, env_extra=env_extra),
        _pipe("validate", "gemma4-mtp", "--target", E2B, "--draft", E2B_ASSISTANT, "--pp", "2", env_extra=env_extra),
        _pipe("new", "--target", E2B, "--draft", CONFIGS / "Llama-3.2-1B-Instruct.json", env_extra=env_extra),
        _pipe("explain", "SRG302", env_extra=env_extra),
    ]
    assert [r.returncode for r in runs] == [0, 0, 0, 1, 1, 0]
    for r in runs:
        assert ESC not in r.stdout and ESC not in r.stderr, r.args


def test_apply_progress_only_on_a_tty(monkeypatch, capsys):
    from surgery.commands.hf_apply import Progress

    p = Progress(True)  # capsys: stderr is not a terminal
    p("loading")
    p.done()
    assert capsys.readouterr().err == ""

    class Tty:
        def __init__(self):
            self.text = ""

        def isatty(self):
            return True

        def write(self, s):
            self.text += s

        def flush(self):
            pass

    tty = Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    monkeypatch.setenv("NO_COLOR", "1")
    p = Progress(True)
    p("loading")
    p.done()
    assert tty.text == "[surgery] loading\n"  # a terminal with NO_COLOR: plain lines, no escapes


@pytest.mark.parametrize("path", shipped_recipes(), ids=lambda p: p.name)
def test_recipe_starts_with_schema_line(path):
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first == SCHEMA_LINE
    assert (path.parent / first.split("$schema=", 1)[1]).resolve() == (schemas_dir() / "recipe.schema.json").resolve()


# --- surgery new ----------------------------------------------------------------------------

PAIRS = [  # (target, draft, expected recipe, other recipes that also fit)
    ("gemma-4-E2B-it", "gemma-4-E2B-it-assistant", "gemma4-mtp", []),
    ("Llama-3.1-8B-Instruct", "EAGLE3-LLaMA3.1-Instruct-8B", "eagle3", []),
    # an EAGLE-1 head is config-wise a one-layer Llama of the target's width: eagle wins, and draft-model is not
    # offered beside it (issue 42 class 2: new.eagle1_head_shape)
    ("Llama-3.1-8B-Instruct", "EAGLE-LLaMA3.1-Instruct-8B", "eagle", []),
    ("DeepSeek-V3", "DeepSeek-V3", "deepseek-mtp", []),
    ("DeepSeek-V3.2-Exp", "DeepSeek-V3.2-Exp", "deepseek-mtp", []),
    ("Llama-3.1-8B-Instruct", "Llama-3.2-1B-Instruct", "draft-model", []),
    ("GLM-4.5-Air", "GLM-4.5-Air", "mtp", []),
    ("MiMo-7B-RL", "MiMo-7B-RL", "mtp", []),
    ("Qwen3-Next-80B-A3B-Instruct", "Qwen3-Next-80B-A3B-Instruct", "mtp", []),
]


@pytest.mark.parametrize("target,draft,expected,also", PAIRS, ids=[f"{p[1]}->{p[0]}" for p in PAIRS])
def test_new_picks_the_shipped_recipe_and_it_validates(run_cli, tmp_path, target, draft, expected, also):
    t, d = CONFIGS / f"{target}.json", CONFIGS / f"{draft}.json"
    out = tmp_path / "sub" / "mine.yaml"
    code, stdout, err = run_cli("new", "--target", t, "--draft", d, "--out", out)
    assert code == 0, err
    assert f"from shipped `{expected}`" in stdout and str(out) in stdout
    text = out.read_text(encoding="utf-8")
    first = text.splitlines()[0]
    assert first.startswith("# yaml-language-server: $schema=")
    schema_ref = first.split("$schema=", 1)[1]
    assert (out.parent / schema_ref).resolve() == (schemas_dir() / "recipe.schema.json").resolve()
    assert f"recipe: {expected}\n" in text
    code, stdout, err = run_cli("validate", out, "--target", t, "--draft", d)
    assert code == 0 and NOREL(stdout.splitlines()[0]).startswith(f"valid: {expected}"), stdout + err  # the verdict first
    code, stdout, _ = run_cli("new", "--target", t, "--draft", d, "--json")
    doc = json.loads(stdout)
    assert doc["ok"] and doc["recipe"] == expected and doc["alternatives"] == also
    assert doc["text"].startswith("# yaml-language-server: $schema=file://")
    assert doc["draft"]["model_type"] and doc["target"]["architectures"]


def test_new_to_stdout_with_name(run_cli):
    code, out, err = run_cli("new", "--target", E2B, "--draft", E2B_ASSISTANT, "--name", "my-gemma")
    assert code == 0
    assert "recipe: my-gemma\n" in out and "from shipped `gemma4-mtp`" in err
    from surgery.recipe import parse_recipe

    assert parse_recipe(out, "<stdout>").name == "my-gemma"


def test_new_refuses_to_overwrite(run_cli, tmp_path):
    out = tmp_path / "r.yaml"
    out.write_text("keep me\n", encoding="utf-8")
    code, _, err = run_cli("new", "--target", E2B, "--draft", E2B_ASSISTANT, "--out", out)
    assert code == 2 and "SRG021" in err
    assert out.read_text(encoding="utf-8") == "keep me\n"
    code, _, _ = run_cli("new", "--target", E2B, "--draft", E2B_ASSISTANT, "--out", out, "--force")
    assert code == 0 and out.read_text(encoding="utf-8").startswith("# yaml-language-server")


def test_new_says_why_nothing_fits(run_cli, tmp_path):
    out = tmp_path / "r.yaml"
    code, stdout, err = run_cli("new", "--target", E2B, "--draft", CONFIGS / "Llama-3.2-1B-Instruct.json",
                                "--out", out)
    assert code == 1 and not out.exists()
    assert "SRG020" in err and "no shipped recipe fits draft llama" in err
    # issue 42: the closest candidates only (at most 3), one reason each, no recipe's full model-type list
    listed = [line.strip() for line in err.splitlines() if line.startswith("      ")]
    assert 1 <= len(listed) <= 3 and "draft-model: SRG204" in err and "(10 in all)" in err


def test_new_reports_the_failing_requirement_of_a_near_candidate(run_cli, tmp_path):
    # a Llama 1B draft for a Llama 8B target, with the vocabulary changed: draft-model applies but fails
    cfg = json.loads((CONFIGS / "Llama-3.2-1B-Instruct.json").read_text(encoding="utf-8"))
    cfg["vocab_size"] = 32000
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps(cfg), encoding="utf-8")
    code, out, err = run_cli("new", "--target", CONFIGS / "Llama-3.1-8B-Instruct.json", "--draft", bad, "--json")
    assert code == 1
    doc = json.loads(out)
    near = {c["recipe"]: c for c in doc["candidates"] if c["applies"]}
    assert {"draft-model", "eagle"} <= set(near)
    assert any(r["code"] == "SRG313" for r in near["draft-model"]["reasons"])
    assert doc["diagnostics"][0]["code"] == "SRG020"
    assert "draft-model: SRG313" in err
