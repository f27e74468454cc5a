"""A pair given as folders that IS a built-in pair (SRG504): the folders `surgery pair export` writes.

Why: `surgery apply` decodes a built-in recipe's held-out prompts for any pair of that recipe, while
round one's probe took 12 generic prompts and no expectation for anything but the built-in folders
themselves: the same exported head read 74.1 % in one and 70.7 % in the other (issue 66). Recognised,
the probe uses the pair's prompts, its byte tokenizer (the ids `apply` decodes) and its expectation.

What counts as the same pair: each side's config.json says the same (parsed, so formatting does not
matter) and its weight files are byte-identical (size first, then SHA-256; the miniatures are a few MB).
Tokenizer files are not compared: `pair export` adds them."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..pairs import builtin_pair, builtin_pairs

WEIGHTS = ("model.safetensors",)


def _config(folder: Path):
    try:
        return json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _digest(path: Path) -> str | None:
    try:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()
    except OSError:
        return None


def same_folder(given: Path, builtin: Path) -> bool:
    given, builtin = Path(given), Path(builtin)
    if not given.is_dir() or not builtin.is_dir():
        return False
    if given.resolve() == builtin.resolve():
        return True
    if _config(given) is None or _config(given) != _config(builtin):
        return False
    for name in WEIGHTS:
        a, b = given / name, builtin / name
        if a.exists() != b.exists():
            return False
        if a.exists() and (a.stat().st_size != b.stat().st_size or _digest(a) != _digest(b)):
            return False
    return True


def recognise(recipe_name: str, target: Path, draft: Path):
    """The built-in pair (surgery.pairs.BuiltinPair) whose target and draft `target` / `draft` hold, or
    None. The recipe's own pair is tried first; any other built-in pair of the same files is not this
    recipe's (its prompts and expectation belong to another recipe) and is not returned."""
    names = [recipe_name] if recipe_name in builtin_pairs() else []
    for name in names:
        pair = builtin_pair(name)
        if pair is not None and same_folder(target, pair.target) and same_folder(draft, pair.draft):
            return pair
    return None
