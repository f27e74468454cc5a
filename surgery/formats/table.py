"""The formats data (surgery/data/formats.yaml): formats, their markers, the aux-id conventions per
producer, the speculators algorithms and the runners' reading rules. Data only; no logic."""
from __future__ import annotations

from typing import Any

from ..resources import load_data


def formats_data() -> dict[str, Any]:
    return load_data("data/formats.yaml")


def conventions() -> dict[str, dict]:
    return formats_data()["conventions"]


def producers() -> list[str]:
    """Every producer name `--producer` accepts (the convention table's keys)."""
    return sorted(conventions())


def formats() -> dict[str, dict]:
    return formats_data()["formats"]


def algorithm(name: str) -> dict | None:
    return formats_data()["speculators_algorithms"].get(name)


def runners() -> dict[str, dict]:
    return formats_data()["runners"]
