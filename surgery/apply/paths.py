"""Module paths on live models, from the engine data file (surgery/data/engines.yaml)."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from ..diagnostics import diag, SurgeryError


@lru_cache(maxsize=1)
def engine_table() -> dict:
    import yaml

    with open(Path(__file__).resolve().parent.parent / "data" / "engines.yaml", encoding="utf-8") as fh:
        return yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def get_path(root: Any, dotted: str) -> Any:
    obj = root
    for part in dotted.split("."):
        obj = obj[int(part)] if part.isdigit() else getattr(obj, part)
    return obj


def has_path(root: Any, dotted: str) -> bool:
    try:
        get_path(root, dotted)
        return True
    except (AttributeError, IndexError, KeyError, TypeError):
        return False


def first_path(root: Any, candidates: list[str], what: str, side: str) -> str:
    for c in candidates:
        if has_path(root, c) and get_path(root, c) is not None:
            return c
    raise SurgeryError(diag("SRG401", f"{side} model {type(root).__name__} has no {what} (tried {', '.join(candidates)})"))


def split_parent(root: Any, dotted: str) -> tuple[Any, str]:
    parent, _, name = dotted.rpartition(".")
    return (get_path(root, parent) if parent else root), name


def role_path(engine: str, root: Any, role: str, side: str) -> str:
    roles = engine_table()[engine]["roles"]
    if role not in roles:
        raise SurgeryError(diag("SRG121", f"role {role!r} has no module paths for engine {engine}"))
    return first_path(root, roles[role], f"module for role {role}", side)


def layers_path(engine: str, root: Any, side: str) -> str:
    return first_path(root, engine_table()[engine]["layers"], "decoder layer list", side)


def attention_path(engine: str, root: Any, index: int, side: str) -> str:
    base = layers_path(engine, root, side)
    return f"{base}.{index}.{engine_table()[engine]['attention']}"
