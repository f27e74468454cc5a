"""The config-only paths (`import surgery`, `surgery validate`, `surgery plan`, `surgery explain`)
never import torch, transformers or vllm: they must start fast and work where none of those is
installed. (jsonschema, a core dependency since the schema checks use it, is allowed; its cost is in
bench/cold_start.py's budget.) Each check runs in a fresh interpreter and inspects
sys.modules afterwards."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CORPUS = HERE / "corpus"
TARGET = CORPUS / "configs" / "gemma-4-E2B-it.json"
DRAFT = CORPUS / "configs" / "gemma-4-E2B-it-assistant.json"
SHIPPED = REPO / "recipes" / "gemma4-mtp.yaml"
HEAVY = ("torch", "transformers", "vllm", "numpy", "safetensors")

PROBE = """
import io, json, sys, contextlib
argv = json.loads(sys.argv[1])
rc = None
if argv is None:
    import surgery
else:
    from surgery.cli import main
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
        rc = main(argv)
heavy = json.loads(sys.argv[2])
loaded = sorted(m for m in sys.modules if m.split('.')[0] in heavy)
print(json.dumps({"rc": rc, "loaded": loaded}))
"""


def _probe(argv: list[str] | None) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(argv), json.dumps(HEAVY)], cwd=REPO,
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


PAIR = ["--target", str(TARGET), "--draft", str(DRAFT)]
TINY = REPO / "surgery" / "data" / "tiny" / "weights"
TINY_WEIGHTS = ["--target", str(TINY / "target"), "--draft", str(TINY / "draft")]


@pytest.mark.parametrize("argv, rc", [
    (None, None),
    (["validate", str(SHIPPED), *PAIR], 0),
    (["validate", str(SHIPPED), *PAIR, "--json"], 0),
    (["plan", str(SHIPPED), *PAIR], 0),
    (["plan", str(SHIPPED), *PAIR, "--json", "--engine", "hf"], 0),
    (["plan", "gemma4-mtp", *PAIR, "--pp", "2"], 1),  # shipped recipe by name, invalid under pp=2
    (["validate", str(CORPUS / "recipes" / "op-name-typo.yaml"), *PAIR], 1),  # schema error path
    (["validate", str(CORPUS / "recipes" / "python-tag-apply.yaml"), *PAIR], 2),  # YAML loader error path
    (["explain", "SRG302"], 0),
    (["recipes"], 0),
    (["validate", "gemma4-mtp", *TINY_WEIGHTS, "--weights", "--kv-cache-dtype", "fp8"], 0),  # safetensors headers
    (["plan", "gemma4-mtp", *TINY_WEIGHTS, "--weights", "--json", "--method", "draft_model"], 1),  # method mismatch
], ids=["import", "validate", "validate-json", "plan", "plan-json-hf", "plan-pp2", "schema-error", "yaml-error",
        "explain", "recipes", "validate-weights", "plan-weights-json"])
def test_no_heavy_imports(argv, rc):
    result = _probe(argv)
    assert result["rc"] == rc
    assert result["loaded"] == [], f"heavy modules imported: {result['loaded']}"


def test_probe_detects_heavy_imports():
    """The probe itself works: a command that does import a heavy module is seen."""
    pytest.importorskip("safetensors")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", "import safetensors\n" + PROBE, "null", json.dumps(HEAVY)],
                          cwd=REPO, capture_output=True, text=True, timeout=60, env=env)
    assert "safetensors" in json.loads(proc.stdout.strip().splitlines()[-1])["loaded"]


def test_a_command_imports_its_own_handler_only():
    """cli.COMMANDS names each handler as "module:function", imported when that command runs: `explain`
    loads surgery/commands/explain.py and no other command's module (validate's checks, apply's runners);
    `import surgery` reads no YAML until it loads a file."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    probe = ("import io, sys, contextlib\nfrom surgery.cli import main\n"
             "with contextlib.redirect_stdout(io.StringIO()):\n    rc = main(['explain', 'SRG302'])\n"
             "print(rc, sorted(m for m in sys.modules if m.startswith('surgery.commands')))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=env, cwd=REPO)
    assert proc.stdout.strip() == "0 ['surgery.commands', 'surgery.commands.explain']", proc.stdout + proc.stderr
    proc = subprocess.run([sys.executable, "-c", "import sys, surgery; print('yaml' in sys.modules)"],
                          capture_output=True, text=True, timeout=60, env=env, cwd=REPO)
    assert proc.stdout.strip() == "False", proc.stdout + proc.stderr


def test_the_vllm_plugin_imports_no_recipe_machinery_until_it_is_used():
    """vLLM calls the plugin's register() in every process it starts (API server, engine core, workers).
    Importing the plugin loads the hooks and the wrap, not what runs once a config is checked or a
    model loaded (recipe, resolver, plan, applier, checks, live_apply, config_check): those load where
    they run (surgery/vllm/plugin.py install_hooks, surgery/vllm/startup.py). The bound is the module set."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    probe = "import sys, surgery.vllm.plugin\nprint(sorted(m for m in sys.modules if m.startswith('surgery')))"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=env, cwd=REPO)
    loaded = set(json.loads(proc.stdout.replace("'", '"')))
    later = {"surgery.recipe", "surgery.resolver", "surgery.plan", "surgery.applier", "surgery.checks",
             "surgery.facts", "surgery.ops.registry", "surgery.vllm.live_apply", "surgery.vllm.config_check",
             "surgery.vllm.selection", "surgery.vllm.audit"}
    assert loaded and not loaded & later, sorted(loaded & later)
    # 27 today (25 before the text and guard packages added their two empty package modules); it was 46 when
    # importing surgery loaded the whole API
    assert len(loaded) <= 27, sorted(loaded)


def test_the_engine_package_face_loads_none_of_its_modules():
    """`import surgery.engine` (run by every engine module's import) loads no submodule, no YAML and no
    jsonschema; `judge` loads the release data when asked (issue 53: engine knowledge's one home)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    probe = ("import sys, surgery.engine as e\n"
             "print(sorted(m for m in sys.modules if m.startswith('surgery') or m in ('yaml', 'jsonschema')))\n"
             "r, d = e.judge('vllm', '0.34.0')\nprint(r.version, d)")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=env, cwd=REPO)
    assert proc.stdout.splitlines() == ["['surgery', 'surgery.engine', 'surgery.version']", "0.34.0 None"], \
        proc.stdout + proc.stderr


def test_validate_imports_what_it_uses():
    """`surgery validate` of a shipped recipe on two config.json files (issue 70's cold start, bench/cold_start.py):
    no package metadata (the installed versions are read from dist-info names, surgery/engine/releases.py), no
    guard (the recipe has no `guard:` block), no engine asked (no --engine-check)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    unused = ["importlib.metadata", "surgery.guard", "surgery.engine.ask", "email", "zipfile"]
    probe = ("import io, sys, json, contextlib\nfrom surgery.cli import main\n"
             "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
             f"    rc = main({['validate', str(SHIPPED), *PAIR]!r})\n"
             f"print(rc, json.dumps(sorted(m for m in sys.modules if any(m == u or m.startswith(u + '.') for u in {unused!r}))))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=env, cwd=REPO)
    rc, loaded = proc.stdout.strip().split(" ", 1)
    assert rc == "0" and json.loads(loaded) == [], proc.stdout + proc.stderr
