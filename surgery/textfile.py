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
    return decode_text(read_file_bytes(path, max_bytes, what, shown), what, shown)


def read_file_bytes(path: Path, max_bytes: int, what: str, shown: str | None = None, named: str | None = None) -> bytes:
    """The bytes of `path`, at most `max_bytes`, with a coded error for each way a file can fail: SRG001
    missing, SRG002 a directory or unreadable, SRG008 too large (checked before anything is read).
    `shown`: the diagnostic's location; `named`: how messages name the file (default the path)."""
    shown, named = shown or str(path), named or str(path)
    if not path.exists():
        raise fail("SRG001", f"no such {what} file: {named}", Location(shown), hint=_MISSING_HINTS.get(what))
    if path.is_dir():
        raise fail("SRG002", f"{named} is a directory, not a {what} file", Location(shown))
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise fail("SRG008", f"{what} is {size} bytes (limit {max_bytes})", Location(shown))
        return path.read_bytes()
    except OSError as exc:
        raise fail("SRG002", f"cannot read {named}: {exc.strerror or exc}", Location(shown)) from None


def decode_text(data: bytes, what: str, shown: str) -> str:
    """UTF-8 text of a file's bytes; SRG002 for binary content or another encoding."""
    if b"\x00" in data:
        raise fail("SRG002", f"binary content (NUL bytes) in a {what} file", Location(shown))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise fail("SRG002", f"not UTF-8 text (byte {exc.start})", Location(shown, line)) from None
