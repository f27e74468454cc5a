"""The one reader of local inputs: recipes, configs, tokenizer files, prompt files, patches.

Every file a user names is read here, the way the hub cache reads its entries (`surgery.hub.entries`),
because a user's path can be anything a cache entry can (issue 67):

- opened with O_NONBLOCK, so a FIFO's open returns at once instead of blocking for a writer;
- checked with fstat on the open descriptor (what is read is what was checked): a character or block
  device (`/dev/zero`, a link to it), a FIFO or a socket is SRG780, a folder SRG002;
- read to a limit counted as the bytes come, never trusting the size the file system reports (a
  device or a /proc file says 0 and never ends): one byte past the limit is SRG008;
- a path that cannot be looked up (ENAMETOOLONG: a 5,000-character path, ELOOP: a link loop, a NUL
  byte) is SRG781, naming the path escaped and cut (`surgery.text.escape`); a missing one SRG001.

`probe` answers "is there something at this path, and what" without raising OSError, for the places
that test a user's path before reading it (`Path.exists()` raises ENAMETOOLONG on Python 3.11).
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from .diagnostics import Location, fail
from .escape import shown as _esc

READ_PIECE = 1 << 20  # bytes asked of one read(); the limit is counted over the pieces

# SRG001's catalogue hint speaks of model folders (the common case on the command line); a missing
# recipe gets its own, since a recipe is a file or a shipped name, never a folder
_MISSING_HINTS = {
    "recipe": "check the path; a recipe is a YAML file or the name of a shipped recipe (`surgery recipes` lists them)",
}
_ABSENT = {errno.ENOENT, errno.ENOTDIR}
_DENIED = {errno.EACCES, errno.EPERM}
_KINDS = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISSOCK, "a socket"))


def _named(path) -> str:
    return _esc(os.fspath(path), 300)


def path_error(path, exc: BaseException, what: str, where: str | None = None):
    """SRG781: `path` cannot be looked up or opened (not because it is absent)."""
    if isinstance(exc, ValueError):  # a NUL byte in the path
        why = "holds a NUL byte"
    else:
        code = errno.errorcode.get(getattr(exc, "errno", 0) or 0, "")
        meaning = os.strerror(exc.errno) if getattr(exc, "errno", None) else str(exc)
        why = f"cannot be opened: {meaning}{f' ({code})' if code else ''}"
    return fail("SRG781", f"the {what} path {_named(path)} {why}", Location(_esc(where or os.fspath(path), 300)))


def kind_of(mode: int) -> str | None:
    """'a FIFO', 'a character device', ... for a mode that is neither a regular file nor a folder."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return None


def probe(path, what: str = "input") -> os.stat_result | None:
    """The stat of `path` (links followed), None when nothing is there (a dangling link, a NUL byte);
    SRG781 when it cannot be looked up (a path too long, a link loop, a permission)."""
    try:
        return os.stat(path)
    except OSError as exc:
        if exc.errno in _ABSENT:
            return None
        raise path_error(path, exc, what) from None
    except ValueError:  # a NUL byte: no file can be there (the reader says SRG781 if it is read)
        return None


def exists(path, what: str = "input") -> bool:
    """`Path.exists()` that never raises OSError: SRG781 for a path that cannot be looked up."""
    return probe(path, what) is not None


def is_dir(path, what: str = "input") -> bool:
    st = probe(path, what)
    return st is not None and stat.S_ISDIR(st.st_mode)


def read_text_file(path: Path, max_bytes: int, what: str, shown: str | None = None) -> str:
    """UTF-8 text of `path`, at most `max_bytes`; SRG001 missing, SRG002 unreadable / directory /
    binary / not UTF-8 (with the line of the first bad byte), SRG008 too large, SRG780 a device,
    FIFO or socket, SRG781 a path that cannot be opened."""
    shown = shown or str(path)
    return decode_text(read_file_bytes(path, max_bytes, what, shown), what, shown)


def read_file_bytes(path: Path, max_bytes: int, what: str, shown: str | None = None, named: str | None = None) -> bytes:
    """The bytes of the regular file `path`, at most `max_bytes` (counted as read), with a coded error
    for each way a file can fail (see the module). `shown`: the diagnostic's location; `named`: how
    messages name the file (default the path)."""
    shown = shown or os.fspath(path)
    named = _esc(named or os.fspath(path), 300)
    loc = Location(_esc(shown, 300))
    fd = open_regular(path, what, shown, named)
    try:
        size = os.fstat(fd).st_size
        if size > max_bytes:
            raise fail("SRG008", f"{what} is {size} bytes (limit {max_bytes})", loc)
        chunks, got = [], 0
        while True:  # counted, not trusted: a file may grow, or say 0 and never end (/proc)
            chunk = os.read(fd, min(READ_PIECE, max_bytes + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
            if got > max_bytes:
                raise fail("SRG008", f"{what} is more than {max_bytes} bytes (limit {max_bytes})", loc)
        return b"".join(chunks)
    except OSError as exc:
        raise fail("SRG002", f"cannot read {named}: {exc.strerror or exc}", loc) from None
    finally:
        os.close(fd)


def read_span(path: Path, start: int, length: int, what: str, shown: str | None = None) -> bytes:
    """Bytes [start, start+length) of the regular file `path` (fewer at its end): a weight file's
    header or slice, opened as `read_file_bytes` opens it."""
    fd = open_regular(path, what, shown)
    try:
        return os.pread(fd, max(0, length), start) if length > 0 else b""
    except OSError as exc:
        raise fail("SRG002", f"cannot read {_named(path)}: {exc.strerror or exc}",
                   Location(_esc(shown or os.fspath(path), 300))) from None
    finally:
        os.close(fd)


def open_regular(path, what: str, shown: str | None = None, named: str | None = None) -> int:
    """A read descriptor of the regular file `path` (the caller closes it); coded errors otherwise."""
    shown = shown or os.fspath(path)
    named = named or _named(path)
    loc = Location(_esc(shown, 300))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno in _ABSENT:
            raise fail("SRG001", f"no such {what} file: {named}", loc, hint=_MISSING_HINTS.get(what)) from None
        if exc.errno == errno.ENXIO:  # a socket (or a FIFO's other end missing on some systems)
            raise fail("SRG780", f"{named} is a socket, not a {what} file: refused, not read", loc) from None
        if exc.errno in _DENIED:
            raise fail("SRG002", f"cannot read {named}: {exc.strerror or exc}", loc) from None
        raise path_error(path, exc, what, shown) from None
    except ValueError as exc:
        raise path_error(path, exc, what, shown) from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise fail("SRG002", f"{named} is a directory, not a {what} file", loc)
        kind = kind_of(mode)
        if kind is not None or not stat.S_ISREG(mode):
            raise fail("SRG780", f"{named} is {kind or 'not a regular file'}, not a {what} file: refused, not read",
                       loc)
    except BaseException:
        os.close(fd)
        raise
    return fd


def decode_text(data: bytes, what: str, shown: str) -> str:
    """UTF-8 text of a file's bytes; SRG002 for binary content or another encoding."""
    if b"\x00" in data:
        raise fail("SRG002", f"binary content (NUL bytes) in a {what} file", Location(shown))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise fail("SRG002", f"not UTF-8 text (byte {exc.start})", Location(shown, line)) from None
