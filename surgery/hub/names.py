"""Names that come from the network are data, never paths.

A hub is whatever HF_ENDPOINT points at: a mirror, a proxy, a compromised server. Every name it
chooses (an ETag, a blob id, a file name in the listing or in a safetensors index) and every name a
user types that ends up in a cache path (a revision) is checked here against the hub's own form
before it is joined to a folder. And every path the cache writes is checked to lie inside the cache
root after resolution (symlinks included): the second fence, for a name form we did not foresee.

The forms:
- blob ids / ETags: a git blob sha1 (40 hex) or an LFS / Xet sha256 (64 hex), what the hub sends;
- revisions: a 40-hex commit, or a branch / tag name by git's `check-ref-format` rules (no `..`,
  no leading or trailing `/`, no `//`, no component starting with `.` or ending with `.lock`, no
  control characters, space, `~ ^ : ? * [ \\`, no `@{`, not `@`);
- file names: relative `/`-separated paths with no empty, `.` or `..` component, no backslash, no
  control character, valid UTF-8 (no lone surrogate: a file system name is bytes), at most 1024 bytes
  and at most 255 bytes a component (what a Linux file system takes for one name: a longer one
  would fail the cache write with ENAMETOOLONG; the hub's own limits are tighter).

Names are quoted in messages through `surgery.text.escape` (escaped, bounded): the hub chose them.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from ..text.diagnostics import Location, fail
from ..text.escape import quoted, shown
from .secrets import masked

BLOB_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # fullmatch only: `$` matches before a trailing newline
COMMIT = re.compile(r"[0-9a-f]{40}")  # fullmatch only
_REF_BAD_CHARS = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")
MAX_NAME_BYTES = 1024
MAX_COMPONENT_BYTES = 255  # NAME_MAX of ext4, xfs, btrfs, tmpfs


def revision_problem(rev: str) -> str | None:
    """Why `rev` is no revision the hub could have (None when it is one)."""
    if COMMIT.fullmatch(rev):
        return None
    if not rev or len(rev.encode()) > 255:
        return "is empty or longer than 255 bytes"
    if _REF_BAD_CHARS.search(rev):
        return "holds a space, a control character, a backslash or one of ~ ^ : ? * ["
    if rev == "@" or "@{" in rev:
        return "holds `@{` or is `@`"
    if rev.startswith("/") or rev.endswith("/") or "//" in rev:
        return "starts or ends with `/`, or holds `//`"
    if ".." in rev:
        return "holds `..`"
    for part in rev.split("/"):
        if part.startswith(".") or part.endswith(".lock"):
            return "has a component that starts with `.` or ends with `.lock`"
    if rev.endswith("."):
        return "ends with `.`"
    return None


def check_revision(rev: str, where: str) -> str:
    """A usage error (SRG062) for a revision that is no branch, tag or commit name, before any request."""
    why = revision_problem(rev)
    if why is not None:
        raise fail("SRG062", f"revision {quoted(rev)} {why}: not a branch, tag or commit name", Location(where),
                   hint="a revision is a branch or tag name by git's rules, or a 40-hex commit sha (`org/name@main`)")
    return rev


def file_name_problem(name: str) -> str | None:
    """Why `name` cannot be a file of a hub repo (None when it can)."""
    if not isinstance(name, str) or not name:
        return "is empty or not a string"
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid UTF-8 (a lone surrogate)"
    if len(encoded) > MAX_NAME_BYTES:
        return f"is longer than {MAX_NAME_BYTES} bytes"
    if any(len(part.encode("utf-8")) > MAX_COMPONENT_BYTES for part in name.split("/")):
        return f"has a component longer than the {MAX_COMPONENT_BYTES} bytes a file system takes for one name"
    if "\\" in name or any(ord(c) < 0x20 or ord(c) == 0x7f for c in name):
        return "holds a backslash or a control character"
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        return "is absolute"
    if any(part in ("", ".", "..") for part in name.split("/")):
        return "has an empty, `.` or `..` component"
    return None


def check_file_name(name: str, where: str, said_by: str) -> str:
    """SRG063 for a file name the hub (or a file it served) gave that is not a repo-relative path."""
    why = file_name_problem(name)
    if why is not None:
        raise fail("SRG063", f"{said_by} names a file {quoted(masked(name) if isinstance(name, str) else name)} that {why}: refused, nothing written",
                   Location(where), hint="the server at HF_ENDPOINT answers what no hub answers; check HF_ENDPOINT "
                   "(a mirror or proxy may be misbehaving or compromised)")
    return name


def check_blob_id(value: str, where: str, said_by: str) -> str:
    """SRG063 for an ETag / blob id that is not the hub's hex digest (it becomes a cache file name)."""
    if not isinstance(value, str) or not BLOB_ID.fullmatch(value):
        raise fail("SRG063", f"{said_by} is {quoted(masked(value) if isinstance(value, str) else value, 80)}, not a 40- or 64-hex digest: refused, nothing written",
                   Location(where), hint="the hub names blobs by their sha1 / sha256; the server at HF_ENDPOINT "
                   "answers what no hub answers (a mirror or proxy may be misbehaving or compromised)")
    return value


def check_commit(commit: str, where: str) -> str:
    """SRG063 for a commit the hub sent that is not 40 hex (it becomes a snapshot folder name)."""
    if not isinstance(commit, str) or not COMMIT.fullmatch(commit):
        raise fail("SRG063", f"the commit {quoted(masked(commit) if isinstance(commit, str) else commit, 80)} is not a 40-hex sha: refused, nothing written",
                   Location(where), hint="the server at HF_ENDPOINT answers what no hub answers")
    return commit


def inside(root: Path, path: Path, where: str) -> Path:
    """`path`, after checking that its folder resolves (symlinks included) to a place under `root`:
    the last fence before a write. Every write replaces the entry itself (a temporary file or link
    renamed over it), never writes through it, so the folder is what must be inside; the entry may
    be a link to anywhere (a planted one is replaced, not followed). SRG063 otherwise."""
    real_root = Path(os.path.realpath(root))
    real = Path(os.path.realpath(path.parent)) / path.name
    if path.name in ("", ".", "..") or real_root not in real.parents:
        raise fail("SRG063", f"refusing to write {shown(str(path), 300)}: it resolves to {shown(str(real), 300)}, "
                   f"outside the cache {shown(str(real_root), 300)}", Location(where),
                   hint="a name from the hub or a link inside the cache points outside it; "
                   "delete the cache folder of this repo and check HF_ENDPOINT")
    return path
