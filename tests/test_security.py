"""A recipe is data. These tests prove that no recipe (or config) can run code, import a module,
read a file outside what the user named, or make the toolkit load pickled weights.

1. Python / custom YAML tags are refused (SRG005) and NOTHING runs: os.system, subprocess, exec and
   module imports are trapped while the hostile documents are loaded, and a sentinel file stays absent.
2. The expression language cannot reach Python: dunder names, attribute chains, calls, subscripts.
3. A static scan (ast) of every file in surgery/: no eval/exec/compile/__import__, no pickle-family
   imports, yaml only with a Safe loader, trust_remote_code never True, no torch.load, weights only
   through safetensors, dynamic imports only of constant module names.
4. Recipes have no include / extends (no path escape possible) and short recipe names only resolve
   inside the shipped recipes folder.
"""
from __future__ import annotations

import ast
import builtins
import importlib.abc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testpaths import E2B, E2B_ASSISTANT, GEMMA_RECIPE
from surgery import Runtime, SurgeryError, expr as expr_lang, load_recipe, parse_recipe, read_facts, resolve
from surgery.recipe import find_recipe
from surgery.resources import load_schema, recipes_dir

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "surgery"
BASE = GEMMA_RECIPE.read_text(encoding="utf-8")
MARKER = "srg_evil_module_xyz"  # a module name no one has


# -- traps -----------------------------------------------------------------------------------------

class _ImportSpy(importlib.abc.MetaPathFinder):
    def __init__(self):
        self.seen: list[str] = []

    def find_spec(self, fullname, path=None, target=None):
        self.seen.append(fullname)
        return None


@pytest.fixture
def trapped(monkeypatch, tmp_path):
    """Every way a YAML tag or an expression could run code is replaced by a recorder."""
    calls: list[tuple] = []
    # jsonschema (the schema check) builds classes with eval at import time (attrs), from its own
    # source: import it before the trap so that only what a recipe could hand over is recorded
    import dataclasses
    import jsonschema  # noqa: F401

    def rec(name):
        def f(*a, **k):
            calls.append((name, a))
            raise AssertionError(f"{name} called with {a!r}")
        return f

    monkeypatch.setattr(os, "system", rec("os.system"))
    monkeypatch.setattr(os, "popen", rec("os.popen"))
    monkeypatch.setattr(subprocess, "Popen", rec("subprocess.Popen"))
    monkeypatch.setattr(subprocess, "run", rec("subprocess.run"))
    real_exec, real_eval = builtins.exec, builtins.eval

    def guarded(name, real):
        def f(source, *a, **k):
            # the import system execs compiled module code objects: let those through; any text
            # (what a YAML tag or an expression would hand over) is recorded and refused
            if isinstance(source, type(f.__code__)) and os.path.isfile(source.co_filename):
                return real(source, *a, **k)
            # the standard library's dataclasses builds each class's __init__ from its own template
            # when a module is first imported (the validate path imports some lazily): not recipe text
            if sys._getframe(1).f_code.co_filename == dataclasses.__file__:
                return real(source, *a, **k)
            calls.append((name, source))
            raise AssertionError(f"{name} called with {source!r}")
        return f

    monkeypatch.setattr(builtins, "exec", guarded("exec", real_exec))
    monkeypatch.setattr(builtins, "eval", guarded("eval", real_eval))
    spy = _ImportSpy()
    sys.meta_path.insert(0, spy)
    sentinel = tmp_path / "PWNED"
    try:
        yield calls, spy, sentinel
    finally:
        sys.meta_path.remove(spy)
        builtins.exec, builtins.eval = real_exec, real_eval
    assert not calls, calls
    assert not sentinel.exists()
    assert not any(MARKER in name for name in spy.seen), spy.seen
    assert MARKER not in sys.modules


