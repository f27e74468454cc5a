"""Coded diagnostics: every problem the toolkit reports has a stable code, a severity,
a location and a hint, so users (and CI scripts) can act on it without reading a traceback.

The catalogue of codes is data (`surgery/data/codes.yaml`); this module only carries them.
"""
from __future__ import annotations

from dataclasses import field
from functools import lru_cache
from typing import Any

from ..resources import load_data
from .records import Record, record
from .escape import cut, escape_lines

ERROR = "error"
WARNING = "warning"
INFO = "info"

# exit codes of the CLI (documented in the README and docs/cli.md)
EXIT_OK = 0
EXIT_INVALID = 1  # the recipe or the configs are invalid (for each other)
EXIT_USAGE = 2  # usage error or unreadable input


@record
class Location(Record):
    """Where a problem sits: a file with line/column (1-based) and/or a key path inside it."""

    file: str | None = None
    line: int | None = None
    col: int | None = None
    key_path: str | None = None

    def __str__(self) -> str:
        parts = []
        if self.file:
            where = self.file
            if self.line is not None:
                where += f":{self.line}"
                if self.col is not None:
                    where += f":{self.col}"
            parts.append(where)
        if self.key_path:
            parts.append(self.key_path)
        return " ".join(parts) if parts else "<input>"


@record
class Diagnostic(Record):
    code: str
    severity: str
    message: str
    location: Location = field(default_factory=Location)
    hint: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "location": str(self.location),
            "hint": self.hint,
        }

    def render(self) -> str:
        """One line (plus its hint) for a terminal or a log; control characters escaped (`shown`)."""
        text = f"{self.location}: {self.severity} {self.code}: {self.message}"
        if self.hint:
            text += f"\n    hint: {self.hint}"
        return escape_lines(text)


class SurgeryError(Exception):
    """The one exception type the toolkit raises for bad input; it always carries diagnostics."""

    def __init__(self, diagnostics: Diagnostic | list[Diagnostic]):
        if isinstance(diagnostics, Diagnostic):
            diagnostics = [diagnostics]
        self.diagnostics: list[Diagnostic] = list(diagnostics)
        super().__init__("\n".join(d.render() for d in self.diagnostics))

    @property
    def exit_code(self) -> int:
        return max(exit_code_for(d.code) for d in self.diagnostics)


@lru_cache(maxsize=1)
def catalogue() -> dict[str, dict[str, Any]]:
    """The code catalogue, loaded once: {code: {title, exit, severity, explain, hint}}."""
    return load_data("data/codes.yaml")


def exit_code_for(code: str) -> int:
    entry = catalogue().get(code)
    return int(entry.get("exit", EXIT_INVALID)) if entry else EXIT_INVALID


def diag(code: str, message: str, location: Location | None = None, hint: str | None = None,
         severity: str | None = None) -> Diagnostic:
    """Build a diagnostic; severity and hint default to the catalogue's entry for the code."""
    entry = catalogue().get(code)
    if entry is None:  # a programming error, caught by tests/test_codes.py
        raise KeyError(f"diagnostic code {code} is not in surgery/data/codes.yaml")
    hint = hint if hint is not None else entry.get("hint")
    return Diagnostic(
        code=code,
        severity=severity or entry.get("severity", ERROR),
        message=cut(message),  # the net under a quote nobody bounded (surgery.text.escape)
        location=location or Location(),
        hint=cut(hint) if hint is not None else None,
    )


def fail(code: str, message: str, location: Location | None = None, hint: str | None = None) -> SurgeryError:
    return SurgeryError(diag(code, message, location, hint))
