"""The Hugging Face cache, in huggingface_hub's layout, plus our store of byte ranges.

Whole files (configs, tokenizer files, the safetensors index, and every file `download()` fetches)
go where huggingface_hub puts them: `<HF_HUB_CACHE>/models--org--name/blobs/<blob id>`, a relative
symlink (a copy where the file system has none) at `snapshots/<commit>/<name>`, `refs/<revision>`
holding the commit, and `.no_exist/<commit>/<name>` for a file the repo does not have. So
transformers, vLLM and `hf` find them, and we find theirs (tests/hub/test_hub_oracle.py:
`try_to_load_from_cache` and `scan_cache_dir` read what we write, we read what `hf_hub_download`
wrote). The lookups are ours, not huggingface_hub's `try_to_load_from_cache`: that one reads
`refs/<revision>` whole with no bound (a link to /dev/zero: MemoryError) and blocks on a FIFO.

Weight files are never fetched whole by the checks: the ranges read from them (a header, the d2t
slice) are kept in `<ranges_cache>/models--org--name/<commit>/ranges/<file key>/<start>-<end>`, keyed
by the commit so they never go stale, next to `listing.json` (the repo's file list at that commit).
The file key is the file name quoted into one path component (`a%2Fb.safetensors`; a sha256 for a
name too long for one), so no file name can collide with `listing.json`, with another file's
ranges, or exceed a file system's name limit.

What the cache guarantees (issue 54):
- a snapshot link points only at a blob whose bytes hash to the id the listing gives for that file
  (`digests`), so one ETag sent for every file cannot link the index to config.json's blob;
- `.no_exist` markers are written only for the hub's own answer (the caller decides: `http`), and a
  file stored at a commit removes the marker that said it was missing;
- every read is of a regular file, bounded (`entries`): a FIFO, a device or a link loop is SRG066;
- every write is a temporary file renamed into place (an interrupted run leaves no half-written file
  under a name that is read), and a write the file system refuses (ENOSPC, EROFS, ENAMETOOLONG...)
  is SRG065 with the path, the temporary file removed.

Every write site takes its names through `names` (blob ids, commits, revisions and file names in the
hub's own form) and its final path through `names.inside` (its folder under the cache root once
resolved, symlinks included): what a hostile hub answers never becomes a path outside the cache.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

from ..text.diagnostics import Location, SurgeryError, fail
from ..text.escape import shown
from . import digests, entries, names, settings

COMMIT = names.COMMIT
MAX_REF_BYTES = 4096  # a ref holds a 40-hex commit (and maybe a newline)
MAX_LISTING_BYTES = 64 << 20  # our own listing.json: smaller than the 16 MiB model info it came from, with room
MAX_RANGE_FILES = 4096  # stored ranges looked at for one file (a real run stores two or three)
MAX_RANGE_BYTES = 64 << 20  # no stored range is larger (a header range is at most 16 MiB)
_KEY_BYTES = 200  # a quoted file name longer than this is keyed by its sha256


def repo_folder(repo_id: str) -> str:
    return "models--" + repo_id.replace("/", "--")


def _hub_path(repo_id: str, *parts: str) -> Path:
    """A path under the repo's folder of the HF cache, fenced (SRG063 outside the cache root)."""
    root = settings.hub_cache()
    return names.inside(root, root.joinpath(repo_folder(repo_id), *parts), repo_id)


def _ranges_path(repo_id: str, commit: str, *parts: str) -> Path:
    root = settings.ranges_cache()
    return names.inside(root, root.joinpath(repo_folder(repo_id), names.check_commit(commit, repo_id), *parts), repo_id)


def file_key(name: str) -> str:
    """One path component for a file's ranges: the name quoted (`/` too), or `#sha256-<hex>` when that
    is longer than `_KEY_BYTES` (`#` is always quoted, so the two forms never meet)."""
    key = urllib.parse.quote(name, safe="")
    if len(key) <= _KEY_BYTES:
        return key
    return "#sha256-" + hashlib.sha256(name.encode("utf-8")).hexdigest()


# -- writing ------------------------------------------------------------------------------------------

