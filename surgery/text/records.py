"""Immutable records: a dataclass's fields, a keyword `__init__`, `FrozenInstanceError` on assignment,
`__repr__`, `__eq__` and `__hash__` over the fields, without the per-class methods a frozen dataclass
compiles.

Why: `@dataclass(frozen=True)` writes and compiles about six methods for every class it decorates,
about 0.5 ms each class, paid at every start of `surgery validate`, which imports every op's step and
spec class and every engine-card model (bench/cold_start.py). A class decorated with `@record` and
deriving from `Record` is a dataclass (`fields`, `replace`, `asdict` work) whose methods are these,
written once: about 0.1 ms a class. A field's `repr=False` / `compare=False` are honoured as a
dataclass honours them; arguments may be given by keyword or in field order.
"""
from __future__ import annotations

from dataclasses import MISSING, FrozenInstanceError, dataclass, fields
from typing import Any

record = dataclass(init=False, repr=False, eq=False)  # the decorator; the methods come from Record


class Record:
    """What every record shares (see the module's docstring)."""

    def __init__(self, *args: Any, **values: Any) -> None:
        every = fields(self)
        if len(args) > len(every):
            raise TypeError(f"{type(self).__name__}() takes {len(every)} arguments, {len(args)} given")
        for f, value in zip(every, args):
            if f.name in values:
                raise TypeError(f"{type(self).__name__}() got multiple values for {f.name!r}")
            values[f.name] = value
        for f in every:
            if f.name in values:
                value = values.pop(f.name)
            elif f.default is not MISSING:
                value = f.default
            elif f.default_factory is not MISSING:
                value = f.default_factory()
            else:
                raise TypeError(f"{type(self).__name__}() missing {f.name!r}")
            object.__setattr__(self, f.name, value)
        if values:
            raise TypeError(f"{type(self).__name__}() got unknown {', '.join(map(repr, values))}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr)
        return f"{type(self).__name__}({shown})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.field_values() == other.field_values()

    def __hash__(self) -> int:
        return hash((type(self), self.field_values()))

    def field_values(self) -> tuple:
        """The values equality and the hash compare (`compare=False` fields left out, as a dataclass does)."""
        return tuple(getattr(self, f.name) for f in fields(self) if f.compare)
