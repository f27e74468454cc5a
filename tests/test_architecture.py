"""The house rules of the package, read off its source with `ast` (docs/architecture.md):

- no import cycle inside `surgery/` or `tools/`, imports inside functions included;
- no underscore name imported or read across modules (each private name is its module's own);
- the layers import only downwards: the kernel (`surgery/live/`) knows no op and no engine
  integration; an op package knows no performer, no registry and no applier; a performer knows
  no applier; the registry imports op packages, never a performer or an engine.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "surgery"
TOOLS = ROOT / "tools"


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for the package and for tools/ (whose scripts import each other
    by bare name, with tools/ on sys.path)."""
    out = {}
    for path in PKG.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    for path in TOOLS.glob("*.py"):
        out[path.stem] = path
    return out


MODULES = _modules()
TREES = {name: ast.parse(path.read_text(encoding="utf-8"), str(path)) for name, path in MODULES.items()}


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _resolve_from(name: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = name.split(".") if _is_package(name) else name.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _known(dotted: str) -> str | None:
    while dotted and dotted not in MODULES:
        dotted = dotted.rpartition(".")[0]
    return dotted or None


def imports_of(name: str) -> list[tuple[str, list[str], ast.AST]]:
    """(module imported, names taken from it, node) for every import statement in the module,
    at any depth. `from pkg import sub` where `sub` is a module is an import of `pkg.sub`."""
    out = []
    for node in ast.walk(TREES[name]):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _known(alias.name)
                if target:
                    out.append((target, [], node))
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_from(name, node)
            for alias in node.names:
                sub = f"{base}.{alias.name}" if base else alias.name
                if sub in MODULES:
                    out.append((sub, [], node))
                elif _known(base):
                    out.append((_known(base), [alias.name], node))
    return out


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
                    if _known(alias.name) and alias.asname:
                        module_aliases[alias.asname] = _known(alias.name)
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


LAYER_RULES = [
    ("surgery.hf", ("surgery.sglang",), "engines do not import each other"),
    ("surgery.vllm", ("surgery.sglang",), "engines do not import each other"),
    ("surgery.sglang", ("surgery.hf", "surgery.vllm", "surgery.cli"), "engines do not import each other"),
    # (importer prefix, forbidden import prefixes, why)
    ("surgery.live", ("surgery.ops", "surgery.applier", "surgery.vllm", "surgery.hf", "surgery.sglang", "surgery.cli",
                      "surgery.checks"),
     "the kernel knows no op and no engine integration"),
    ("surgery.ops.registry", ("surgery.hf", "surgery.vllm", "surgery.sglang", "surgery.applier"),
     "the registry never imports an engine"),
    ("surgery.applier", ("surgery.hf", "surgery.vllm", "surgery.sglang", "surgery.cli"), "the applier is engine-neutral"),
    ("surgery.recipe", ("surgery.live", "surgery.applier", "surgery.hf", "surgery.vllm", "surgery.sglang"),
     "config-only layer"),
    ("surgery.resolver", ("surgery.live", "surgery.applier", "surgery.hf", "surgery.vllm", "surgery.sglang"),
     "config-only layer"),
    ("surgery.plan", ("surgery.live", "surgery.applier", "surgery.hf", "surgery.vllm", "surgery.sglang"),
     "config-only layer"),
    ("surgery.mermaid", ("surgery.live", "surgery.applier", "surgery.hf", "surgery.vllm", "surgery.sglang"),
     "config-only layer"),
    ("surgery.facts", ("surgery.live", "surgery.applier", "surgery.hf", "surgery.vllm", "surgery.sglang"),
     "config-only layer"),
    ("surgery.render", ("surgery.live", "surgery.applier", "surgery.hf", "surgery.vllm", "surgery.sglang"),
     "config-only layer"),
    ("surgery.extras", ("surgery.live", "surgery.applier", "surgery.hf", "surgery.vllm", "surgery.sglang"),
     "config-only layer"),
    ("surgery.guard", ("surgery.live", "surgery.applier", "surgery.hf", "surgery.vllm", "surgery.sglang"),
     "the acceptance guard's decisions are pure: every engine feeds them its counters"),
]


def engine_names() -> tuple[str, ...]:
    from surgery.engines import ENGINES

    return ENGINES


def _op_package_rules():
    """Each op package (`surgery/ops/<kind>/__init__.py`) imports no performer, no registry, no
    applier; each performer (`<kind>/<engine>.py`) no applier and no registry."""
    rules = []
    for name in MODULES:
        parts = name.split(".")
        if len(parts) == 3 and parts[:2] == ["surgery", "ops"] and _is_package(name):
            performers = tuple(m for m in MODULES if m.startswith(name + ".") and m.rsplit(".", 1)[1] in engine_names())
            rules.append((name, performers + ("surgery.ops.registry", "surgery.applier"),
                          "an op's spec knows no performer"))
        if len(parts) == 4 and parts[:2] == ["surgery", "ops"]:
            rules.append((name, ("surgery.ops.registry", "surgery.applier"), "a performer knows no applier"))
    return rules


def layer_violations() -> list[str]:
    problems = []
    graph = import_graph()
    for importer, forbidden, why in LAYER_RULES + _op_package_rules():
        for name, targets in graph.items():
            if name != importer and not name.startswith(importer + "."):
                continue
            if importer.count(".") == 3 and name != importer:  # a performer rule names one module
                continue
            for t in targets:
                if any(t == f or t.startswith(f + ".") for f in forbidden):
                    problems.append(f"{name} imports {t}: {why}")
    return problems


def test_layers_import_downwards_only():
    problems = layer_violations()
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("kind", sorted(m.split(".")[2] for m in MODULES if m.count(".") == 2
                                        and m.startswith("surgery.ops.") and _is_package(m)))
def test_each_op_kind_is_one_folder_with_its_performers(kind):
    """Spec, expansion, checks and rendering in the package; a performer per engine that performs it."""
    from surgery.engines import ENGINES
    from surgery.ops.registry import BY_RECIPE_KEY

    unit = BY_RECIPE_KEY[kind]
    folder = PKG / "ops" / kind
    for engine in ENGINES:
        assert (folder / f"{engine}.py").exists() == (unit.refusal(engine) is None), (kind, engine)


def test_only_the_sglang_layer_imports_sglang_and_only_lazily():
    """CI has no SGLang: in the package, `sglang` is imported nowhere but in surgery/sglang/, and
    there only inside functions (so `import surgery.sglang.<module>` works without it). tools/ is
    not the package: tools/sglang_imported_oracle.py runs inside the SGLang venv only."""
    problems = []
    for name, tree in TREES.items():
        if not name.startswith("surgery"):
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


#: the one module that may read argparse's namespace: it builds the option dataclasses (surgery/options.py)
ARGS_READER = "surgery.cli"


def args_reads(trees: dict[str, ast.AST]) -> list[str]:
    """`args.X` and `getattr(args, ...)` in any module but the CLI: library code takes surgery/options.py's
    dataclasses (or plain parameters), never argparse's namespace (issue 43). A hook's `*args` indexed
    (`args[0]`) is not a namespace and is not counted."""
    found = []
    for name, tree in trees.items():
        if not name.startswith("surgery") or name == ARGS_READER:
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
    """`isinstance(x, LocalSource)` outside surgery/modelsource.py: ask the source (`is_local`,
    `local_folder`, `local_path(name)`) instead, so a new kind of source answers for itself."""
    found = []
    for name, tree in trees.items():
        if not name.startswith("surgery") or name == "surgery.modelsource":
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
    assert local_source_isinstance({"surgery.modelsource": ast.parse(code)}) == []
