"""The house rules of the package, read off its source with `ast` (docs/architecture.md):

- no import cycle inside `surgery/` or `tools/`, imports inside functions included;
- no underscore name imported or read across modules (each private name is its module's own);
- the map is whole: every module under surgery/ has a layer in surgery/data/layers.yaml (the
  diagram in docs/architecture.md is generated from it);
- every import goes to its own layer or below, and no two folders import each other, except the few
  that table allows by name, each with why; within the allowed direction, the kernel
  (`surgery/live/`) knows no op, engine integrations do not import each other and a performer knows
  no registry.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "surgery"
TOOLS = ROOT / "tools"
sys.path.insert(0, str(TOOLS))
import layermap  # noqa: E402  (tools/layermap.py: the one reader of surgery/data/layers.yaml and of the imports)
from layermap import MODULES, TREES, imports_of, known_module, package_imports, rel, resolve_from  # noqa: E402


def import_graph() -> dict[str, set[str]]:
    return {name: {t for t, _, _ in imports_of(name) if t != name} for name in MODULES}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), plus self-loops."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_in_the_package_or_tools():
    found = cycles(import_graph())
    assert not found, "import cycles (imports inside functions count):\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_cycle_finder_finds_a_cycle():
    """The check itself: a loop through a function-level import is a cycle."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def _private(attr: str) -> bool:
    return attr.startswith("_") and not (attr.startswith("__") and attr.endswith("__"))


def _defined_private_names() -> dict[str, set[str]]:
    """Private names each module defines: functions, classes, methods, module and class constants."""
    out = {}
    for name, tree in TREES.items():
        names = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and _private(node.name):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                    if isinstance(target, ast.Name) and _private(target.id):
                        names.add(target.id)
                    # an instance attribute the module's own classes set (`self._codes = ...`) is its own too
                    elif isinstance(target, ast.Attribute) and _private(target.attr) \
                            and isinstance(target.value, ast.Name) and target.value.id in ("self", "cls"):
                        names.add(target.attr)
                    elif isinstance(target, ast.Name) and target.id == "__slots__":
                        names |= {e.value for e in ast.walk(node.value)
                                  if isinstance(e, ast.Constant) and isinstance(e.value, str) and _private(e.value)}
        out[name] = names
    return out


def private_uses() -> list[str]:
    defined = _defined_private_names()
    everywhere = set().union(*defined.values())
    problems = []
    for name, tree in TREES.items():
        module_aliases = {}
        for target, taken, node in imports_of(name):
            where = f"{MODULES[name].relative_to(ROOT)}:{node.lineno}"
            for t in taken:
                if _private(t):
                    problems.append(f"{where}: imports {t} from {target}")
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if known_module(alias.name) and alias.asname:
                        module_aliases[alias.asname] = known_module(alias.name)
            elif not taken:
                for alias in node.names:
                    module_aliases[alias.asname or alias.name] = target
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not _private(node.attr):
                continue
            where = f"{MODULES[name].relative_to(ROOT)}:{node.lineno}"
            owner = node.value.id if isinstance(node.value, ast.Name) else None
            if owner in module_aliases:
                problems.append(f"{where}: reads {module_aliases[owner]}.{node.attr}")
            elif node.attr.startswith("_surgery"):
                problems.append(f"{where}: names the stashed attribute {node.attr} (use its owner's accessors)")
            elif owner not in ("self", "cls") and node.attr in everywhere and node.attr not in defined[name]:
                problems.append(f"{where}: reads {node.attr}, private to another module")
    return problems


def test_no_underscore_name_is_used_across_modules():
    problems = private_uses()
    assert not problems, "\n".join(problems)


TABLE = layermap.load()


def engine_names() -> tuple[str, ...]:
    from surgery.engine.cards import ENGINES

    return ENGINES


def test_every_module_has_a_layer():
    """The map is whole: a new module fails here until surgery/data/layers.yaml places it."""
    missing = [rel for rel in layermap.package_files() if layermap.place(rel, TABLE) is None]
    assert not missing, "modules no entry of surgery/data/layers.yaml places:\n" + "\n".join(missing)


def test_the_layer_table_is_well_formed():
    """Distinct layer numbers; every key places at least one module (no stale key); every allowed
    exception and forbidden import says why."""
    numbers = [e["layer"] for e in TABLE["layers"]]
    assert len(set(numbers)) == len(numbers)
    assert all({"layer", "name", "says", "modules"} <= set(e) for e in TABLE["layers"])
    files = layermap.package_files()
    stale = [k for e in TABLE["layers"] for k in e["modules"] if not any(layermap.matches(k, f) for f in files)]
    assert not stale, f"keys of surgery/data/layers.yaml that place no module: {stale}"
    for section in ("allowed_upward", "allowed_folder_cycles", "forbidden"):
        assert all(str(x.get("why", "")).strip() for x in TABLE[section]), f"{section}: an entry without why"


