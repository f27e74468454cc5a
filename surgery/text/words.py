"""Small wording helpers for messages built from numbers ("an 8-layer target", not "a 8-layer")."""
from __future__ import annotations


def article(n: int | str) -> str:
    """'an' before a number spoken with a leading vowel sound (8, 11, 18, 80-89, 800..., 11000...), else 'a'."""
    digits = str(n).lstrip("+-")
    if not digits.isdigit():
        return "an" if digits[:1].lower() in "aeiou" and digits else "a"
    if digits.startswith("8"):
        return "an"
    # eleven / eighteen, alone or leading a group of thousands (11, 18, 11000, 18000, 11000000, ...)
    head_len = len(digits) % 3 or 3
    return "an" if head_len == 2 and digits[:2] in ("11", "18") else "a"


def a_count(n: int, noun: str) -> str:
    """'an 8-layer', 'a 12-layer': the article and the number joined to `noun` with a hyphen."""
    return f"{article(n)} {n}-{noun}"
