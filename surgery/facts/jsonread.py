"""Bounded reading of a HF `config.json`: a size cap, strict JSON (no NaN / Infinity, no duplicate
keys), a depth cap, and the corpus's annotation keys dropped; coded errors for bad input."""
from __future__ import annotations

import json
from typing import Any

from ..text.diagnostics import Location, fail
from ..text.localfile import decode_text, read_text_file
from .modelref import open_model

MAX_CONFIG_BYTES = 8 << 20
MAX_CONFIG_DEPTH = 100  # HF configs nest a handful of levels (quantization_config.config_groups...)


def _reject_constant(name: str):
    raise ValueError(f"non-finite number {name} is not valid JSON")


def _no_duplicates(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def read_config(ref) -> tuple[dict, str]:
    """Read a config.json into a dict; coded errors for bad input. `ref`: a model folder, a config
    file, a hub id `org/name[@revision]` or a `ModelSource` (surgery.facts.modelref)."""
    cfg, source, _ = read_config_from(ref)
    return cfg, source


def read_config_from(ref):
    """(config dict, its location, the ModelSource it came from)."""
    src = open_model(ref)
    if src.is_local:
        p = src.local_path(src.config_name)
        text = read_text_file(p, MAX_CONFIG_BYTES, "config", shown=src.ref)
        return parse_config_text(text, str(p)), str(p), src
    where = src.location(src.config_name)
    text = decode_text(src.read_bytes(src.config_name, MAX_CONFIG_BYTES, "config"), "config", where)
    return parse_config_text(text, where), where, src


def parse_config_text(text: str, source: str = "<config>") -> dict:
    if not text.strip():
        raise fail("SRG003", "the config file is empty", Location(source))
    try:
        obj = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as exc:
        raise fail("SRG009", exc.msg, Location(source, exc.lineno, exc.colno)) from None
    except (ValueError, RecursionError) as exc:
        raise fail("SRG009", str(exc) if isinstance(exc, ValueError) else "nesting too deep", Location(source)) from None
    if not isinstance(obj, dict):
        raise fail("SRG010", f"expected a JSON object, got {type(obj).__name__}", Location(source))
    return obj


def check_depth(obj: Any, source: str) -> None:
    """Refuse absurdly nested configs up front, iteratively: the recursive helpers that walk a
    config (strip_annotations, and repr, ==) would otherwise hit Python's recursion limit on a
    config nested a few hundred levels deep."""
    stack = [(obj, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_CONFIG_DEPTH:
            raise fail("SRG009", f"nesting deeper than {MAX_CONFIG_DEPTH} levels", Location(source))
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)


# `_` keys that are not annotations: a producer's mark on its export (formats.yaml `producer_markers`:
# TorchSpec's convert_to_hf.py writes `_torchspec_version`), which says whose aux-id convention the file is in
KEPT = ("_name_or_path", "_torchspec_version")


def strip_annotations(obj: Any) -> Any:
    """Drop `_source`, `_notes`... annotation keys (the shared config corpus carries them)."""
    if isinstance(obj, dict):
        return {k: strip_annotations(v) for k, v in obj.items()
                if not (k.startswith("_") and k not in KEPT)}
    return obj
