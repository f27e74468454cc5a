"""Reversible mutations. Each records what it replaces so a failed apply can put every object back.

Why not deepcopy-and-swap: the models may be gigabytes; we never copy weights, only rebind
attributes, and keep the previous objects alive for the undo."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

_MISSING = object()


def registration(module: Any, name: str) -> str:
    """How `name` is registered on an nn.Module: `parameter`, `buffer` / `buffer_np` (persistent or
    not), `attribute` (plain, or absent). The one classifier: appliers keep a draft's kind with it,
    the wiring description reports it."""
    params = getattr(module, "_parameters", {})
    buffers = getattr(module, "_buffers", {})
    if name in params:
        return "parameter"
    if name in buffers:
        non_persistent = getattr(module, "_non_persistent_buffers_set", set())
        return "buffer_np" if name in non_persistent else "buffer"
    return "attribute"


def set_registered(module: Any, name: str, value: Any, kind: str) -> None:
    """Bind `value` as `module.name` with the given registration kind."""
    if kind == "parameter":
        import torch

        if not isinstance(value, torch.nn.Parameter):
            value = torch.nn.Parameter(value, requires_grad=False)
        module._buffers.pop(name, None)
        module.register_parameter(name, value)
    elif kind in ("buffer", "buffer_np"):
        module._parameters.pop(name, None)
        module.register_buffer(name, value, persistent=(kind == "buffer"))
    else:
        setattr(module, name, value)


@dataclass
class Mutation:
    """One reversible change. `label` says what it is in error messages."""

    label: str

    def apply(self) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def undo(self) -> None:  # pragma: no cover - interface
        raise NotImplementedError


@dataclass
class SetAttr(Mutation):
    """Rebind an attribute, keeping (or choosing) its registration kind; undo rebinds the old object."""

    obj: Any = None
    name: str = ""
    value: Any = None
    kind: str | None = None  # None: keep the existing registration kind
    _old: Any = field(default=_MISSING, repr=False)
    _old_kind: str = field(default="attribute", repr=False)
    _recorded: bool = field(default=False, repr=False)

    def apply(self) -> None:
        self._old = getattr(self.obj, self.name, _MISSING)
        self._old_kind = registration(self.obj, self.name)
        self._recorded = True  # from here on undo() can restore, even if the rebind below fails half-way
        set_registered(self.obj, self.name, self.value, self.kind or self._old_kind)

    def undo(self) -> None:
        if not self._recorded:  # apply() never ran (or failed before recording): nothing to restore
            return
        if self._old is _MISSING:
            if hasattr(self.obj, self.name):
                delattr(self.obj, self.name)
            return
        set_registered(self.obj, self.name, self._old, self._old_kind)


@dataclass
class CopyInPlace(Mutation):
    """Copy values into an existing tensor (its identity is kept: other holders of it see the change)."""

    tensor: Any = None
    source: Any = None
    _backup: Any = field(default=None, repr=False)

    def apply(self) -> None:
        self._backup = None
        self._backup = self.tensor.detach().clone()
        with _no_grad():
            self.tensor.copy_(self.source)

    def undo(self) -> None:
        if self._backup is not None:
            with _no_grad():
                self.tensor.copy_(self._backup)


def _no_grad():
    import torch

    return torch.no_grad()
