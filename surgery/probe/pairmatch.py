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
from functools import lru_cache
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


def same_weights(given: Path, builtin: Path) -> bool:
    """The weight files of `given` are byte-identical to `builtin`'s (both folders exist)."""
    given, builtin = Path(given), Path(builtin)
    if not given.is_dir() or not builtin.is_dir():
        return False
    if given.resolve() == builtin.resolve():
        return True
    for name in WEIGHTS:
        a, b = given / name, builtin / name
        if a.exists() != b.exists():
            return False
        if a.exists() and (a.stat().st_size != b.stat().st_size or _digest(a) != _digest(b)):
            return False
    return True


def same_folder(given: Path, builtin: Path) -> bool:
    """Config (parsed) and weights alike."""
    return same_weights(given, builtin) and (Path(given).resolve() == Path(builtin).resolve() or
                                             (_config(given) is not None and _config(given) == _config(builtin)))


# how much of a built-in pair the given folders hold, most first
PAIR, HEAD_WEIGHTS, TARGET = "pair", "the pair's weights", "the pair's target"


@lru_cache(maxsize=8)  # pair_for and the report ask once each per command
def recognise(recipe_name: str, target: Path, draft: Path):
    """(built-in pair, how) for the recipe's own built-in pair, or (None, None):
    - PAIR: both folders hold it (config and weights), as `pair export` writes it: its prompts, its byte
      tokenizer and its expectation;
    - HEAD_WEIGHTS: the target and the draft's weights are the pair's, the draft's config.json differs (what the
      probe is asked about): the same, the expectation included (the weights are the trained head);
    - TARGET: only the target is the pair's: its prompts and tokenizer (the ids `apply` decodes), no expectation.
    Another recipe's pair is never returned: its prompts and expectation belong to that recipe."""
    pair = builtin_pair(recipe_name) if recipe_name in builtin_pairs() else None
    if pair is None or not same_folder(target, pair.target):
        return None, None
    if same_folder(draft, pair.draft):
        return pair, PAIR
    if same_weights(draft, pair.draft):
        return pair, HEAD_WEIGHTS
    return pair, TARGET
