"""The benchmark scripts (bench/, bench/gpu/) are run by hand, some only on the H200, so nothing else
notices when a refactor moves a name they use: a GPU session then fails minutes into its budget.
This reads every script's imports from `surgery` and each `module.NAME` it reads off an imported
surgery module, and checks that the name exists (imports only, nothing runs)."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((REPO / "bench").rglob("*.py"))


def _surgery_references(tree: ast.AST) -> list[tuple[str, str, int]]:
    """(module, name, line) for `from surgery.x import name` and `alias.name` of surgery modules."""
    refs, aliases = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "surgery":
            for a in node.names:
                refs.append((node.module, a.name, node.lineno))
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "surgery" and a.asname:
                    aliases[a.asname] = a.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            refs.append((aliases[node.value.id], node.attr, node.lineno))
    return refs


def _resolve(dotted: str):
    try:
        return importlib.import_module(dotted)
    except ImportError:
        module, _, attr = dotted.rpartition(".")
        return getattr(importlib.import_module(module), attr)


def test_scripts_found():
    assert any(p.parent.name == "gpu" for p in SCRIPTS) and len(SCRIPTS) > 5


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_surgery_name_a_script_uses_exists(script):
    missing = []
    for module, name, line in _surgery_references(ast.parse(script.read_text(), str(script))):
        owner = _resolve(module)
        if not hasattr(owner, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"{script.relative_to(REPO)}:{line}: {module}.{name}")
    assert not missing, "bench scripts use names surgery no longer has:\n" + "\n".join(missing)