def _hostile_tags(sentinel: Path) -> list[str]:
    cmd = f"touch {sentinel}"
    py = f"open({str(sentinel)!r}, 'w').write('x')"
    return [
        f"!!python/object/apply:os.system [{cmd!r}]",
        f"!!python/object/apply:subprocess.check_call [[touch, {sentinel}]]",
        f"!!python/object/apply:builtins.exec [{py!r}]",
        f"!!python/object/apply:builtins.eval [{py!r}]",
        f"!!python/object/new:os.system [{cmd!r}]",
        f"!!python/object:{MARKER}.Evil {{a: 1}}",
        "!!python/name:os.system",
        f"!!python/name:{MARKER}.thing",
        f"!!python/module:{MARKER}",
        "!!python/module:os",
        "!!python/tuple [1, 2]",
        f"!<tag:yaml.org,2002:python/object/apply:os.system> [{cmd!r}]",
        f"!include {sentinel}",
        f"!import {MARKER}",
        f"!!{MARKER} x",
        "!custom {a: 1}",
        "!!binary aGVsbG8=",
        "!!set {a, b}",
        "!!omap [{a: 1}]",
        "!!timestamp 2001-12-14",
    ]


def _placements(tag_value: str) -> list[str]:
    """The same hostile value at the top, nested, as a key, behind an anchor, and as a merge source."""
    return [
        BASE.replace("summary: ", f"summary: {tag_value}\nx_summary: ", 1),
        BASE.replace("version: 1", f"version: {tag_value}", 1),
        BASE.replace("engine:\n", f"engine:\n  evil: {tag_value}\n", 1),
        BASE + f"\nextra: [{tag_value}]\n",
        BASE + f"\n? {tag_value}\n: 1\n",
        BASE + f"\nanchor: &a {tag_value}\nalias: *a\n",
        BASE + f"\nsrc: &m {{k: {tag_value}}}\nmerged: {{<<: *m}}\n",
        f"{tag_value}\n",
    ]


def test_python_and_custom_tags_are_refused_and_nothing_runs(trapped):
    calls, spy, sentinel = trapped
    n = 0
    for tag in _hostile_tags(sentinel):
        for text in _placements(tag):
            with pytest.raises(SurgeryError) as ei:
                parse_recipe(text, "hostile.yaml")
            codes = [d.code for d in ei.value.diagnostics]
            # SRG004: a placement YAML itself rejects; SRG102: a sequence used as a mapping key
            assert codes[0] in ("SRG005", "SRG004", "SRG102"), (tag, codes)
            n += 1
        # at the top of a document every tag is refused by the tag check itself
        with pytest.raises(SurgeryError) as ei:
            parse_recipe(BASE.replace("version: 1", f"version: {tag}", 1))
        assert ei.value.diagnostics[0].code == "SRG005", tag
        assert "not allowed" in ei.value.diagnostics[0].message
    assert n == len(_hostile_tags(sentinel)) * len(_placements("x"))


def test_hostile_recipe_files_through_the_cli_run_nothing(trapped, tmp_path, capsys):
    from surgery import cli

    calls, spy, sentinel = trapped
    for i, tag in enumerate(_hostile_tags(sentinel)):
        path = tmp_path / f"hostile{i}.yaml"
        path.write_text(BASE.replace("version: 1", f"version: {tag}", 1), encoding="utf-8")
        rc = cli.main(["validate", str(path), "--target", str(E2B), "--draft", str(E2B_ASSISTANT), "--json"])
        out = json.loads(capsys.readouterr().out)
        assert rc == 2 and out["ok"] is False
        assert out["diagnostics"][0]["code"] == "SRG005", tag


def test_strings_naming_modules_are_never_imported(trapped):
    """Module-looking strings everywhere a recipe holds a string: parse, resolve and render import none."""
    calls, spy, sentinel = trapped
    text = BASE.replace("because: the assistant's", f"because: {MARKER}.os.system the assistant's", 1)
    text = text.replace("summary: ", f"summary: {MARKER} __import__('os') ", 1)
    bad_engine = text.replace("advance_draft_positions: false}\n  hf:",
                              f"advance_draft_positions: false, loader: {MARKER}, module: 'os.system'}}\n  hf:", 1)
    with pytest.raises(SurgeryError) as ei:  # engine settings are a closed set: no loader/module hooks
        parse_recipe(bad_engine)
    assert {d.code for d in ei.value.diagnostics} == {"SRG101"}
    recipe = parse_recipe(text)
    plan = resolve(recipe, read_facts(E2B_ASSISTANT), read_facts(E2B), Runtime(engine="vllm"))
    assert MARKER in recipe.summary and plan.ok
    plan.to_json()
    plan.render() if hasattr(plan, "render") else None


