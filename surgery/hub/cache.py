"""The Hugging Face cache, read through huggingface_hub's own functions and written in its layout,
plus our store of byte ranges.

Whole files (configs, tokenizer files, the safetensors index) go where huggingface_hub puts them:
`<HF_HUB_CACHE>/models--org--name/blobs/<etag>`, a relative symlink (a copy where the file system has
none) at `snapshots/<commit>/<name>`, `refs/<revision>` holding the commit, and `.no_exist/<commit>/<name>`
for a file the repo does not have. So transformers, vLLM and `hf` find them, and we find theirs
(tests/hub/test_cache_oracle.py: `try_to_load_from_cache` and `scan_cache_dir` read what we write).

Weight files are never fetched whole: the ranges read from them (a header, the d2t slice) are kept in
`<ranges_cache>/models--org--name/<commit>/<name>/<start>-<end>`, keyed by the commit so they never go
stale, next to `listing.json` (the repo's file list at that commit). Every write is a temporary file
renamed into place: an interrupted run leaves no half-written file under a name that is read.

Every write site takes its names through `names` (blob ids, commits, revisions and file names in the
hub's own form) and its final path through `names.inside` (under the cache root once resolved,
symlinks included): what a hostile hub answers never becomes a path outside the cache.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from . import names, settings

COMMIT = names.COMMIT


def repo_folder(repo_id: str) -> str:
    return "models--" + repo_id.replace("/", "--")


def _hub_path(repo_id: str, *parts: str) -> Path:
    """A path under the repo's folder of the HF cache, fenced (SRG063 outside the cache root)."""
    root = settings.hub_cache()
    return names.inside(root, root.joinpath(repo_folder(repo_id), *parts), repo_id)


def _ranges_path(repo_id: str, commit: str, *parts: str) -> Path:
    root = settings.ranges_cache()
    return names.inside(root, root.joinpath(repo_folder(repo_id), names.check_commit(commit, repo_id), *parts), repo_id)


def _write_atomic(path: Path, data: bytes) -> None:
    """Callers pass a fenced path (`_hub_path` / `_ranges_path`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".incomplete", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# -- the HF cache -------------------------------------------------------------------------------------

def cached_file(repo_id: str, name: str, revision: str) -> str | bool | None:
    """huggingface_hub's answer: the path of the cached file, False when the cache knows the repo has
    no such file at that revision (.no_exist), None when the cache does not know."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, name, cache_dir=str(settings.hub_cache()), revision=revision)
    except ValueError:  # huggingface_hub refuses the file name (e.g. `..`)
        return None
    if found is None:
        return None
    return found if isinstance(found, str) else False  # its `_CACHED_NO_EXIST` marker


def cached_commit(repo_id: str, revision: str | None) -> str | None:
    """The commit a revision points to in the cache (refs/<revision>, or the sha itself when that
    snapshot exists); None when the cache has never seen it."""
    base = settings.hub_cache() / repo_folder(repo_id)
    rev = names.check_revision(revision or "main", repo_id)
    if COMMIT.match(rev):
        return rev if (base / "snapshots" / rev).is_dir() or (ranges_dir(repo_id, rev) / "listing.json").is_file() \
            else None
    ref = base / "refs" / rev
    try:
        sha = ref.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return sha if COMMIT.match(sha) else None


def snapshot_names(repo_id: str, commit: str) -> list[str]:
    snap = settings.hub_cache() / repo_folder(repo_id) / "snapshots" / commit
    if not snap.is_dir():
        return []
    return sorted(str(p.relative_to(snap)).replace(os.sep, "/") for p in snap.rglob("*") if p.is_file())


def store_file(repo_id: str, revision: str | None, commit: str, name: str, data: bytes, etag: str) -> Path:
    """Put a fetched file into the HF cache the way huggingface_hub does; returns the snapshot path."""
    where = f"{repo_id}/{name}"
    names.check_blob_id(etag, where, "the ETag / blob id")
    names.check_file_name(name, where, "the file list")
    names.check_commit(commit, where)
    names.check_revision(revision or "main", where)  # every name checked before the first write
    blob = _hub_path(repo_id, "blobs", etag)
    if settings.refresh() or not blob.is_file():
        _write_atomic(blob, data)
    link = _hub_path(repo_id, "snapshots", names.check_commit(commit, where), name)
    link.parent.mkdir(parents=True, exist_ok=True)
    tmp = link.parent / f".{link.name}.{os.getpid()}.incomplete"
    with contextlib.suppress(OSError):
        os.unlink(tmp)
    try:
        os.symlink(os.path.relpath(blob, link.parent), tmp)
    except OSError:  # no symlinks here: a copy, as huggingface_hub does
        shutil.copyfile(blob, tmp)
    os.replace(tmp, link)
    store_ref(repo_id, revision, commit)
    return link


def store_ref(repo_id: str, revision: str | None, commit: str) -> None:
    rev = revision or "main"
    if rev == commit:
        return
    names.check_revision(rev, repo_id)
    ref = _hub_path(repo_id, "refs", rev)
    try:
        if ref.read_text(encoding="utf-8").strip() == commit:
            return
    except (OSError, UnicodeDecodeError):
        pass
    _write_atomic(ref, commit.encode())


def store_missing(repo_id: str, revision: str | None, commit: str, name: str) -> None:
    """huggingface_hub's record that the repo has no such file at that commit."""
    names.check_file_name(name, f"{repo_id}/{name}", "the request")
    _write_atomic(_hub_path(repo_id, ".no_exist", names.check_commit(commit, repo_id), name), b"")
    store_ref(repo_id, revision, commit)


# -- our ranges ---------------------------------------------------------------------------------------

def ranges_dir(repo_id: str, commit: str) -> Path:
    return settings.ranges_cache() / repo_folder(repo_id) / commit


def load_listing(repo_id: str, commit: str) -> dict | None:
    try:
        data = json.loads((ranges_dir(repo_id, commit) / "listing.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("files"), dict) else None


def store_listing(repo_id: str, commit: str, listing: dict) -> None:
    _write_atomic(_ranges_path(repo_id, commit, "listing.json"), json.dumps(listing, sort_keys=True).encode())


def get_range(repo_id: str, commit: str, name: str, start: int, length: int) -> bytes | None:
    """Bytes [start, start+length) from a stored range that covers them (or reaches the file's end)."""
    if settings.refresh():
        return None
    names.check_file_name(name, f"{repo_id}/{name}", "the file list")
    folder = _ranges_path(repo_id, commit, name)
    if not folder.is_dir():
        return None
    for f in folder.iterdir():
        m = re.fullmatch(r"(\d+)-(\d+)(-eof)?", f.name)
        if not m:
            continue
        lo, hi, eof = int(m.group(1)), int(m.group(2)), bool(m.group(3))
        if lo <= start and (start + length <= hi or (eof and start <= hi)):
            try:
                data = f.read_bytes()
            except OSError:
                continue
            if len(data) != hi - lo:
                continue  # not what its name says: ignored, fetched again
            return data[start - lo:start - lo + length]
    return None


def store_range(repo_id: str, commit: str, name: str, start: int, data: bytes, at_eof: bool) -> None:
    end = start + len(data)
    names.check_file_name(name, f"{repo_id}/{name}", "the file list")
    _write_atomic(_ranges_path(repo_id, commit, name, f"{start}-{end}{'-eof' if at_eof else ''}"), data)