_WRITE_HINTS = {
    errno.ENOSPC: "the disk (or its inodes) is full: free space (df -h, df -i), or point HF_HOME at another "
                  "file system",
    errno.EROFS: "the cache is on a read-only file system: point HF_HOME (or HF_HUB_CACHE and SURGERY_HUB_CACHE) "
                 "at a writable folder; with every file already cached, HF_HUB_OFFLINE=1 reads without writing",
    errno.ENAMETOOLONG: "the cache path is too long for the file system: a shorter HF_HOME",
}
_WRITE_HINTS[errno.EACCES] = _WRITE_HINTS[errno.EPERM] = _WRITE_HINTS[errno.EROFS]
_WRITE_HINTS[errno.EDQUOT] = _WRITE_HINTS[errno.ENOSPC]


def write_error(exc: OSError, path: Path, where: str) -> SurgeryError:
    """SRG065: the file system refused a cache write; the path, the errno and what to do."""
    name = errno.errorcode.get(exc.errno or 0, "")
    meaning = os.strerror(exc.errno) if exc.errno else str(exc)
    shown_path = shown(os.fspath(exc.filename) if exc.filename is not None else str(path), 300)
    return fail("SRG065", f"cannot write to the cache at {shown_path}: {meaning}{f' ({name})' if name else ''}; "
                "nothing half-written is left", Location(where),
                hint=_WRITE_HINTS.get(exc.errno or 0, "fix the file system error named, or point HF_HOME at "
                                      "another folder"))


@contextlib.contextmanager
def _writing(path: Path, where: str):
    try:
        yield
    except OSError as exc:
        raise write_error(exc, path, where) from None


def _make_folder(folder: Path) -> None:
    """`folder` and its parents, where an entry that is no folder stands in the way inside the cache
    (a file, a FIFO, a dangling link planted where the layout has a folder) is removed first: the
    cache heals instead of failing on every later run. A link to a folder is kept (the fence has
    checked where it leads); nothing outside the cache roots is touched."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        return
    except (FileExistsError, NotADirectoryError):
        pass
    roots = [Path(os.path.realpath(settings.hub_cache())), Path(os.path.realpath(settings.ranges_cache()))]
    for part in reversed([folder, *folder.parents]):
        if not any(r in part.parents for r in roots):
            continue
        if os.path.lexists(part) and not os.path.isdir(part):
            os.unlink(part)
            break
    folder.mkdir(parents=True, exist_ok=True)


def _clear_for(path: Path) -> None:
    """A real folder where a file or link must go (planted, or left by another tool) is removed: a
    rename cannot replace it. Files, links, FIFOs are replaced by the rename itself."""
    if os.path.isdir(path) and not os.path.islink(path):  # os.path: False on any error (a link too long)
        shutil.rmtree(path)


def _write_atomic(path: Path, data: bytes, where: str = "") -> None:
    """Callers pass a fenced path (`_hub_path` / `_ranges_path`)."""
    with _writing(path, where or str(path)):
        _make_folder(path.parent)
        _sweep(path.parent)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:64]}.{os.getpid()}.", suffix=".incomplete", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.chmod(tmp, 0o644)
            _clear_for(path)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


def _holds(path: Path, data: bytes) -> bool:
    """Whether `path` is a regular file holding exactly `data` (anything else: rewrite it)."""
    try:
        entry = entries.read_regular(path, len(data) + 1, str(path))
    except SurgeryError:
        return False
    return entry is not None and entry.data == data


# -- the HF cache -------------------------------------------------------------------------------------

def cached_file(repo_id: str, name: str, commit: str) -> str | bool | None:
    """The path of the cached file at `commit`, False when the cache records that the repo has no
    such file there (`.no_exist`), None when the cache does not know. huggingface_hub's answer
    (`try_to_load_from_cache` with a commit), looked up without reading anything: a snapshot entry
    that is a dangling link is not cached; one that is not a regular file is refused when read."""
    if names.file_name_problem(name) is not None or not COMMIT.fullmatch(commit):
        return None
    base = settings.hub_cache() / repo_folder(repo_id)
    try:
        if os.path.isfile(base / ".no_exist" / commit / name):
            return False
        path = base / "snapshots" / commit / name
        return str(path) if os.path.exists(path) else None
    except (OSError, ValueError):
        return None


def missing_marker(repo_id: str, commit: str, name: str) -> bool:
    try:
        return os.path.isfile(settings.hub_cache() / repo_folder(repo_id) / ".no_exist" / commit / name)
    except (OSError, ValueError):
        return False


def cached_commit(repo_id: str, revision: str | None) -> str | None:
    """The commit a revision points to in the cache (refs/<revision>, or the sha itself when that
    snapshot exists); None when the cache has never seen it. SRG066 for a ref that is no regular file."""
    base = settings.hub_cache() / repo_folder(repo_id)
    rev = names.check_revision(revision or "main", repo_id)
    if COMMIT.fullmatch(rev):
        known = os.path.isdir(base / "snapshots" / rev) or os.path.lexists(ranges_dir(repo_id, rev) / "listing.json")
        return rev if known else None
    entry = entries.read_regular(base / "refs" / rev, MAX_REF_BYTES, f"{repo_id}@{rev}")
    if entry is None:
        return None
    try:
        sha = entry.data.decode("ascii").strip()
    except UnicodeDecodeError:
        return None
    return sha if COMMIT.fullmatch(sha) else None


def snapshot_names(repo_id: str, commit: str) -> list[str]:
    snap = settings.hub_cache() / repo_folder(repo_id) / "snapshots" / commit
    if not os.path.isdir(snap):
        return []
    found = []
    for p in snap.rglob("*"):
        rel = str(p.relative_to(snap)).replace(os.sep, "/")
        if names.file_name_problem(rel) is None and os.path.isfile(p):  # os.path: False on any error
            found.append(rel)
    return sorted(found)


# -- what a killed process left ---------------------------------------------------------------------------
# Every temporary file of ours is `.<name>.<pid>.<random>.incomplete` (a link's `.<name>.<pid>.<thread>`);
# a download's is also locked (flock) while it is written. A process killed mid-write (SIGKILL, a
# power cut) leaves one behind; the next run that writes in that folder, or opens the repo, removes it
# when no process holds its lock and its pid is gone (issue 67). huggingface_hub's own partial files
# (`<etag>.incomplete`, no leading dot) are never touched, and neither is one of an older version
# (no pid in its name) younger than LEGACY_AGE_S.
_OURS = re.compile(r"\..+\.incomplete")
_STAMP = re.compile(r".*\.([0-9]{1,10})\.[A-Za-z0-9_]{1,24}\.incomplete")
LEGACY_AGE_S = 3600
_SWEPT: set[str] = set()
_SWEPT_LOCK = threading.Lock()


def _lock(fd: int) -> bool:
    """An exclusive lock on an open temporary file, without waiting; False when another holds it."""
    try:
        import fcntl  # POSIX only (tests/test_architecture.py LAZY_DEPENDENCIES)
    except ImportError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _stale(path: Path, now: float) -> bool:
    """Whether the temporary file `path` is a dead process's: nobody holds its lock, and its pid is
    gone (or, with no pid in its name, it is older than LEGACY_AGE_S)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return os.path.islink(path)  # a link planted under one of our temporary names: not ours, removed
    try:
        if not _lock(fd):
            return False
        stamp = _STAMP.fullmatch(path.name)
        if stamp is not None:
            return not _alive(int(stamp.group(1)))
        return now - os.fstat(fd).st_mtime > LEGACY_AGE_S
    finally:
        os.close(fd)