def upward_imports(table: dict = TABLE, imports: list | None = None) -> list[tuple[str, str, int]]:
    """Imports from a module to one of a higher layer, the allowed ones included."""
    out = []
    for a, b, line in (package_imports() if imports is None else imports):
        la, lb = layermap.place(a, table), layermap.place(b, table)
        if la and lb and lb["layer"] > la["layer"]:
            out.append((a, b, line))
    return out


def test_layers_import_downwards_only():
    """Every import, inside functions included, goes to the importer's layer or below, except
    the ones surgery/data/layers.yaml allows by name (each with why); an allowed one that no longer
    exists must leave the list."""
    allowed = {(a["from"], a["to"]) for a in TABLE["allowed_upward"]}
    layer = {rel: e for rel, e in layermap.placement(TABLE).items()}
    found = upward_imports()
    problems = [f"surgery/{a}:{line} imports surgery/{b}: layer {layer[a]['layer']} ({layer[a]['name']}) "
                f"-> {layer[b]['layer']} ({layer[b]['name']})" for a, b, line in found if (a, b) not in allowed]
    stale = allowed - {(a, b) for a, b, _ in found}
    problems += [f"allowed_upward {a} -> {b} no longer happens: remove it" for a, b in sorted(stale)]
    assert not problems, "\n".join(problems)


def test_forbidden_imports_within_the_allowed_direction():
    """What the order allows but the design does not (the kernel knows no op; engine integrations do
    not import each other; a performer knows no registry)."""
    problems = []
    for a, b, line in package_imports():
        for rule in TABLE["forbidden"]:
            if layermap.any_match(rule["from"], a) and layermap.any_match(rule["to"], b):
                problems.append(f"surgery/{a}:{line} imports surgery/{b}: {rule['why']}")
    assert not problems, "\n".join(problems)


def room(rel: str) -> str:
    """A folder of the package, or a top-level module (its own room)."""
    first = rel.split("/")[0]
    return "surgery" if first == "__init__.py" else first.removesuffix(".py")


def folder_cycles(imports: list | None = None) -> list[list[str]]:
    graph: dict[str, set[str]] = {}
    for a, b, _ in (package_imports() if imports is None else imports):
        graph.setdefault(room(a), set())
        graph.setdefault(room(b), set())
        if room(a) != room(b):
            graph[room(a)].add(room(b))
    return cycles(graph)


def test_no_loop_between_folders():
    """Package A imports B and B imports A, at the folder level (imports inside functions count),
    except the loops surgery/data/layers.yaml allows by name."""
    allowed = [sorted(c["rooms"]) for c in TABLE["allowed_folder_cycles"]]
    found = folder_cycles()
    problems = [" <-> ".join(c) for c in found if c not in allowed]
    problems += [f"allowed_folder_cycles {c} no longer happens: remove it" for c in allowed if c not in found]
    assert not problems, "folder-level loops:\n" + "\n".join(problems)


def test_the_layer_checks_find_what_they_look_for():
    """The checks themselves, on a made-up import list: an upward import and a folder loop."""
    table = {"layers": [{"layer": 0, "name": "low", "modules": ["a/", "a/top.py"]},
                        {"layer": 1, "name": "high", "modules": ["b/", "ops/*/__init__.py"]}]}
    table["layers"][0]["modules"].remove("a/top.py")
    table["layers"][1]["modules"].append("a/top.py")  # a file key beats its folder
    imports = [("a/x.py", "b/y.py", 1), ("b/y.py", "a/x.py", 2), ("a/top.py", "b/y.py", 3), ("a/x.py", "a/top.py", 4)]
    assert upward_imports(table, imports) == [("a/x.py", "b/y.py", 1), ("a/x.py", "a/top.py", 4)]
    assert layermap.place("a/top.py", table)["name"] == "high"
    assert layermap.place("a/x.py", table)["name"] == "low"
    assert layermap.place("ops/keep/__init__.py", table)["name"] == "high"
    assert layermap.place("ops/keep/hf.py", table) is None
    assert folder_cycles(imports) == [["a", "b"]]
    assert folder_cycles([("a/x.py", "b/y.py", 1)]) == []


@pytest.mark.parametrize("kind", sorted(m.split(".")[2] for m in MODULES if m.count(".") == 2
                                        and m.startswith("surgery.ops.") and layermap.is_package(m)))
