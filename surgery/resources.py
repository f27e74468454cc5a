"""Packaged files: YAML data (`load_data`), and where the schemas and shipped recipes are: top-level folders in the repo, `surgery/schemas`
and `surgery/recipes` inside an installed wheel (pyproject maps them with package-dir)."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

_PKG = Path(__file__).resolve().parent


def _first_existing(*candidates: Path) -> Path:
    for c in candidates:
        if c.is_dir():
            return c
    return candidates[0]


def data_dir() -> Path:
    """The packaged data folder (`surgery/data`): codes, config defaults, engine cards, pairs."""
    return _PKG / "data"


def schemas_dir() -> Path:
    return _first_existing(_PKG / "schemas", _PKG.parent / "schemas")


def recipes_dir() -> Path:
    return _first_existing(_PKG / "recipes", _PKG.parent / "recipes")


@lru_cache(maxsize=32)
def load_data(relpath: str):
    """A packaged YAML data file by its path under the `surgery` package (`data/codes.yaml`,
    `data/engines/vllm.yaml`): the one loader for data files, parsed once per process. Callers
    must not mutate what it returns (it is shared)."""
    import yaml

    with open(_PKG / relpath, encoding="utf-8") as fh:
        return yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@lru_cache(maxsize=4)
def load_schema(name: str) -> dict:
    with open(schemas_dir() / name, encoding="utf-8") as fh:
        return json.load(fh)


def shipped_recipes() -> list[Path]:
    return sorted(recipes_dir().glob("*.yaml"))