# -- expressions -----------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "__import__('os').system('x')", "pp_size.__class__", "draft.__dict__", "__builtins__", "x.__init__.__globals__",
    "open('/etc/passwd')", "len([1])", "exec('1')", "eval('1')", "pp_size(1)", "(lambda: 1)()", "pp_size[0]",
    "pp_size.real()", "[1][0]", "{'a': 1}", "pp_size if true else 1", "f'{pp_size}'", "pp_size; 1", "pp_size := 1",
    "`id`", "pp_size @ 1", "1 ** 1000000", "pp_size is None", "not pp_size.__doc__",
])
def test_expressions_cannot_reach_python(text):
    with pytest.raises(expr_lang.ExprError) as ei:
        expr_lang.parse(text).evaluate(lambda name: pytest.fail(f"looked up {name}"))
    assert ei.value.code in ("SRG110", "SRG113"), (text, ei.value.code)


@pytest.mark.parametrize("cond, code", [
    ("pp_size.real == 1", "SRG111"), ("draft.hidden_size.real == 1", "SRG111"), ("os.system == 1", "SRG111"),
    ("target.raw == 1", "SRG111"), ("draft.source == 'x'", "SRG111"), ("self == 1", "SRG111"),
    ("draft.__class__ == 1", "SRG110"), ("__import__('os')", "SRG110"), ("len(pp_size) == 1", "SRG110"),
])
def test_recipe_conditions_name_only_known_facts(cond, code):
    """Names resolve only to runtime facts and draft.X / target.X model facts (plain values, looked up
    in a dict), never to attributes of Python objects."""
    text = BASE.replace("when: pp_size == 1", f"when: {json.dumps(cond)}", 1)
    with pytest.raises(SurgeryError) as ei:
        parse_recipe(text)
    assert code in [d.code for d in ei.value.diagnostics]


def test_fact_lookup_is_a_dict_lookup():
    """The resolver's name lookup reads `ModelFacts.scalars` (a dict), not getattr on objects."""
    from surgery.resolver import _Env

    facts = read_facts(E2B)
    env = _Env(facts, facts, Runtime())
    assert env("draft.hidden_size") == facts.scalars["hidden_size"]
    assert env("draft.layers") is None and env("draft.raw") is None and env("draft.__class__") is None


# -- static scan of the package --------------------------------------------------------------------

SOURCES = sorted(PKG.rglob("*.py"))
FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__", "execfile", "input"}
FORBIDDEN_MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle", "joblib"}
UNSAFE_YAML = {"unsafe_load", "unsafe_load_all", "full_load", "full_load_all", "Loader", "UnsafeLoader",
               "FullLoader", "CLoader", "CUnsafeLoader", "CFullLoader"}
# dynamic imports, each reviewed: the module names are literal constants in the same file
DYNAMIC_IMPORT_OK = {
    ("surgery/vllm/hooks.py", "_import_attr"),  # LOAD_MODEL_TARGETS / RUNNER_TARGETS literal tuples
    ("surgery/ops/registry.py", "performer"),  # surgery.ops.<registered recipe key>.<engine card name>
    ("surgery/vllm/lazy.py", "exec_module"),  # the import system's own loader, for modules Python is importing
    ("surgery/sglang/hooks.py", "_class"),  # sglang.* only: the sglang card's draft_load_points + two literals
    ("surgery/vllm/guard.py", "_scheduler_class"),  # TARGET, a literal ("vllm.v1.core.sched.scheduler", ...)
    ("surgery/__init__.py", "apply"),  # the literal "surgery.applier" (import surgery stays config-only)
    ("surgery/__init__.py", "verify"),  # the same
    ("surgery/__init__.py", "__getattr__"),  # the literal surgery.* modules of API, and "surgery.hf"
    ("surgery/commands/__init__.py", "load_entry"),  # "module:function" literals of cli.COMMANDS and apply's RUNNERS
}


def _tree(path: Path) -> ast.AST:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _functions(tree):
    """(node, enclosing function name) for every node."""
    out = []

    def walk(node, fn):
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else fn
            out.append((child, name))
            walk(child, name)

    walk(tree, None)
    return out


def test_static_scan_covers_the_package():
    assert len(SOURCES) > 15 and (PKG / "text" / "yamlload.py") in SOURCES and (PKG / "tinymodels" / "tinypair.py") in SOURCES


