"""The JSON Schema of an engine card (`schemas/engine-card.schema.json`), generated from the card models
of surgery/engine/card_model.py by tools/gen_docs.py, for editors and for tests/test_engine_card.py, which
validates the shipped cards against it with jsonschema. Apart from the models because no command
needs it at run time: `surgery validate` imports the models, not their schema (cold start).
"""
from __future__ import annotations

import json
import types
from collections.abc import Mapping
from dataclasses import MISSING, fields, is_dataclass
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from .card_model import EngineCard

SCHEMA_FILE = "engine-card.schema.json"
SCHEMA_ID = f"https://spec-surgery.dev/schemas/{SCHEMA_FILE}"


def card_schema() -> dict:
    """The JSON Schema (draft 2020-12) of a card file, generated from the models above."""
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID,
              "title": "spec-surgery engine card"}
    return {**schema, **schema_of(EngineCard)}


def card_schema_text() -> str:
    """schemas/engine-card.schema.json as tools/gen_docs.py writes it."""
    return json.dumps(card_schema(), indent=2) + "\n"


def schema_of(tp: Any, meta: Mapping = types.MappingProxyType({})) -> dict:
    if is_dataclass(tp):
        return dataclass_schema(tp)
    origin, args = get_origin(tp), get_args(tp)
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (Union, types.UnionType):
        options = [schema_of(a) for a in args if a is not type(None)]
        either = options[0] if len(options) == 1 else {"anyOf": options}
        return {"anyOf": [either, {"type": "null"}]} if type(None) in args else either
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return {"type": "array", "items": schema_of(args[0])}
    if origin is tuple:
        return {"type": "array", "prefixItems": [schema_of(a) for a in args], "items": False,
                "minItems": len(args), "maxItems": len(args)}
    if origin is Mapping:
        out = {"type": "object", "additionalProperties": schema_of(args[1])}
        return {**out, "required": list(meta["required_keys"])} if meta.get("required_keys") else out
    return {"type": {str: "string", int: "integer", bool: "boolean"}[tp]}


def dataclass_schema(cls: type) -> dict:
    hints = get_type_hints(cls)
    props = {f.name: {"description": f.metadata["doc"], **without_description(schema_of(hints[f.name], f.metadata))}
             for f in fields(cls)}
    required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
    out = {"type": "object", "description": " ".join(cls.__doc__.split()), "properties": props,
           "required": required, "additionalProperties": False}
    short = getattr(cls, "SHORT_FORM", None)
    return out if short is None else {"description": out["description"],
                                      "oneOf": [schema_of(short), without_description(out)]}


def without_description(schema: dict) -> dict:
    """A nested schema under a field: the field's own description says what it is there."""
    return {k: v for k, v in schema.items() if k != "description"}
