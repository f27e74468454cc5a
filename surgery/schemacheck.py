"""A small validator for the subset of JSON Schema (draft 2020-12) our schemas use.

Why our own: `import jsonschema` alone costs ~150 ms, ten times a bare interpreter start, and
`surgery validate` must start fast. The subset is checked against the real `jsonschema` in the
tests (same verdict on every shipped recipe and every broken-recipe fixture), so the schema file
stays the single truth. Errors carry the instance path, which the caller maps to file:line:col.

Supported keywords: type, properties, additionalProperties, required, propertyNames, enum, const,
items, minItems, maxItems, uniqueItems, minimum, maximum, exclusiveMinimum, minLength, maxLength,
pattern, minProperties, maxProperties, oneOf, anyOf, $ref (local "#/$defs/..."). Annotation
keywords (title, description, examples, default, $comment, $schema, $id) are ignored.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

# x-srg-code: our own annotation (ignored by other validators) naming the diagnostic code for
# errors found at that schema node, where the generic code would be less precise
_ANNOTATIONS = {"title", "description", "examples", "default", "$comment", "$schema", "$id", "$defs",
                "markdownDescription", "deprecated", "x-srg-code"}
SUPPORTED = {"type", "properties", "additionalProperties", "required", "propertyNames", "enum", "const",
             "items", "minItems", "maxItems", "uniqueItems", "minimum", "maximum", "exclusiveMinimum",
             "minLength", "maxLength", "pattern", "minProperties", "maxProperties", "oneOf", "anyOf",
             "$ref"} | _ANNOTATIONS


@dataclass(frozen=True)
class SchemaError:
    code: str  # SRG1xx
    path: tuple
    message: str
    hint: str | None = None


def _type_ok(value: Any, name: str) -> bool:
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, list)
    if name == "string":
        return isinstance(value, str)
    if name == "integer":  # JSON Schema: 1.0 is an integer
        return (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, float) and value.is_integer())
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "null":
        return value is None
    raise ValueError(f"unsupported type {name}")


def _json_type(value: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _type_ok(value, name):
            return name
    return type(value).__name__


@lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern:
    return re.compile(pattern)


class Validator:
    def __init__(self, schema: dict):
        self.root = schema

    def _resolve(self, ref: str) -> dict:
        if not ref.startswith("#/"):
            raise ValueError(f"only local $ref supported, got {ref}")
        node: Any = self.root
        for part in ref[2:].split("/"):
            node = node[part]
        return node

    def errors(self, instance: Any) -> list[SchemaError]:
        out: list[SchemaError] = []
        self._check(instance, self.root, (), out)
        return out

    def _check(self, value: Any, schema: dict, path: tuple, out: list[SchemaError]) -> None:
        code = schema.get("x-srg-code")
        if code is not None:
            sub: list[SchemaError] = []
            self._check_node(value, schema, path, sub)
            out.extend(SchemaError(code, e.path, e.message, e.hint) for e in sub)
            return
        self._check_node(value, schema, path, out)

    def _check_node(self, value: Any, schema: dict, path: tuple, out: list[SchemaError]) -> None:
        if "$ref" in schema:
            self._check(value, self._resolve(schema["$ref"]), path, out)
        t = schema.get("type")
        if t is not None:
            names = t if isinstance(t, list) else [t]
            if not any(_type_ok(value, n) for n in names):
                out.append(SchemaError("SRG102", path, f"expected {' or '.join(names)}, got {_json_type(value)}"))
                return
        if "const" in schema and value != schema["const"]:
            out.append(SchemaError("SRG104", path, f"must be {schema['const']!r}"))
        if "enum" in schema and not any(value == e and type(value) is type(e) for e in schema["enum"]):
            allowed = ", ".join(repr(e) for e in schema["enum"])
            out.append(SchemaError("SRG104", path, f"{value!r} is not allowed", f"allowed: {allowed}"))
        if isinstance(value, str):
            self._check_string(value, schema, path, out)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            self._check_number(value, schema, path, out)
        if isinstance(value, list):
            self._check_array(value, schema, path, out)
        if isinstance(value, dict):
            self._check_object(value, schema, path, out)
        if "oneOf" in schema or "anyOf" in schema:
            self._check_alternatives(value, schema, path, out)

    def _check_string(self, value, schema, path, out):
        if "minLength" in schema and len(value) < schema["minLength"]:
            out.append(SchemaError("SRG106", path, f"must be at least {schema['minLength']} characters"))
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            out.append(SchemaError("SRG106", path, f"must be at most {schema['maxLength']} characters"))
        if "pattern" in schema and not _regex(schema["pattern"]).search(value):
            out.append(SchemaError("SRG106", path, f"{value[:60]!r} does not match {schema['pattern']}"))

    def _check_number(self, value, schema, path, out):
        if "minimum" in schema and value < schema["minimum"]:
            out.append(SchemaError("SRG105", path, f"{_shown(value)} is below the minimum {schema['minimum']}"))
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            out.append(SchemaError("SRG105", path, f"{value} must be greater than {schema['exclusiveMinimum']}"))
        if "maximum" in schema and value > schema["maximum"]:
            shown = _shown(value)
            out.append(SchemaError("SRG105", path, f"{shown} is above the maximum {schema['maximum']}"))

    def _check_array(self, value, schema, path, out):
        if "minItems" in schema and len(value) < schema["minItems"]:
            out.append(SchemaError("SRG106", path, f"needs at least {schema['minItems']} item(s)"))
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            out.append(SchemaError("SRG106", path, f"allows at most {schema['maxItems']} item(s)"))
        if schema.get("uniqueItems"):
            seen = []
            for item in value:
                if any(item == s and type(item) is type(s) for s in seen):
                    out.append(SchemaError("SRG106", path, f"duplicate item {item!r}"))
                    break
                seen.append(item)
        if "items" in schema:
            for i, item in enumerate(value):
                self._check(item, schema["items"], path + (i,), out)

    def _check_object(self, value, schema, path, out):
        props = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                out.append(SchemaError("SRG103", path, f"missing required key {key!r}"))
        if "minProperties" in schema and len(value) < schema["minProperties"]:
            out.append(SchemaError("SRG106", path, f"needs at least {schema['minProperties']} key(s)",
                                   f"one of: {', '.join(props)}" if props else None))
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            out.append(SchemaError("SRG106", path, f"allows at most {schema['maxProperties']} key(s), got "
                                   f"{', '.join(map(repr, value))}"))
        names = schema.get("propertyNames")
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if names is not None:
                sub: list[SchemaError] = []
                self._check(key, names, path + (key,), sub)
                if sub:
                    code = names.get("x-srg-code", "SRG101")
                    out.append(SchemaError(code, path + (key,), f"key {key!r} is not allowed: {sub[0].message}"))
                    continue
            if key in props:
                self._check(item, props[key], path + (key,), out)
            elif extra is False:
                hint = f"allowed keys: {', '.join(props)}" if props else None
                close = _closest(key, props)
                if close:
                    hint = f"did you mean {close!r}? " + (hint or "")
                out.append(SchemaError("SRG101", path + (key,), f"unknown key {key!r}", hint))
            elif isinstance(extra, dict):
                self._check(item, extra, path + (key,), out)

    def _check_alternatives(self, value, schema, path, out):
        for keyword in ("oneOf", "anyOf"):
            if keyword not in schema:
                continue
            branch_errors = []
            passing = 0
            for branch in schema[keyword]:
                errs: list[SchemaError] = []
                self._check(value, branch, path, errs)
                if errs:
                    branch_errors.append(errs)
                else:
                    passing += 1
            if passing == 0:
                # report the branch that got furthest (fewest errors, deepest path): its errors are the useful ones
                best = min(branch_errors, key=lambda errs: (len(errs), -max(len(e.path) for e in errs)))
                out.extend(best)
            elif keyword == "oneOf" and passing > 1:
                out.append(SchemaError("SRG107", path, "matches more than one alternative of the schema"))


def _shown(value) -> str:
    """A number for a message: huge ones in short scientific form. `f"{n:.3g}"` converts an int to
    float first and raised OverflowError for ints beyond ~1e308 (found by tests/test_fuzz.py)."""
    if abs(value) < 1e15:
        return str(value)
    if isinstance(value, int):
        digits = str(abs(value))
        return f"{'-' if value < 0 else ''}{digits[0]}.{digits[1:3]}e+{len(digits) - 1}"
    return f"{value:.3g}"


def _closest(key: str, candidates) -> str | None:
    import difflib

    match = difflib.get_close_matches(key, list(candidates), n=1, cutoff=0.75)
    return match[0] if match else None