def _sweep(folder: Path, force: bool = False) -> list[str]:
    """Remove the temporary files a killed process left in `folder` (once a process, unless `force`);
    the names removed."""
    key = os.path.realpath(folder)
    with _SWEPT_LOCK:
        if key in _SWEPT and not force:
            return []
        _SWEPT.add(key)
    removed = []
    try:
        listed = os.listdir(folder) if os.path.isdir(folder) else []
    except OSError:
        return removed
    now = time.time()
    for name in listed[:100_000]:
        if not _OURS.fullmatch(name):
            continue
        path = Path(folder) / name
        if _stale(path, now):
            with contextlib.suppress(OSError):
                os.unlink(path)
                removed.append(name)
    return removed


def sweep_repo(repo_id: str) -> list[str]:
    """`sweep` of the repo's blob folder (where a download's partial files are): when a repo is opened."""
    try:
        folder = _hub_path(repo_id, "blobs", "x").parent
    except SurgeryError:
        return []
    return _sweep(folder)


def store_file(repo_id: str, revision: str | None, commit: str, name: str, data: bytes, blob_id: str) -> Path:
    """Put a fetched file into the HF cache the way huggingface_hub does; returns the snapshot path.
    `blob_id` must be the file's id (git blob sha1 or sha256) and `data` must hash to it: a blob is
    never stored under another file's id. A `.no_exist` marker for the file at that commit is removed."""
    where = f"{repo_id}/{name}"
    names.check_blob_id(blob_id, where, "the blob id")
    names.check_file_name(name, where, "the file list")
    names.check_commit(commit, where)
    names.check_revision(revision or "main", where)  # every name checked before the first write
    if not digests.matches(blob_id, data):
        raise fail("SRG055", f"{where}: the bytes served do not hash to the blob id {blob_id[:12]} listed for "
                   "the file; not stored in the cache", Location(where),
                   hint="a misbehaving server at HF_ENDPOINT (the hub names every file by its content)")
    blob = _hub_path(repo_id, "blobs", blob_id)
    if settings.refresh() or not _holds(blob, data):
        _write_atomic(blob, data, where)
    return _link(repo_id, revision, commit, name, blob)


