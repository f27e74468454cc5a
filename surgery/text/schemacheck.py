"""Schema checks with `jsonschema` (Draft 2020-12), turned into coded, located diagnostics.

The schema file stays the single truth; this module only maps each `jsonschema` error to our
code (SRG101 unknown key, SRG102 wrong type, SRG103 missing key, SRG104 value not allowed,
SRG105 out of bounds, SRG106 length / size / pattern, SRG107 ambiguous alternative, or the
`x-srg-code` annotation of the schema node it happened in) and its instance path, which the
caller maps to file:line:col. `jsonschema` is imported on first use only (`surgery validate`
pays ~0.1 s for it; bench/cold_start.py holds the budget).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

_BY_KEYWORD = {"type": "SRG102", "required": "SRG103", "enum": "SRG104", "const": "SRG104",
               "minimum": "SRG105", "maximum": "SRG105", "exclusiveMinimum": "SRG105", "exclusiveMaximum": "SRG105",
               "minLength": "SRG106", "maxLength": "SRG106", "pattern": "SRG106", "minItems": "SRG106",
               "maxItems": "SRG106", "uniqueItems": "SRG106", "minProperties": "SRG106", "maxProperties": "SRG106",
               "additionalProperties": "SRG101", "propertyNames": "SRG101", "oneOf": "SRG107", "anyOf": "SRG107"}
# the keywords our schemas use, each with its code above (tests/test_schema_oracle.py keeps the
# schema within this list, so no error falls back to a generic code)
SUPPORTED = set(_BY_KEYWORD) | {"properties", "items", "$ref", "title", "description", "examples", "default",
                                "$comment", "$schema", "$id", "$defs", "markdownDescription", "deprecated",
                                "x-srg-code"}


# "did you mean" for the first unknown keys of one mapping only: difflib costs ~0.1 ms a key, and a
# flat mapping of thousands of unknown keys (the fuzzer's; never a real typo) spent most of its
# time there, near the 1 s bound (issue 34). Every unknown key is still reported, with the allowed keys.
MAX_SUGGESTIONS = 20


@dataclass(frozen=True)
class SchemaError:
    code: str  # SRG1xx
    path: tuple
    message: str
    hint: str | None = None


@lru_cache(maxsize=8)
def _validator(schema_json: str):
    import jsonschema

    schema = json.loads(schema_json)
    return jsonschema.Draft202012Validator(schema)


class Validator:
    def __init__(self, schema: dict):
        self.root = schema
        self._key = json.dumps(schema, sort_keys=True)

    def errors(self, instance: Any) -> list[SchemaError]:
        out: list[SchemaError] = []
        for e in sorted(_validator(self._key).iter_errors(instance), key=lambda e: list(map(str, e.absolute_path))):
            out.extend(self._convert(e))
        return out

    # -- one jsonschema error -> our errors ----------------------------------------------------------
    def _annotated_code(self, e) -> str | None:
        """The outermost `x-srg-code` on the way from the root schema to the failing keyword
        (jsonschema's schema path names `$ref` where it followed a reference)."""
        node: Any = self.root
        for part in list(e.absolute_schema_path)[:-1]:
            if isinstance(node, dict) and "x-srg-code" in node:
                return node["x-srg-code"]
            try:
                if part == "$ref":
                    node = self._resolve(node["$ref"])
                    continue
                if isinstance(node, dict) and part not in node and "$ref" in node:
                    node = self._resolve(node["$ref"])  # newer jsonschema leaves `$ref` out of the path
                    if isinstance(node, dict) and "x-srg-code" in node:
                        return node["x-srg-code"]
                node = node[part]
            except (KeyError, IndexError, TypeError):
                return None
        if isinstance(node, dict) and "x-srg-code" in node:
            return node["x-srg-code"]
        return None

    def _resolve(self, ref: str) -> Any:
        node: Any = self.root
        for part in ref[2:].split("/"):
            node = node[part]
        return node

    def _convert(self, e) -> list[SchemaError]:
        path = tuple(e.absolute_path)
        kw = e.validator
        if kw in ("oneOf", "anyOf"):
            return self._alternatives(e, path)
        code = self._annotated_code(e) or _BY_KEYWORD.get(kw, "SRG102")
        v, inst = e.validator_value, e.instance
        schema_path = list(e.absolute_schema_path)
        if len(schema_path) >= 2 and schema_path[-2] == "propertyNames":
            # a key failed the propertyNames schema: point at the key itself
            inner = self._convert_plain(kw, v, inst, e, code, path)
            code = self._annotated_code(e) or "SRG101"
            return [SchemaError(code, path + (str(inst),), f"key {inst!r} is not allowed: {x.message}") for x in inner]
        return self._convert_plain(kw, v, inst, e, code, path)

    def _convert_plain(self, kw, v, inst, e, code, path) -> list[SchemaError]:
        if kw == "type":
            names = v if isinstance(v, list) else [v]
            return [SchemaError(code, path, f"expected {' or '.join(names)}, got {_json_type(inst)}")]
        if kw == "required":
            missing = [k for k in v if isinstance(inst, dict) and k not in inst]
            return [SchemaError(code, path, f"missing required key {k!r}") for k in missing]
        if kw == "additionalProperties":
            props = e.schema.get("properties", {})
            extra = [k for k in inst if k not in props] if isinstance(inst, dict) else []
            out = []
            allowed = f"allowed keys: {', '.join(props)}" if props else None
            for n, key in enumerate(extra):
                hint = allowed
                close = _closest(key, props) if n < MAX_SUGGESTIONS else None
                if close:
                    hint = f"did you mean {close!r}? " + (hint or "")
                out.append(SchemaError(code, path + (key,), f"unknown key {key!r}", hint))
            return out
        if kw == "propertyNames":
            return [SchemaError(code, path + (inst,) if isinstance(inst, str) else path,
                                f"key {inst!r} is not allowed: {e.message}")]
        if kw in _MESSAGES:
            return [SchemaError(code, path, *_MESSAGES[kw](inst, v))]
        if kw == "minProperties":
            props = e.schema.get("properties", {})
            return [SchemaError(code, path, f"needs at least {v} key(s)", f"one of: {', '.join(props)}" if props else None)]
        if kw == "maxProperties":
            return [SchemaError(code, path, f"allows at most {v} key(s), got {', '.join(map(repr, inst))}")]
        return [SchemaError(code, path, e.message[:300])]

    def _alternatives(self, e, path: tuple) -> list[SchemaError]:
        """No branch of a oneOf/anyOf matched: report the branch that got furthest (fewest errors,
        deepest path); its errors are the useful ones. Several matched (oneOf): SRG107."""
        branches: dict[int, list] = {}
        for sub in e.context or ():
            branches.setdefault(sub.relative_schema_path[0], []).append(sub)
        if not branches:  # oneOf with more than one passing branch
            return [SchemaError(self._annotated_code(e) or "SRG107", path,
                                "matches more than one alternative of the schema")]
        converted = [[x for sub in errs for x in self._convert(sub)] for _, errs in sorted(branches.items())]
        converted = [c for c in converted if c]
        if not converted:
            return [SchemaError("SRG107", path, e.message[:300])]
        best = min(converted, key=lambda errs: (len(errs), -max(len(x.path) for x in errs)))
        code = self._annotated_code(e)
        return [SchemaError(code, x.path, x.message, x.hint) for x in best] if code else best


# keyword -> (message, hint) from the instance and the keyword's value, for the keywords whose
# message needs nothing else
_MESSAGES = {
    "const": lambda inst, v: (f"must be {v!r}",),
    "enum": lambda inst, v: (f"{inst!r} is not allowed", f"allowed: {', '.join(repr(x) for x in v)}"),
    "minimum": lambda inst, v: (f"{_shown(inst)} is below the minimum {v}",),
    "maximum": lambda inst, v: (f"{_shown(inst)} is above the maximum {v}",),
    "exclusiveMinimum": lambda inst, v: (f"{_shown(inst)} must be greater than {v}",),
    "minLength": lambda inst, v: (f"must be at least {v} characters",),
    "maxLength": lambda inst, v: (f"must be at most {v} characters",),
    "pattern": lambda inst, v: (f"{str(inst)[:60]!r} does not match {v}",),
    "minItems": lambda inst, v: (f"needs at least {v} item(s)",),
    "maxItems": lambda inst, v: (f"allows at most {v} item(s)",),
    "uniqueItems": lambda inst, v: ("items must be unique",),
}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _shown(value) -> str:
    """A number for a message: huge ones in short scientific form. `f"{n:.3g}"` converts an int to
    float first and raised OverflowError for ints beyond ~1e308 (found by tests/test_fuzz.py)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return repr(value)
    if abs(value) < 1e15:
        return str(value)
    if isinstance(value, int):
        digits = str(abs(value))
        return f"{'-' if value < 0 else ''}{digits[0]}.{digits[1:3]}e+{len(digits) - 1}"
    return f"{value:.3g}"


def _closest(key: str, candidates) -> str | None:
    import difflib

    match = difflib.get_close_matches(str(key), list(candidates), n=1, cutoff=0.75)
    return match[0] if match else None
