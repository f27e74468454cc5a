"""Reading a text input file (recipe, config.json) with coded errors and a size bound."""
from __future__ import annotations

from pathlib import Path

from .diagnostics import Location, fail


# SRG001's catalogue hint speaks of model folders (the common case on the command line); a missing
# recipe gets its own, since a recipe is a file or a shipped name, never a folder
_MISSING_HINTS = {
    "recipe": "check the path; a recipe is a YAML file or the name of a shipped recipe (`surgery recipes` lists them)",
}


def read_text_file(path: Path, max_bytes: int, what: str, shown: str | None = None) -> str:
    """UTF-8 text of `path`, at most `max_bytes`; SRG001 missing, SRG002 unreadable / directory /
    binary / not UTF-8 (with the line of the first bad byte), SRG008 too large."""
    shown = shown or str(path)
    if not path.exists():
        raise fail("SRG001", f"no such {what} file: {path}", Location(shown), hint=_MISSING_HINTS.get(what))
    if path.is_dir():
        raise fail("SRG002", f"{path} is a directory, not a {what} file", Location(shown))
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise fail("SRG008", f"{what} is {size} bytes (limit {max_bytes})", Location(shown))
        data = path.read_bytes()
    except OSError as exc:
        raise fail("SRG002", f"cannot read {path}: {exc.strerror or exc}", Location(shown)) from None
    return decode_text(data, what, shown)


def decode_text(data: bytes, what: str, shown: str) -> str:
    """UTF-8 text of a file's bytes; SRG002 for binary content or another encoding."""
    if b"\x00" in data:
        raise fail("SRG002", f"binary content (NUL bytes) in a {what} file", Location(shown))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise fail("SRG002", f"not UTF-8 text (byte {exc.start})", Location(shown, line)) from None