def test_each_op_kind_is_one_folder_with_its_performers(kind):
    """Spec, expansion, checks and rendering in the package; a performer per engine that performs it."""
    from surgery.engine.cards import ENGINES
    from surgery.ops.registry import UNITS

    unit = UNITS[kind]
    folder = PKG / "ops" / kind
    for engine in ENGINES:
        assert (folder / f"{engine}.py").exists() == (unit.refusal(engine) is None), (kind, engine)


def test_only_the_sglang_layer_imports_sglang_and_only_lazily():
    """CI has no SGLang: in the package, `sglang` is imported nowhere but in surgery/sglang/, and
    there only inside functions (so `import surgery.sglang.<module>` works without it). tools/ is
    not the package: tools/sglang_imported_oracle.py runs inside the SGLang venv only."""
    from surgery.engine.ask import RUNNERS

    # the engine runners (surgery/engine/ask/*_runner.py) are scripts the driver runs BY PATH in the engine's
    # own environment, never imported by the package: there, importing the engine is their one job
    by_path = {p.resolve() for p in RUNNERS.values()}
    problems = []
    for name, tree in TREES.items():
        if not name.startswith("surgery") or MODULES[name].resolve() in by_path:
            continue
        for node in ast.walk(tree):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            if not any(m == "sglang" or m.startswith("sglang.") for m in mods):
                continue
            where = f"{MODULES[name].relative_to(ROOT)}:{node.lineno}"
            if not name.startswith("surgery.sglang"):
                problems.append(f"{where}: imports sglang outside surgery/sglang/")
            elif node in tree.body:
                problems.append(f"{where}: imports sglang at module level")
    assert not problems, "\n".join(problems)


def args_readers() -> set[str]:
    """The modules that may read argparse's namespace: the CLI and the handler modules its command table
    names (surgery/commands/<command>.py); they build the option dataclasses (surgery/options.py)."""
    from surgery.cli import COMMANDS

    return {"surgery.cli"} | {entry.partition(":")[0] for entry in COMMANDS.values()}


ARGS_READERS = args_readers()


def args_reads(trees: dict[str, ast.AST]) -> list[str]:
    """`args.X` and `getattr(args, ...)` in any module but the CLI: library code takes surgery/options.py's
    dataclasses (or plain parameters), never argparse's namespace (issue 43). A hook's `*args` indexed
    (`args[0]`) is not a namespace and is not counted."""
    found = []
    for name, tree in trees.items():
        if not name.startswith("surgery") or name in ARGS_READERS:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "args":
                found.append(f"{name}:{node.lineno}: args.{node.attr}")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" \
                    and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id == "args":
                found.append(f"{name}:{node.lineno}: getattr(args, ...)")
    return found


def test_only_the_cli_reads_argparse_args():
    found = args_reads(TREES)
    assert not found, "build the options in surgery/cli.py and pass them instead:\n" + "\n".join(found)


def test_the_args_finder_finds_args_reads():
    """The check itself, on code it must flag and code it must let pass."""
    flagged = args_reads({"surgery.x": ast.parse("def f(args):\n    return args.method, getattr(args, 'tp', 1)\n"),
                          "surgery.cli": ast.parse("def g(args):\n    return args.method\n")})
    assert flagged == ["surgery.x:2: args.method", "surgery.x:2: getattr(args, ...)"]
    assert args_reads({"surgery.x": ast.parse("def h(*args):\n    return args[0], step.args.get('a')\n")}) == []


def local_source_isinstance(trees: dict[str, ast.AST]) -> list[str]:
    """`isinstance(x, LocalSource)` outside surgery/modelfiles/source.py: ask the source (`is_local`,
    `local_folder`, `local_path(name)`) instead, so a new kind of source answers for itself."""
    found = []
    for name, tree in trees.items():
        if not name.startswith("surgery") or name == "surgery.modelfiles.source":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance" \
                    and len(node.args) == 2:
                classes = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
                if any((isinstance(c, ast.Name) and c.id == "LocalSource") or
                       (isinstance(c, ast.Attribute) and c.attr == "LocalSource") for c in classes):
                    found.append(f"{name}:{node.lineno}")
    return found


def test_no_isinstance_local_source_outside_modelsource():
    found = local_source_isinstance(TREES)
    assert not found, "use ModelSource.is_local / local_folder / local_path:\n" + "\n".join(found)