def store_blob(repo_id: str, revision: str | None, commit: str, name: str, tmp: Path, hasher: digests.Hasher) -> Path:
    """A downloaded file, streamed into `tmp` (from `blob_tmp`) while `hasher` hashed it: renamed to
    `blobs/<blob id>` and linked when it matched the id and size the listing gives; else SRG055 and
    `tmp` removed. `tmp` must be in the blob folder (SRG063 otherwise, and it is not touched)."""
    where = f"{repo_id}/{name}"
    names.check_blob_id(hasher.blob_id, where, "the blob id")
    names.check_file_name(name, where, "the file list")
    names.check_commit(commit, where)
    names.check_revision(revision or "main", where)
    blob = _hub_path(repo_id, "blobs", hasher.blob_id)
    if Path(os.path.realpath(Path(tmp).parent)) != Path(os.path.realpath(blob.parent)):
        raise fail("SRG063", f"{where}: a downloaded file {shown(str(tmp), 300)} outside the blob folder",
                   Location(where))
    try:
        if not hasher.matches():
            raise fail("SRG055", f"{where}: {hasher.size} bytes served that do not hash to the blob id "
                       f"{hasher.blob_id[:12]} ({hasher.declared} bytes) the listing gives; not stored",
                       Location(where), hint="a misbehaving server at HF_ENDPOINT, or a cut connection: run again")
        with _writing(blob, where):
            os.chmod(tmp, 0o644)
            _clear_for(blob)
            os.replace(tmp, blob)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return _link(repo_id, revision, commit, name, blob)


def blob_tmp(repo_id: str, blob_id: str, where: str) -> tuple[int, Path]:
    """A new temporary file in `blobs/` for the download of `blob_id` (fd, path): `store_blob` renames
    it into place."""
    names.check_blob_id(blob_id, where, "the blob id")
    folder = _hub_path(repo_id, "blobs", blob_id).parent
    with _writing(folder, where):
        _make_folder(folder)
        _sweep(folder)
        fd, tmp = tempfile.mkstemp(prefix=f".{blob_id}.{os.getpid()}.", suffix=".incomplete", dir=folder)
        _lock(fd)
    return fd, Path(tmp)


def _link(repo_id: str, revision: str | None, commit: str, name: str, blob: Path) -> Path:
    where = f"{repo_id}/{name}"
    link = _hub_path(repo_id, "snapshots", commit, name)
    # one name per process and thread: the draft and the target of an MTP pair are the same repo, read
    # side by side, and two threads linking the same file must not remove each other's link in flight
    tmp = link.parent / f".{link.name[:64]}.{os.getpid()}.{threading.get_ident()}.incomplete"
    with _writing(link, where):
        _make_folder(link.parent)
        _sweep(link.parent)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        try:
            try:
                os.symlink(os.path.relpath(blob, link.parent), tmp)
            except OSError as exc:  # no symlinks here: a copy, as huggingface_hub does
                if exc.errno in (errno.ENOSPC, errno.EROFS, errno.ENAMETOOLONG):
                    raise
                shutil.copyfile(blob, tmp)
            _clear_for(link)
            os.replace(tmp, link)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    forget_missing(repo_id, commit, name)
    store_ref(repo_id, revision, commit)
    return link


def forget_missing(repo_id: str, commit: str, name: str) -> None:
    """Remove the `.no_exist` marker of a file the repo has at `commit` after all (a stored file, or
    the listing of a --refresh contradicts it)."""
    marker = _hub_path(repo_id, ".no_exist", names.check_commit(commit, repo_id), names.check_file_name(
        name, f"{repo_id}/{name}", "the file list"))
    with _writing(marker, f"{repo_id}/{name}"):
        try:
            os.unlink(marker)
        except (FileNotFoundError, NotADirectoryError):  # no marker (or no marker folder) there
            pass
        except IsADirectoryError:
            shutil.rmtree(marker)


