"""Module paths on live models, from the engine cards (surgery/data/engines/<engine>.yaml)."""
from __future__ import annotations

from typing import Any

from ..text.diagnostics import SurgeryError, diag
from ..engine.cards import card


def get_path(root: Any, dotted: str) -> Any:
    """`a.b.3.c`: attributes, and indices for digit parts: a list / ModuleList by position, a
    ModuleDict by its string key (vLLM keeps MTP layers in `ModuleDict({"61": ...})`)."""
    obj = root
    for part in dotted.split("."):
        if not part.isdigit():
            obj = getattr(obj, part)
            continue
        try:
            obj = obj[int(part)]
        except (KeyError, TypeError):
            obj = obj[part]
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


def role_paths(engine: str, role: str, side: str, layer: int | None = None) -> list[str] | None:
    """Candidate module paths for a role on one side, `{i}` filled with the op's layer (per-layer
    roles such as an MTP layer's shared_head); None when the engine has no module for the role."""
    entry = card(engine).roles.get(role)
    if entry is None:
        return None
    if entry.one_module_for_every_layer:
        # declared in the card: the engine keeps this per-layer role (numbered as vLLM numbers it) in
        # ONE module whatever the layer (SGLang's NextN draft holds its single MTP layer's shared head
        # as `lm_head`); the layer is then not silently ignored but said to mean nothing here
        return list(entry.side(side))
    candidates = list(entry.side(side))
    per_layer = entry.per_layer()
    if any("{i}" in c for c in candidates):
        if layer is None:
            raise SurgeryError(diag("SRG121", f"role {role!r} is per layer on {engine} ({candidates[0]}) but the "
                                    "operation names no layer", hint="give the step `layers: <layer set>`"))
        candidates = [c.replace("{i}", str(int(layer))) for c in candidates]
    elif layer is not None and not per_layer:
        # a layer no side's paths can use would be ignored silently: the op would act on one module
        raise SurgeryError(diag("SRG121", f"role {role!r} is not per layer on {engine} ({candidates[0]}) but the "
                                f"operation names layer {layer}", hint="drop `layers:` from the step"))
    return list(candidates)


def role_path(engine: str, root: Any, role: str, side: str, layer: int | None = None) -> str:
    candidates = role_paths(engine, role, side, layer)
    if candidates is None:
        raise SurgeryError(diag("SRG121", f"role {role!r} has no module paths for engine {engine}"))
    return first_path(root, candidates, f"module for role {role}" + (f" (layer {layer})" if layer is not None else ""),
                      side)


def layers_path(engine: str, root: Any, side: str) -> str:
    return first_path(root, list(card(engine).layers), "decoder layer list", side)


def attention_path(engine: str, root: Any, index: int, side: str) -> str:
    base = layers_path(engine, root, side)
    return f"{base}.{index}.{card(engine).attention}"
