"""The engines surgery knows, and what it knows about each: one card per engine, as data.

A card (`surgery/data/engines/<engine>.yaml`) holds everything engine-specific that is not code:
where each role's module lives on a live model, the load-time flags an engine sets, the
speculative methods and attention backends it has, the limits measured on it. The engine list is
the set of cards: adding an engine starts with adding its card (docs/architecture.md), and every
list of engines in the code (CLI choices, the op registry's performer check, the generated docs)
is this one. A card is read into the typed models of surgery/engine/card_model.py, once per process: an
unknown key, a missing required key or a wrong type stops the load, naming the card and the key.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from .card_model import EngineCard, Limits, card_from_data
from ..resources import data_dir, load_data
from ..text.diagnostics import Location

CARDS = "data/engines"


@lru_cache(maxsize=1)
def engine_names() -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in (data_dir() / "engines").glob("*.yaml")))


ENGINES: tuple[str, ...] = engine_names()


def card_file(engine: str) -> Path:
    return data_dir() / "engines" / f"{engine}.yaml"


@lru_cache(maxsize=None)
def card(engine: str) -> EngineCard:
    """The engine's card as typed models (built once per process). KeyError for an engine without one;
    CardError (surgery/engine/card_model.py) for a card that does not fit the models."""
    if engine not in ENGINES:
        raise KeyError(f"no engine card for {engine!r} (engines: {', '.join(ENGINES)})")
    return card_from_data(load_data(f"{CARDS}/{engine}.yaml"), str(card_file(engine)))


def engine_limits(engine: str) -> Limits:
    """What `engine` cannot do under some runtimes, measured on real engines (the card's `limits`);
    none for an engine without a card."""
    return card(engine).limits if engine in ENGINES else Limits()


def card_location(engine: str, key_path: str):
    """Where a card entry is, for diagnostics that cite engine data."""

    return Location(str(data_dir() / "engines" / f"{engine}.yaml"), key_path=key_path)