def store_ref(repo_id: str, revision: str | None, commit: str) -> None:
    rev = revision or "main"
    if rev == commit:
        return
    names.check_revision(rev, repo_id)
    ref = _hub_path(repo_id, "refs", rev)
    if _holds(ref, commit.encode()):
        return
    _write_atomic(ref, commit.encode(), f"{repo_id}@{rev}")


def store_missing(repo_id: str, revision: str | None, commit: str, name: str) -> None:
    """huggingface_hub's record that the repo has no such file at that commit: only for the hub's own
    answer (404 with `X-Error-Code: EntryNotFound` and that commit, see `http.EntryMissing`)."""
    names.check_file_name(name, f"{repo_id}/{name}", "the request")
    _write_atomic(_hub_path(repo_id, ".no_exist", names.check_commit(commit, repo_id), name), b"", f"{repo_id}/{name}")
    store_ref(repo_id, revision, commit)


# -- our ranges ---------------------------------------------------------------------------------------

def ranges_dir(repo_id: str, commit: str) -> Path:
    return settings.ranges_cache() / repo_folder(repo_id) / commit


def load_listing(repo_id: str, commit: str) -> dict | None:
    """The file list stored at `commit`; None when there is none or it is damaged (JSON, shape).
    SRG066 when `listing.json` is no regular file."""
    entry = entries.read_regular(ranges_dir(repo_id, commit) / "listing.json", MAX_LISTING_BYTES,
                                 f"{repo_id}@{commit[:12]}")
    if entry is None or entry.size > MAX_LISTING_BYTES:
        return None
    try:
        data = json.loads(entry.data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not (isinstance(data, dict) and isinstance(data.get("files"), dict)):
        return None
    files = data["files"]
    if any(names.file_name_problem(n) is not None or not isinstance(v, dict) for n, v in files.items()):
        return None  # not what store_listing writes: asked again online, refused offline
    return data


def store_listing(repo_id: str, commit: str, listing: dict) -> None:
    _write_atomic(_ranges_path(repo_id, commit, "listing.json"), json.dumps(listing, sort_keys=True).encode(),
                  f"{repo_id}@{commit[:12]}")


_RANGE = re.compile(r"([0-9]{1,19})-([0-9]{1,19})(-eof)?")


def get_range(repo_id: str, commit: str, name: str, start: int, length: int) -> bytes | None:
    """Bytes [start, start+length) from a stored range that covers them (or reaches the file's end).
    A stored range is read only when it is a regular file of exactly the size its name says."""
    if settings.refresh():
        return None
    where = f"{repo_id}/{name}"
    names.check_file_name(name, where, "the file list")
    folder = _ranges_path(repo_id, commit, "ranges", file_key(name))
    try:
        listed = sorted(os.listdir(folder))[:MAX_RANGE_FILES] if os.path.isdir(folder) else []
    except OSError:
        return None
    for entry_name in listed:
        m = _RANGE.fullmatch(entry_name)
        if not m:
            continue
        lo, hi, eof = int(m.group(1)), int(m.group(2)), bool(m.group(3))
        if hi < lo or hi - lo > MAX_RANGE_BYTES:
            continue
        if lo <= start and (start + length <= hi or (eof and start <= hi)):
            entry = entries.read_regular(folder / entry_name, hi - lo + 1, where)
            if entry is None or entry.size != hi - lo or len(entry.data) != hi - lo:
                continue  # not what its name says: ignored, fetched again
            return entry.data[start - lo:start - lo + length]
    return None


def drop_ranges(repo_id: str, commit: str, name: str) -> str:
    """Remove every stored range of `name` at `commit` (they failed the header checks); the folder."""
    names.check_file_name(name, f"{repo_id}/{name}", "the file list")
    folder = _ranges_path(repo_id, commit, "ranges", file_key(name))
    with _writing(folder, f"{repo_id}/{name}"):
        if os.path.isdir(folder) and not os.path.islink(folder):
            shutil.rmtree(folder)
        elif os.path.lexists(folder):
            os.unlink(folder)
    return str(folder)


def store_range(repo_id: str, commit: str, name: str, start: int, data: bytes, at_eof: bool) -> None:
    end = start + len(data)
    names.check_file_name(name, f"{repo_id}/{name}", "the file list")
    _write_atomic(_ranges_path(repo_id, commit, "ranges", file_key(name), f"{start}-{end}{'-eof' if at_eof else ''}"),
                  data, f"{repo_id}/{name}")
