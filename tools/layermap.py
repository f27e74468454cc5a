"""The layer map of the package, read from surgery/data/layers.yaml: which layer each module under
surgery/ belongs to. One reader for the two users that must agree: tests/test_architecture.py,
which enforces the map on every import, and tools/gen_docs.py, which draws it in docs/architecture.md.

A key is a path under surgery/: `name.py` one file, `folder/` every file under the folder, and a
`*` matches one path segment (`ops/*/__init__.py`). A file key beats a pattern and a pattern beats a
folder; between folders the longest wins, so `live/prepared.py` can sit below the rest of `live/`.
"""
from __future__ import annotations

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
