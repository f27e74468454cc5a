"""Reading one cache entry: only a regular file, only as many bytes as it may hold.

A cache is a folder anyone with write access can plant things in, and an earlier tool (or a hostile
hub through an older version) may have. What the cache holds under a name we read (`refs/main`, a
stored range, `listing.json`, a snapshot file) can be a FIFO (an open() that never returns), a
link to `/dev/zero` (a read that never ends: 5-6 GiB then MemoryError), a link loop or an over-long
link target. So every read here:

- opens with O_NONBLOCK (opening a FIFO returns at once; on a regular file the flag does nothing),
  never follows the entry to anything but a regular file (fstat on the open descriptor: what is read
  is what was checked, no race between a check and the open);
- reads nothing of a file larger than `limit` (the size the entry may have) and says its size, so
  the caller refuses or ignores it without holding it (a 100 MB `listing.json` costs no memory);
- answers a coded SRG066 for a FIFO, a device, a folder, a link loop or any other entry that cannot
  be opened; a missing entry is `None` (the cache does not hold it, which is no error).
"""
from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ..text.diagnostics import Location, fail
from ..text.escape import shown

_ABSENT = {errno.ENOENT, errno.ENOTDIR}
_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


@dataclass
class Entry:
    data: bytes  # the file's bytes; empty when the file is larger than the limit
    size: int  # the file's size (fstat)


def _refuse(path: Path, why: str, where: str):
    return fail("SRG066", f"the cache entry {shown(str(path), 300)} {why}: refused, not read", Location(where),
                hint=f"delete it (rm {shown(str(path), 300)}), or run the command again with --refresh, which "
                     "replaces what the cache holds for this revision")


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: Path, where: str) -> int | None:
    """A descriptor of `path` opened for reading when it is a regular file (links followed, the
    result checked), None when there is no such entry; SRG066 otherwise. The caller closes it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno in _ABSENT or not os.path.lexists(path):  # no entry (or none reachable: a path too
            return None  # long for the file system), or a dangling link (its blob deleted): not in the cache
        name = errno.errorcode.get(exc.errno or 0, "")
        raise _refuse(path, f"cannot be opened: {os.strerror(exc.errno) if exc.errno else exc}"
                      f"{f' ({name})' if name else ''}", where) from None
    except ValueError:  # a NUL in the name: never one of ours
        return None
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        os.close(fd)
        raise _refuse(path, f"cannot be examined ({exc.strerror or exc})", where) from None
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _refuse(path, f"is {_kind(mode)}, not a regular file", where)
    return fd


def read_regular(path: Path, limit: int, where: str) -> Entry | None:
    """The bytes of the regular file at `path` (see `open_regular`) when it holds at most `limit`
    (else none), with its size. A file whose size says 0 (/proc) is still read to `limit` at most."""
    fd = open_regular(path, where)
    if fd is None:
        return None
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            return Entry(b"", size)
        chunks, got = [], 0
        while got < limit:
            chunk = os.read(fd, min(1 << 20, limit - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        return Entry(b"".join(chunks), size)
    except OSError as exc:
        raise _refuse(path, f"cannot be read ({exc.strerror or exc})", where) from None
    finally:
        os.close(fd)


def read_span(path: Path, start: int, length: int, where: str) -> tuple[bytes, int] | None:
    """Bytes [start, start+length) of the regular file at `path` (fewer at its end) and the file's
    size; None when absent."""
    fd = open_regular(path, where)
    if fd is None:
        return None
    try:
        size = os.fstat(fd).st_size
        return (os.pread(fd, length, start) if length > 0 else b""), size
    except OSError as exc:
        raise _refuse(path, f"cannot be read ({exc.strerror or exc})", where) from None
    finally:
        os.close(fd)
