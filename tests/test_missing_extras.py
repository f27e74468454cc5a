"""Issue 42 class 6: after `pip install spec-surgery` with no extras, every command either works (the
config-only ones) or says which extra to install with a code (SRG070), never a traceback.

"Not installed" is simulated the way Python itself reports it: `sys.modules[name] = None` in a fresh
interpreter, so `import name` raises ModuleNotFoundError and `importlib.util.find_spec(name)` is None.
Which command needs which module, and which extra provides it, is data (surgery/data/extras.yaml); the
data is checked against pyproject.toml's extras here too."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import tiny_checkpoints as tc

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CONFIGS = HERE / "data" / "configs"
E2B, E2B_ASSISTANT = CONFIGS / "gemma-4-E2B-it.json", CONFIGS / "gemma-4-E2B-it-assistant.json"
LLAMA, EAGLE3 = CONFIGS / "Llama-3.1-8B-Instruct.json", CONFIGS / "EAGLE3-LLaMA3.1-Instruct-8B.json"
OPTIONAL = ("torch", "transformers", "safetensors", "tokenizers", "vllm", "sglang")

PROBE = """
import json, sys
for name in json.loads(sys.argv[1]):
    sys.modules[name] = None
from surgery.cli import main
sys.exit(main(json.loads(sys.argv[2])))
"""


def run_blocked(blocked, argv, cwd):
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(list(blocked)), json.dumps([str(a) for a in argv])],
                          cwd=cwd, capture_output=True, text=True, timeout=300, env=env)
    return proc.returncode, proc.stdout, proc.stderr


def pyproject_extras() -> dict[str, list[str]]:
    with open(REPO / "pyproject.toml", "rb") as fh:
        return tomllib.load(fh)["project"]["optional-dependencies"]


def test_extras_data_matches_pyproject():
    """Every extra extras.yaml names exists in pyproject.toml and lists the package that provides the module."""
    from surgery.extras import modules

    extras = pyproject_extras()
    for name, entry in modules().items():
        if entry["extra"] is None:
            assert entry.get("note"), f"{name}: no extra, so the data must say how to install it"
            continue
        listed = [req.split(">")[0].split("<")[0].split("=")[0].strip() for req in extras[entry["extra"]]]
        assert entry["package"] in listed, (name, entry, listed)


# each command that needs an optional module: blocked alone, it is SRG070 naming the module and the pip line
NEEDS = [
    ("torch", ["apply", "gemma4-mtp"], "spec-surgery[apply]"),  # the README's first job
    ("transformers", ["apply", "gemma4-mtp"], "spec-surgery[apply]"),
    ("safetensors", ["apply", "gemma4-mtp"], "spec-surgery[apply]"),
    ("vllm", ["apply", "gemma4-mtp", "--engine", "vllm"], "spec-surgery[vllm]"),
    ("torch", ["apply", "gemma4-mtp", "--engine", "vllm"], "spec-surgery[apply]"),
    ("vllm", ["audit", "gemma4-mtp", "--target", E2B, "--draft", E2B_ASSISTANT], "spec-surgery[vllm]"),
    ("tokenizers", ["pair", "export", "gemma4-mtp", "OUT"], "spec-surgery[apply]"),
]


@pytest.mark.parametrize("module, argv, extra", NEEDS, ids=[f"{m}-{' '.join(map(str, a[:3]))}" for m, a, _ in NEEDS])
def test_command_names_the_extra(module, argv, extra, tmp_path):
    argv = [tmp_path / "pair" if a == "OUT" else a for a in argv]
    rc, out, err = run_blocked([module], argv, tmp_path)
    assert rc == 2, (rc, out, err)
    assert "Traceback" not in err and "SRG070" in err and module in err and f"pip install '{extra}'" in err, err
    assert not (tmp_path / "pair").exists()  # checked before anything was written
    rc, out, err = run_blocked([module], argv + ["--json"], tmp_path)
    assert rc == 2 and json.loads(out)["diagnostics"][0]["code"] == "SRG070"


def _every_command(tmp_path):
    head = tc.write_folder(tmp_path / "head", tc.eagle3_config(), tc.eagle3_tensors())
    target = tc.write_folder(tmp_path / "target", tc.llama_config(), tc.target_tensors())
    pair = ["--target", E2B, "--draft", E2B_ASSISTANT]
    return {  # command -> (argv, the exit codes it may end with, needs an optional module)
        "validate": (["validate", "gemma4-mtp", *pair], {0}, False),
        "validate --weights": (["validate", "eagle3", "--target", target, "--draft", head, "--weights"], {0}, False),
        "plan": (["plan", "gemma4-mtp", *pair], {0}, False),
        "new": (["new", "--target", LLAMA, "--draft", EAGLE3], {0}, False),
        "convert": (["convert", head, "--to", "speculators", tmp_path / "conv", "--target", target,
                     "--producer", "eagle"], {0}, False),
        "explain": (["explain", "SRG070"], {0}, False),
        "recipes": (["recipes"], {0}, False),
        "pair list": (["pair", "list"], {0}, False),
        "doctor": (["doctor", "--engine", "all"], {1}, False),  # no engine importable: its own coded lines
        "apply": (["apply", "gemma4-mtp"], {2}, True),
        "apply --engine vllm": (["apply", "gemma4-mtp", "--engine", "vllm"], {2}, True),
        "apply --engine sglang": (["apply", "eagle3", "--engine", "sglang"], {1, 2}, True),
        "audit": (["audit", "gemma4-mtp", *pair], {2}, True),
        "pair export": (["pair", "export", "gemma4-mtp", tmp_path / "exported"], {2}, True),
    }


def test_every_command_without_any_extra(tmp_path):
    """All optional modules blocked at once (a bare `pip install spec-surgery`): the config-only commands
    run as usual, the others end in a coded error that says what to install; no traceback anywhere."""
    problems = []
    for name, (argv, codes, needs) in _every_command(tmp_path).items():
        rc, out, err = run_blocked(OPTIONAL, argv, tmp_path)
        if rc not in codes or "Traceback" in err:
            problems.append(f"{name}: rc {rc}\n{err[-1500:]}")
        elif needs and not ("SRG070" in err or "SRG360" in err):
            problems.append(f"{name}: no SRG070 / SRG360\n{err[-800:]}")
        elif needs and "SRG070" in err and "pip install" not in err:
            problems.append(f"{name}: SRG070 without the pip line\n{err}")
    assert not problems, "\n\n".join(problems)


def test_a_deeper_import_is_coded_too(monkeypatch, capsys):
    """The CLI's net: a module imported by a path `require` does not list (here: a command made to import
    torch) is the same SRG070; an ImportError of ours stays a traceback (a bug, not an install problem)."""
    from surgery import cli
    from surgery.commands import recipes

    def needs_torch(args, out):
        raise ModuleNotFoundError("No module named 'torch'", name="torch")

    monkeypatch.setattr(recipes, "cmd_recipes", needs_torch)  # cli.COMMANDS names it
    assert cli.main(["recipes"]) == 2
    err = capsys.readouterr().err
    assert "SRG070" in err and "`surgery recipes` needs torch" in err and "spec-surgery[apply]" in err

    def too_old(args, out):
        raise ImportError("cannot import name 'Gemma4AssistantConfig' from 'transformers'", name="transformers")

    monkeypatch.setattr(recipes, "cmd_recipes", too_old)  # cli.COMMANDS names it
    assert cli.main(["recipes"]) == 2
    err = capsys.readouterr().err
    assert "SRG071" in err and "Gemma4AssistantConfig" in err

    def ours(args, out):
        raise ModuleNotFoundError("No module named 'surgery.nowhere'", name="surgery.nowhere")

    monkeypatch.setattr(recipes, "cmd_recipes", ours)  # cli.COMMANDS names it
    with pytest.raises(ModuleNotFoundError):
        cli.main(["recipes"])
