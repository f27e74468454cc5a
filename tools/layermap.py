"""The layer map of the package, read from surgery/data/layers.yaml: which layer each module under
surgery/ belongs to, and the imports between modules, read from their source (any depth, inside
functions too). One reader for the two users that must agree: tests/test_architecture.py, which
enforces the map on every import, and tools/gen_docs.py, which draws it in docs/architecture.md.

A key is a path under surgery/: `name.py` one file, `folder/` every file under the folder, and a
`*` matches one path segment (`ops/*/__init__.py`). A file key beats a pattern and a pattern beats a
folder; between folders the longest wins, so `live/prepared.py` can sit below the rest of `live/`.
"""
from __future__ import annotations

import ast
from fnmatch import fnmatchcase
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "surgery"
TABLE = PKG / "data" / "layers.yaml"


def load() -> dict:
    return yaml.safe_load(TABLE.read_text(encoding="utf-8"))


def package_files() -> list[str]:
    """Every module of the package, as its path under surgery/ ("ops/keep/hf.py")."""
    return sorted(p.relative_to(PKG).as_posix() for p in PKG.rglob("*.py"))


def matches(key: str, rel: str) -> bool:
    if key.endswith("/"):
        return rel.startswith(key)
    if "*" in key:
        k, r = key.split("/"), rel.split("/")
        return len(k) == len(r) and all(fnmatchcase(b, a) for a, b in zip(k, r))
    return key == rel


def _specificity(key: str) -> tuple[int, int]:
    return (0 if key.endswith("/") else 1 if "*" in key else 2, len(key))


def place(rel: str, table: dict) -> dict | None:
    """The layer entry (`layer`, `name`, `says`, `modules`) whose most specific key matches `rel`."""
    best = None
    for entry in table["layers"]:
        for key in entry["modules"]:
            if matches(key, rel) and (best is None or _specificity(key) > best[0]):
                best = (_specificity(key), entry)
    return best[1] if best else None


def placement(table: dict | None = None) -> dict[str, dict]:
    """Module path -> its layer entry, for the modules the table places."""
    table = table or load()
    out = {}
    for rel in package_files():
        entry = place(rel, table)
        if entry is not None:
            out[rel] = entry
    return out


def any_match(keys: list[str], rel: str) -> bool:
    return any(matches(k, rel) for k in keys)


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for the package and for tools/ (whose scripts import each other
    by bare name, with tools/ on sys.path)."""
    out = {}
    for path in PKG.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    for path in (ROOT / "tools").glob("*.py"):
        out[path.stem] = path
    return out


MODULES = modules()
TREES = {name: ast.parse(path.read_text(encoding="utf-8"), str(path)) for name, path in MODULES.items()}


def is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def resolve_from(name: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = name.split(".") if is_package(name) else name.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def known_module(dotted: str) -> str | None:
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
                target = known_module(alias.name)
                if target:
                    out.append((target, [], node))
        elif isinstance(node, ast.ImportFrom):
            base = resolve_from(name, node)
            for alias in node.names:
                sub = f"{base}.{alias.name}" if base else alias.name
                if sub in MODULES:
                    out.append((sub, [], node))
                elif known_module(base):
                    out.append((known_module(base), [alias.name], node))
    return out


def rel(name: str) -> str:
    """A package module's path under surgery/, as the layer table spells it."""
    return MODULES[name].relative_to(PKG).as_posix()


def package_imports() -> list[tuple[str, str, int]]:
    """(importer, imported, line) for every import between two package modules, at any depth."""
    out = []
    for name in MODULES:
        if not name.startswith("surgery"):
            continue
        for target, _, node in imports_of(name):
            if target != name and target.startswith("surgery"):
                out.append((rel(name), rel(target), node.lineno))
    return out


def layer_edges(table: dict | None = None) -> dict[tuple[int, int], int]:
    """(importer's layer, imported module's layer) -> how many imports, for the generated diagram."""
    table = table or load()
    placed = placement(table)
    out: dict[tuple[int, int], int] = {}
    for a, b, _ in package_imports():
        if a in placed and b in placed and placed[a] is not placed[b]:
            key = (placed[a]["layer"], placed[b]["layer"])
            out[key] = out.get(key, 0) + 1
    return out