@pytest.mark.parametrize("path", SOURCES, ids=_rel)
def test_no_code_execution_primitives(path):
    problems = []
    for node, fn in _functions(_tree(path)):
        where = f"{_rel(path)}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if isinstance(f, ast.Name) and name in FORBIDDEN_CALLS:
                problems.append(f"{where}: call to {name}()")
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "builtins" \
                    and name in FORBIDDEN_CALLS:
                problems.append(f"{where}: call to builtins.{name}()")
            if name in ("import_module", "spec_from_file_location", "exec_module") and \
                    (_rel(path), fn) not in DYNAMIC_IMPORT_OK:
                problems.append(f"{where}: dynamic import {name}() in {fn}")
            if name in ("system", "popen") and isinstance(f, ast.Attribute) and getattr(f.value, "id", "") == "os":
                problems.append(f"{where}: os.{name}()")
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in FORBIDDEN_MODULES:
                    problems.append(f"{where}: import {alias.name}")
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in FORBIDDEN_MODULES:
            problems.append(f"{where}: from {node.module} import ...")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", SOURCES, ids=_rel)
def test_yaml_only_with_a_safe_loader(path):
    problems = []
    tree = _tree(path)
    assigned = {}  # name -> source of what it is assigned (loader = getattr(yaml, "CSafeLoader", ...))
    for node, _ in _functions(tree):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    assigned.setdefault(t.id, []).append(ast.unparse(node.value))
    for node, _ in _functions(tree):
        where = f"{_rel(path)}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "yaml" \
                and node.attr in UNSAFE_YAML:
            problems.append(f"{where}: yaml.{node.attr}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                "load", "load_all", "compose", "compose_all", "parse") and \
                getattr(node.func.value, "id", None) == "yaml":
            loader = [k.value for k in node.keywords if k.arg == "Loader"] or node.args[1:2]
            src = ast.unparse(loader[0]) if loader else ""
            if isinstance(loader[0] if loader else None, ast.Name):  # a variable: every value it is given
                values = assigned.get(src, [])
                src = " | ".join(values) if values and all("Safe" in v for v in values) else src
            if "Safe" not in src or any(u in src.replace("SafeLoader", "") for u in ("Loader", "Unsafe", "Full")):
                problems.append(f"{where}: yaml.{node.func.attr} with Loader={src or '(default)'}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", SOURCES, ids=_rel)
def test_no_remote_code_and_no_pickled_weights(path):
    tree = _tree(path)
    problems = []
    dict_kwargs: dict[str, ast.Call] = {}  # kwargs = dict(use_safetensors=True, ...)
    for node, _ in _functions(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                getattr(node.value.func, "id", None) == "dict":
            for t in node.targets:
                if isinstance(t, ast.Name):
                    dict_kwargs[t.id] = node.value
    for node, _ in _functions(tree):
        where = f"{_rel(path)}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.keyword) and node.arg == "trust_remote_code":
            if not (isinstance(node.value, ast.Constant) and node.value.value is False):
                problems.append(f"{where}: trust_remote_code={ast.unparse(node.value)}")
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and k.value == "trust_remote_code" and \
                        not (isinstance(v, ast.Constant) and v.value is False):
                    problems.append(f"{where}: 'trust_remote_code': {ast.unparse(v)}")
        if isinstance(node, ast.Attribute) and node.attr == "load" and getattr(node.value, "id", None) == "torch":
            problems.append(f"{where}: torch.load")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            # a tokenizer's from_pretrained reads no weights (and has no use_safetensors switch)
            if node.func.attr == "from_pretrained" and "Tokenizer" not in ast.unparse(node.func.value):
                kws = {k.arg: k.value for k in node.keywords if k.arg}
                for k in node.keywords:
                    if k.arg is None and isinstance(k.value, ast.Name) and k.value.id in dict_kwargs:
                        kws.update({kk.arg: kk.value for kk in dict_kwargs[k.value.id].keywords})
                v = kws.get("use_safetensors")
                if not (isinstance(v, ast.Constant) and v.value is True):
                    problems.append(f"{where}: from_pretrained without use_safetensors=True")
            if node.func.attr == "save_pretrained":
                v = {k.arg: k.value for k in node.keywords}.get("safe_serialization")
                if not (v is None or (isinstance(v, ast.Constant) and v.value is True)):
                    problems.append(f"{where}: save_pretrained(safe_serialization={ast.unparse(v)})")
            if node.func.attr in ("load_state_dict",) and any(
                    isinstance(a, ast.Call) and getattr(a.func, "attr", "") == "load" for a in node.args):
                problems.append(f"{where}: load_state_dict(x.load(...))")
    assert not problems, "\n".join(problems)


TARGET_CONSTANTS = ("LOAD_MODEL_TARGETS", "RUNNER_TARGETS", "WORKER_TARGETS", "DUMMY_LOADER_TARGETS")


def test_dynamic_import_module_names_are_literals():
    """The reviewed dynamic imports import only names written in the source as literal tuples."""
    hooks = _tree(PKG / "vllm" / "hooks.py")
    consts = {}
    for node in hooks.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (node.targets[0] if isinstance(node, ast.Assign)
                                                                     else None)
        if isinstance(target, ast.Name) and target.id in TARGET_CONSTANTS:
            consts[target.id] = ast.literal_eval(node.value)
    assert set(consts) == set(TARGET_CONSTANTS)
    for value in consts.values():
        assert all(isinstance(m, str) and m.startswith("vllm.") and isinstance(c, str) for m, c in value)
    calls = [n for n, _ in _functions(hooks) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "_import_attr"]
    assert calls and all(isinstance(c.args[0], ast.Name) and c.args[0].id == "module" for c in calls)
    for node, fn in _functions(hooks):  # every `for module, name in X` loop iterates one of the constants
        if isinstance(node, ast.For) and "module" in ast.unparse(node.target):
            assert ast.unparse(node.iter) in ("targets", *TARGET_CONSTANTS), ast.unparse(node)
    (filtered,) = [n for n in hooks.body if isinstance(n, ast.FunctionDef) and n.name == "worker_targets"]
    assert "for t in WORKER_TARGETS" in ast.unparse(filtered)  # a subset of the literal constant, nothing else
    for node, fn in _functions(hooks):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("_wrap", "_unwrap"):
            # worker_targets(): this platform's subset of WORKER_TARGETS (hooks.worker_targets, checked below)
            assert ast.unparse(node.args[0]) in (*TARGET_CONSTANTS, "worker_targets()"), ast.unparse(node)
    guard = _tree(PKG / "vllm" / "guard.py")  # the scheduler it wraps: a literal vllm.* module name
    (target,) = [n for n in guard.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "TARGET"]
    assert ast.literal_eval(target.value)[0].startswith("vllm.")
    init = _tree(PKG / "__init__.py")  # the lazy public API: a literal table of surgery.* modules
    (api,) = [n for n in init.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "API"]
    assert all(m.startswith("surgery.") for m in ast.literal_eval(api.value).values())
    (getter,) = [n for n in init.body if isinstance(n, ast.FunctionDef) and n.name == "__getattr__"]
    calls = [ast.unparse(c.args[0]) for c in ast.walk(getter) if isinstance(c, ast.Call)
             and getattr(c.func, "attr", "") == "import_module"]
    assert sorted(calls) == ["'surgery.hf'", "API[name]"], calls
    registry = _tree(PKG / "ops" / "registry.py")
    (call,) = [n for n, fn in _functions(registry) if isinstance(n, ast.Call)
               and getattr(n.func, "attr", "") == "import_module"]
    assert ast.unparse(call.args[0]) == "performer_module(unit, engine)"
    from surgery.sglang.hooks import LOADER_POINT, RUNNER_POINT, draft_load_points

    assert all(m.startswith("sglang.srt.") for m, _, _ in draft_load_points() + [RUNNER_POINT, LOADER_POINT])
    sgl_hooks = _tree(PKG / "sglang" / "hooks.py")
    (guard,) = [n for n, fn in _functions(sgl_hooks) if fn == "_class" and isinstance(n, ast.If)]
    assert ast.unparse(guard.test) == "not module.startswith('sglang.')"  # anything else is never imported
    pair = _tree(PKG / "tinymodels" / "tinypair.py")  # the package runs no file of the checkout (tools/ included)
    assert not [n for n, _ in _functions(pair) if isinstance(n, ast.Call)
                and getattr(n.func, "attr", "") in ("spec_from_file_location", "exec_module")]


# -- no includes, no path escape ---------------------------------------------------------------------

INCLUDE_WORDS = {"include", "includes", "extends", "import", "imports", "inherit", "inherits", "base", "bases",
                 "$include", "$ref", "file", "files", "path", "paths", "load", "source_file", "template", "url"}


def _schema_property_names(node, out: set):
    if isinstance(node, dict):
        for k, v in node.get("properties", {}).items():
            out.add(k)
        for v in node.values():
            _schema_property_names(v, out)
    elif isinstance(node, list):
        for v in node:
            _schema_property_names(v, out)
    return out


def test_recipe_schema_has_no_include_or_extends():
    schema = load_schema("recipe.schema.json")
    names = _schema_property_names(schema, set())
    assert names and not names & INCLUDE_WORDS, names & INCLUDE_WORDS
    assert schema.get("additionalProperties") is False  # so an `include:` key is an error, not ignored
    refs = [r for r in json.dumps(schema).split('"$ref": ')[1:]]
    assert all(r.startswith('"#/') for r in refs)  # schema refs are local only


@pytest.mark.parametrize("key", ["include", "extends", "import", "$ref", "<<"])
def test_include_keys_are_refused_and_not_followed(key, tmp_path, monkeypatch):
    secret = tmp_path / "secret.yaml"
    secret.write_text("recipe: leaked\n", encoding="utf-8")
    opened = []
    real_open = builtins.open

    def spy_open(file, *a, **k):
        opened.append(str(file))
        return real_open(file, *a, **k)

    monkeypatch.setattr(builtins, "open", spy_open)
    value = json.dumps(str(secret)) if key != "<<" else "{extends: " + json.dumps(str(secret)) + "}"
    with pytest.raises(SurgeryError) as ei:
        parse_recipe(BASE + f"\n{json.dumps(key) if key != '<<' else key}: {value}\n")
    assert ei.value.diagnostics[0].code == "SRG101"
    assert str(secret) not in opened and not any("secret" in o for o in opened)
    assert "leaked" not in str(ei.value)


ESCAPES = ["../../etc/passwd", "../recipes/gemma4-mtp", "..", "...", "a/../../b", "..\\..\\etc\\passwd",
           "gemma4-mtp/../../../etc/passwd", "/etc/passwd", "~/.ssh/id_rsa", "..gemma4-mtp", "gemma4..mtp",
           "%2e%2e/etc", "a\x00b", "", " ", "\\\\server\\share", "C:\\Windows\\win.ini", "gemma4-mtp\x00.txt"]


@pytest.mark.parametrize("name", ESCAPES)
def test_names_with_separators_or_dotdot_are_not_looked_up_in_the_recipes_dir(name, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    try:
        found = find_recipe(name)
    except SurgeryError as exc:
        assert exc.diagnostics[0].code == "SRG013"
        return
    shipped = recipes_dir().resolve()
    # the answer is the user's own path, exactly as given, never a file composed inside recipes/
    assert found == Path(name)
    assert not str(found).startswith(str(shipped))
    with pytest.raises(SurgeryError) as ei:  # nothing there (cwd is empty) or not a recipe: coded
        load_recipe(name)
    assert ei.value.diagnostics[0].code in ("SRG001", "SRG002", "SRG102", "SRG103", "SRG004", "SRG781")


def test_short_names_resolve_inside_the_recipes_dir_only():
    shipped = recipes_dir().resolve()
    for p in sorted(shipped.glob("*.yaml")):
        found = find_recipe(p.stem).resolve()
        assert found.parent == shipped and found.name == p.name
    with pytest.raises(SurgeryError) as ei:
        find_recipe("passwd")
    assert ei.value.diagnostics[0].code == "SRG013"


def test_user_path_is_read_as_given_and_refused_if_not_a_recipe():
    """An explicit path is the user's choice (like any CLI argument); it is read as text, never executed,
    and a non-recipe file is refused with a coded error."""
    with pytest.raises(SurgeryError) as ei:
        load_recipe("/etc/passwd")
    assert ei.value.diagnostics[0].code in ("SRG102", "SRG004", "SRG103")
