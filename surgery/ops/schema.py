"""The recipe schema's op part (`schemas/recipe.schema.json` `$defs.op`), generated from the op kinds'
step classes (`surgery/ops/<kind>/__init__.py`), as mergekit and PEFT keep an option's shape in one
class: the field's type gives the JSON type (a `Literal` its `enum`, a tuple an array, a nested `Args`
class an object), its `arg(...)` metadata the description, examples and the constraints a type cannot
say. The committed schema stays the file users and editors read; `tools/gen_docs.py` writes it from
here and tests/ops/test_step_schema.py fails when the two differ or a field has no description.
"""
from __future__ import annotations

import json
from dataclasses import MISSING, Field
from typing import Any, Literal, get_args, get_origin

from .base import Args, Step, item_class, key_of, typed_fields, without_none
from .registry import UNITS

OP_HELP = "One operation: a mapping with exactly one key, the operation's name."
OP_EXAMPLES = [{"keep": {"role": "lm_head"}}]
_JSON_TYPES = {str: "string", bool: "boolean", int: "integer", float: "number"}
_COMMON = {f.name for f, _ in typed_fields(Step)}


def op_schema() -> dict:
    """`$defs.op`: a mapping with exactly one key, an op kind (registry order), whose value is that kind's step."""
    return {"description": OP_HELP, "examples": OP_EXAMPLES, "type": "object", "minProperties": 1,
            "maxProperties": 1, "additionalProperties": False,
            "properties": {kind: args_schema(unit.step_class) for kind, unit in UNITS.items()}}


def args_schema(cls: type[Args]) -> dict:
    """One mapping: its own fields first, then the ones every step has (when, otherwise, because, code)."""
    listed = typed_fields(cls)
    ordered = [p for p in listed if p[0].name not in _COMMON] + [p for p in listed if p[0].name in _COMMON]
    return {"description": cls.HELP, "examples": cls.EXAMPLES, "type": "object", "additionalProperties": False,
            "required": [key_of(f) for f, _ in ordered if _required(f)],
            "properties": {key_of(f): field_schema(f, hint) for f, hint in ordered}}


def _required(f: Field) -> bool:
    return f.default is MISSING and f.default_factory is MISSING


def field_schema(f: Field, hint: Any) -> dict:
    meta = f.metadata
    out: dict[str, Any] = {"$ref": meta["ref"]} if meta.get("ref") else {}
    out.update(description=meta.get("help"), examples=meta.get("examples"))
    if not meta.get("ref"):
        out.update(type_schema(hint))
    out.update(meta.get("json") or {})
    if "items" in out:  # an array's items: their type, then the field's constraints on each
        out["items"] = out.pop("items") | (meta.get("items") or {})
    return out


def type_schema(hint: Any) -> dict:
    """The JSON type of a field's Python type (its `None` dropped: a field left out is no `null`)."""
    hint = without_none(hint)
    if get_origin(hint) is Literal:
        values = list(get_args(hint))
        return {"type": _JSON_TYPES[type(values[0])], "enum": values}
    if get_origin(hint) is tuple:
        nested = item_class(hint)
        return {"type": "array", "items": args_schema(nested) if nested else type_schema(get_args(hint)[0])}
    if hint in _JSON_TYPES:
        return {"type": _JSON_TYPES[hint]}
    raise TypeError(f"no JSON type for a step field of type {hint!r}")


def field_problems(cls: type[Args]) -> list[str]:
    """Fields of a step class (and of the mappings it nests) that the schema could not describe: no
    description, no examples. Empty for every registered kind (tests/ops/test_step_schema.py)."""
    out = []
    for f, hint in typed_fields(cls):
        for what in ("help", "examples"):
            if not f.metadata.get(what):
                out.append(f"{cls.__name__}.{f.name}: no {what} (give it with surgery.ops.base.arg)")
        nested = item_class(hint)
        if nested:
            out += field_problems(nested)
    if not cls.HELP or not cls.EXAMPLES:
        out.append(f"{cls.__name__}: no HELP / EXAMPLES (the mapping's own description)")
    return out


def with_generated_ops(schema: dict) -> dict:
    """The recipe schema with its op part generated (`$defs.op`); every other part as written."""
    return {**schema, "$defs": {**schema["$defs"], "op": op_schema()}}


def schema_text(schema: dict) -> str:
    """The schema file's bytes as committed (2-space JSON; its sha256 keys surgery/prechecked.py's record)."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"
