"""Shipped recipes are schema-checked when the package is built, not at every start.

`surgery validate` on a shipped recipe used to spend about half its cold start importing jsonschema
(bench/cold_start.py). `tools/gen_docs.py` (`prechecked_record`) runs the schema check over every shipped recipe and
records, in `surgery/data/prechecked_recipes.json`, the sha256 of the schema and of each recipe
that passed. At load time a recipe whose bytes hash to a recorded digest, under the schema the
record was made with, has been checked already: jsonschema is not imported. Any other text (a
recipe the user wrote or edited, a changed schema) is checked at run time as before.
tests/test_docs_generated.py fails when the record is stale.
"""
from __future__ import annotations

import hashlib
import json
from functools import lru_cache

from .resources import data_dir, schemas_dir

RECORD = "prechecked_recipes.json"
SCHEMA = "recipe.schema.json"


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@lru_cache(maxsize=1)
def _record() -> tuple[str, frozenset]:
    try:
        rec = json.loads((data_dir() / RECORD).read_text(encoding="utf-8"))
        schema_now = digest((schemas_dir() / SCHEMA).read_bytes())
    except (OSError, ValueError):
        return "", frozenset()
    if rec.get("schema") != schema_now:  # another schema: nothing recorded holds
        return "", frozenset()
    return schema_now, frozenset(rec.get("recipes", {}).values())


def already_checked(text: str) -> bool:
    """True when this exact recipe text passed the current schema when the package was built."""
    return digest(text.encode("utf-8")) in _record()[1]