def test_the_local_source_finder_finds_isinstance():
    code = "isinstance(s, LocalSource)\nisinstance(s, (HubSource, ms.LocalSource))\nisinstance(s, ModelSource)\n"
    assert local_source_isinstance({"surgery.x": ast.parse(code)}) == ["surgery.x:1", "surgery.x:2"]
    assert local_source_isinstance({"surgery.modelfiles.source": ast.parse(code)}) == []


MAX_FUNCTION_LINES = 80


def test_no_function_over_80_lines():
    """Issue 43: a function a reader can hold in view (the parser as one builder per command,
    `facts_from_config` from its readers, the command runners by phase)."""
    import ast

    long = []
    for path in sorted((ROOT / "surgery").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({n} lines)")
    assert not long, long


#: What an import inside a function may import besides our engine modules (issue 43): the heavy optional
#: dependencies, and a few more, each with why it is imported where it is used.
LAZY_DEPENDENCIES = {
    "torch": "optional (the apply extra); seconds to import",
    "transformers": "optional (the apply extra); ~1 s to import (bench/cold_start.py)",
    "vllm": "an engine: present only where it serves",
    "sglang": "an engine: absent in CI (test_only_the_sglang_layer_imports_sglang_and_only_lazily)",
    "huggingface_hub": "optional: the hub client's cache and auth helpers",
    "jsonschema": "only for a recipe the user wrote: shipped ones are prechecked (surgery/prechecked.py)",
    "safetensors": "optional (the apply extra); the header checks read the files themselves",
    "numpy": "optional; pulled in by torch",
    "tokenizers": "the byte tokenizer's writer (tinymodels/bytetokenizer.py): a transformers dependency, for the tiny pair only",
    "prometheus_client": "vLLM's metrics client, present only where vLLM is (surgery/vllm/guard.py)",
    "concurrent.futures": "threads for hub reads only (modelfiles/sidebyside.py, checks/safetensors_header.py): threading and queue "
                          "are ~7 ms that `surgery validate` on local files does not pay (bench/cold_start.py)",
    "difflib": "a did-you-mean on a typo only (guard/settings.py, text/schemacheck.py, checks/engine_start.py, recipe.py): ~1 ms "
               "(heapq) that every `surgery validate` would pay (bench/cold_start.py)",
    "yaml": "PyYAML and its C loader, ~12 ms: the base modules that read YAML (resources.py, text/yamlload.py) import it "
            "when they first read, so `import surgery`, `surgery --help` and `--version` do not pay for it",
    "fcntl": "POSIX only: the tiny pair's cache lock (tinymodels/tinypair.py); the module must import on every platform",
}

#: Our modules an import inside a function may import besides the engine modules, each with why.
LAZY_MODULES = {
    "surgery.hub": "the hub client (urllib.request, http.client, email: ~40 ms): only a hub id (modelref.open_model) "
                   "or --refresh (cli.main) imports surgery.hub; tests/hub/test_hub_validate.py "
                   "test_local_paths_import_no_hub_client holds local paths to that",
    "surgery.checks.weights": "--weights only: the safetensors header reader (threading, array) stays out of "
                              "`surgery validate` without it (commands/checks.py)",
    "surgery.mermaid": "`surgery plan --format mermaid` only: compiling the renderer cost `surgery validate` ~1.4 ms "
                       "of its cold start (bench/cold_start.py, plain column)",
    "surgery.extras": "read only when an ImportError reaches cli.main (SRG070 / SRG071): ~0.5 ms of every start",
    "surgery.engine.releases": "the face of surgery/engine/ (`judge`) loads the release data on first use: every "
                               "engine module's import runs surgery/engine/__init__.py, which must load none of them",
    "surgery.engine.ask": "--engine-check only (commands/checks.py): asking an installed engine (subprocess, shutil; "
                          "~3 ms) stays out of every other `surgery validate` (bench/cold_start.py)",
    "surgery.guard": "a recipe's `guard:` block only (recipe.py, commands/checks.py): the guard's settings and rules "
                     "(eight modules, ~3.5 ms) stay out of `surgery validate` of a recipe without one (bench/cold_start.py)",
}

def _engine_module(dotted: str) -> bool:
    """A module of ours named for an engine: surgery/<engine>/..., a performer surgery/ops/<kind>/<engine>.py
    (the registry finds those by module name) or an engine context surgery/live/<engine>.py."""
    parts = dotted.split(".")
    return parts[0] == "surgery" and any(p in engine_names() for p in parts[1:])


def _lazy_allowed(dotted: str) -> bool:
    if dotted.split(".")[0] != "surgery":
        return any(dotted == d or dotted.startswith(d + ".") for d in LAZY_DEPENDENCIES)
    return _engine_module(dotted) or any(dotted == m or dotted.startswith(m + ".") for m in LAZY_MODULES)


def _imported_names(name: str, node: ast.AST) -> list[str]:
    """The dotted modules an import statement names: `from pkg import sub` is `pkg.sub` when `sub` is a
    module of ours, else `pkg`."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = resolve_from(name, node)
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]


def function_imports(trees: dict[str, ast.AST]) -> list[tuple[str, int, str]]:
    """(module, line, what) for every import statement inside a function (methods and nested functions
    included) that imports something `_lazy_allowed` refuses."""
    found = []

    def walk(name, node, inside):
        for child in ast.iter_child_nodes(node):
            if inside and isinstance(child, (ast.Import, ast.ImportFrom)):
                bad = [d for d in _imported_names(name, child) if not _lazy_allowed(d)]
                if bad:
                    found.append((name, child.lineno, ", ".join(bad)))
            walk(name, child, inside or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    for name, tree in trees.items():
        if name.startswith("surgery"):
            walk(name, tree, False)
    return found


def test_imports_inside_functions_only_for_heavy_dependencies_and_engine_modules():
    """Issue 43: an import sits inside a function only when importing it at module top would cost what a
    config-only command must not pay or cannot have, i.e. it imports one of
      - a heavy optional dependency (LAZY_DEPENDENCIES: torch, transformers, vllm, sglang, huggingface_hub,
        jsonschema, safetensors, numpy, and a few more, each with why), or
      - an engine module of ours: a dotted part of its name is an engine (surgery/vllm/, surgery/sglang/,
        surgery/hf/, a performer ops/<kind>/<engine>.py, an engine context live/<engine>.py), or
      - one of LAZY_MODULES (the hub's network client; the --weights reader), each with why.
    Every other import goes to the top of its module: a light internal import hidden in a function hides
    the module's real dependencies (and once hid cycles, which test_layers_import_downwards_only now
    forbids at any depth). A command's handler is found by name (cli.COMMANDS, "module:function") and an
    op's performer by the registry: neither is an import statement."""
    found = [f"surgery/{rel(name)}:{line} imports {what}" for name, line, what in function_imports(TREES)]
    assert not found, "imports inside functions (move them to the module's top):\n" + "\n".join(found)


def test_the_function_import_finder_finds_them():
    """The check itself, on code it must flag and code it must let pass."""
    code = ("import json\n"
            "def f():\n    import csv\n    from surgery.recipe import load_recipe\n    import torch\n"
            "    from surgery.vllm import plugin\n    from surgery.ops.keep import hf\n"
            "    from surgery.ops.keep import spec\n"
            "class C:\n    def m(self):\n        from concurrent.futures import ThreadPoolExecutor\n"
            "        import importlib.util\n")
    found = function_imports({"surgery.x": ast.parse(code)})
    assert found == [("surgery.x", 3, "csv"), ("surgery.x", 4, "surgery.recipe"),
                     ("surgery.x", 8, "surgery.ops.keep"), ("surgery.x", 12, "importlib.util")]


def test_every_cli_command_resolves_to_its_handler():
    """cli.COMMANDS names each handler as "module:function", imported at dispatch: every subcommand of the
    parser has one, and each one exists (a typo would be found only when a user runs that command)."""
    import argparse
    import importlib

    from surgery.cli import COMMANDS, build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == set(COMMANDS)
    for command, entry in COMMANDS.items():
        module, _, function = entry.partition(":")
        assert callable(getattr(importlib.import_module(module), function)), command


def test_the_generated_diagram_shows_every_layer_in_order():
    """docs/architecture.md's picture of the layers (tools/gen_docs.py; test_docs_generated holds it to the
    table) is a flowchart in the subset the plan renderer writes, with one box per layer, highest first,
    each naming the table's keys, and an import matrix with nothing above its diagonal."""
    from test_plan_mermaid import check_flowchart

    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    chart = text.split("```mermaid\n", 1)[1].split("```", 1)[0]
    nodes, edges = check_flowchart(chart)
    order = [e["layer"] for e in sorted(TABLE["layers"], key=lambda e: -e["layer"])]
    assert nodes == {f"L{n}" for n in order}
    assert edges == [(f"L{a}", f"L{b}") for a, b in zip(order, order[1:])]
    for entry in TABLE["layers"]:
        assert ", ".join(entry["modules"]) in chart
    matrix = [line for line in text.split("\n") if line.startswith("| **")]
    assert len(matrix) == len(order)
    for i, line in enumerate(matrix):
        cells = [c.strip() for c in line.strip("|").split("|")][1:]
        assert cells[i] == "·" and not any(cells[:i]), f"an upward import in the matrix: {line}"
