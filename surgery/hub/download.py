"""A whole model into the HF cache at its pinned commit, through our own bounded client.

`convert` and `apply --engine hf` copy or load the weights themselves, so they need every file.
huggingface_hub's `snapshot_download` did that with no bound of ours: for a 134 kB head, a weights
body that never ended wrote 2 GB into the cache, and a 1 MiB gzip bomb 990 MB (issue 54). Here every
file is fetched by `http.request` into a temporary file in `blobs/`, and:

- in bytes: at most a bound of our own, never the listing's word alone (issue 67: a listing that
  declared 1 TiB for a 134 kB head set both bounds, and 1 GiB was written before the refusal): a
  `.json` or tokenizer file its kind's limit, any other file SURGERY_HUB_DOWNLOAD_MAX_BYTES (default
  64 GiB), a listed size past it SRG785 before a byte is fetched; a safetensors file exactly the size
  its own header gives (`8 + header + the last tensor's end`), checked on the bytes seen as soon as
  the header is in (a few kB), SRG785 otherwise; and the whole must fit the free disk space. Within
  the bound, a longer body is cut and refused, a shorter one refused, identity encoding only (a
  compressed body is refused, never unpacked), so the cache never holds more than the bounded total;
- in content: the bytes must hash to the blob id the listing gives (sha256 for LFS / Xet files, the
  git blob sha1 for the others), or the temporary file is removed and nothing is linked;
- in time: the stall timeout on every read, and the whole download within
  `settings.download_deadline` of the bounded total (SURGERY_HUB_DOWNLOAD_DEADLINE; default
  SURGERY_HUB_DEADLINE plus one second per MiB), kept apart from the checks' total;
- interrupted: the temporary file (`blobs/.<blob id>.<pid>.<random>.incomplete`) is locked while it
  is written; SIGINT or SIGTERM removes it on the way out, and one a killed process left is removed
  by the next run (`cache.sweep_repo`: unlocked and its pid gone), never one a live download holds.

A file already cached at that commit with the listed size is not fetched again (unless --refresh).
The server's ETag names nothing here (the listing's verified id does); an ETag that is not a hex
digest still stops the download (SRG063), as it stops a check.
"""
from __future__ import annotations

import json
import os
import shutil
import struct
import time

from ..text.diagnostics import Location, fail
from ..text.escape import quoted
from . import cache, digests, http, names, settings


class _HashingSink:
    """The temporary file, hashing what is written; a retry (seek(0) + truncate) starts both again."""

    def __init__(self, fh, blob_id: str, size: int, watch: "_HeaderWatch | None" = None):
        self.fh, self.blob_id, self.declared, self.watch = fh, blob_id, size, watch
        self.hasher = digests.Hasher(blob_id, size)

    def write(self, data: bytes) -> None:
        if self.watch is not None:
            self.watch.see(data)
        self.fh.write(data)
        self.hasher.update(data)

    def seek(self, pos: int) -> None:
        self.fh.seek(pos)

    def truncate(self) -> None:
        self.fh.truncate()
        self.hasher = digests.Hasher(self.blob_id, self.declared)
        if self.watch is not None:
            self.watch = _HeaderWatch(self.watch.name, self.watch.declared, self.watch.where)


def _plan(src) -> tuple[dict[str, tuple[int, str]], int]:
    """name -> (declared size, blob id) of every file, and their total; SRG055 when the listing does
    not give both for a file (its download could not be bounded or verified)."""
    plan = {}
    for name in src.names():
        entry = src.files.get(name) or {}
        size, blob = entry.get("size"), entry.get("blob")
        if not isinstance(size, int) or size < 0 or not isinstance(blob, str) or not names.BLOB_ID.fullmatch(blob):
            raise fail("SRG055", f"{src.repo_id}: the file list gives no size and blob id for {quoted(name)}: its "
                       "download could not be bounded or verified", Location(src.location(name)))
        plan[name] = (size, blob)
    return plan, sum(size for size, _ in plan.values())


def download(src) -> str:
    """Every file of `src` (a HubSource whose file list is the hub's) into the HF cache; the folder."""
    where = src.location()
    if not src.listed:
        raise fail("SRG060", f"the file list of {src.repo_id}@{src.commit[:12]} is not known (only the cache's "
                   "snapshot was read), so the download cannot be bounded", Location(where),
                   hint=f"run it once online without HF_HUB_OFFLINE, or `hf download {src.repo_id} --revision "
                        f"{src.commit}`")
    plan, _ = _plan(src)
    todo = {name: entry for name, entry in plan.items() if settings.refresh() or not src.cached_whole(name)}
    for name, (size, _blob) in sorted(todo.items()):
        bound, why = _own_bound(name)
        if size > bound:
            raise fail("SRG785", f"the file list gives {name} {size} bytes, more than {why} ({bound} bytes): "
                       "refused before any byte of it was fetched", Location(src.location(name)),
                       hint="a misbehaving server at HF_ENDPOINT, or SURGERY_HUB_DOWNLOAD_MAX_BYTES for a larger "
                            "file")
    total = sum(size for size, _ in todo.values())
    _check_disk(src, total)
    seconds = settings.download_deadline(total)
    budget = http.Budget(time.monotonic() + seconds,
                         f"{seconds:g} s (SURGERY_HUB_DOWNLOAD_DEADLINE, the whole download of {total} bytes)",
                         "a slow server: SURGERY_HUB_DOWNLOAD_DEADLINE sets the time a whole download may take "
                         "(default SURGERY_HUB_DEADLINE plus 1 s per MiB)")
    for name, (size, blob) in sorted(todo.items()):
        _fetch(src, name, size, blob, budget)
    return str(settings.hub_cache() / cache.repo_folder(src.repo_id) / "snapshots" / src.commit)


def _fetch(src, name: str, size: int, blob: str, budget: http.Budget) -> None:
    where = src.location(name)
    fd, tmp = cache.blob_tmp(src.repo_id, blob, where)
    try:
        with os.fdopen(fd, "w+b") as fh:
            watch = _HeaderWatch(name, size, where) if name.endswith(".safetensors") else None
            sink = _HashingSink(fh, blob, size, watch)
            try:
                resp = http.request(src.url(name), what=f"{src.repo_id}/{name}", where=where, max_bytes=size,
                                    headers=src.request_headers(), kind="download", sink=sink, budget=budget)
            except http.EntryMissing:
                raise fail("SRG055", f"the file list names {quoted(name)}, and the hub has no such file at commit "
                           f"{src.commit[:12]}", Location(where)) from None
            except OSError as exc:  # writing the temporary file: ENOSPC, EIO ...
                raise cache.write_error(exc, tmp, where) from None
            src.check_answer(resp, where)
            try:
                fh.flush()
            except OSError as exc:
                raise cache.write_error(exc, tmp, where) from None
            # renamed into place while still open (and locked): a sweep never takes it for a dead one's
            cache.store_blob(src.repo_id, src.hub.revision, src.commit, name, tmp, sink.hasher)
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


# what a file of each kind may be, whatever the listing says (the checks' own read limits)
_KIND_LIMITS = ((".json", 64 << 20, "the 64 MiB a JSON file may have"),
                ("tokenizer.model", 64 << 20, "the 64 MiB a tokenizer file may have"),
                (".txt", 64 << 20, "the 64 MiB a text file may have"),
                (".md", 16 << 20, "the 16 MiB a model card may have"))
_MAX_HEADER = 16 << 20


def _own_bound(name: str) -> tuple[int, str]:
    """(the most bytes `name` may have by our own bounds, what that bound is); a safetensors file is
    held to its own header as its bytes are seen too (`_HeaderWatch`)."""
    for suffix, limit, why in _KIND_LIMITS:
        if name.endswith(suffix):
            return limit, why
    return settings.download_max_bytes(), "SURGERY_HUB_DOWNLOAD_MAX_BYTES"


class _HeaderWatch:
    """A safetensors file's size by its own header, read from the bytes as they arrive: 8 + the header
    + the end of its last tensor. Once the header is in (a few kB), a file the listing declares at
    another size is refused (SRG785) before any more of it is written (issue 67)."""

    def __init__(self, name: str, declared: int, where: str):
        self.name, self.declared, self.where = name, declared, where
        self.head = bytearray()
        self.done = False

    def see(self, data: bytes) -> None:
        if self.done:
            return
        self.head += data[: 8 + _MAX_HEADER - len(self.head)]
        if len(self.head) < 8:
            return
        (n,) = struct.unpack("<Q", bytes(self.head[:8]))
        if n == 0 or n > _MAX_HEADER:
            raise self._refuse(f"its header length {n} is impossible")
        if len(self.head) < 8 + n:
            return
        self.done = True
        try:
            header = json.loads(bytes(self.head[8:8 + n]).decode("utf-8"), parse_constant=_no_constant)
            ends = [e["data_offsets"][1] for k, e in header.items() if k != "__metadata__"]
        except (ValueError, UnicodeDecodeError, RecursionError, TypeError, KeyError, IndexError, AttributeError):
            raise self._refuse("its header does not parse") from None
        if not all(isinstance(e, int) and not isinstance(e, bool) and 0 <= e < 1 << 62 for e in ends):
            raise self._refuse("its header gives an offset that is no size")
        size = 8 + n + max(ends, default=0)
        self.head = bytearray()
        if size != self.declared:
            raise fail("SRG785", f"the file list gives {self.name} {self.declared} bytes, and its own header "
                       f"{size}: refused after its first {8 + n} bytes", Location(self.where),
                       hint="a misbehaving server at HF_ENDPOINT (the listing and the file disagree)")

    def _refuse(self, why: str):
        return fail("SRG785", f"{self.name}: {why}, so its download cannot be bounded by its own header",
                    Location(self.where), hint="a damaged or misbehaving file at HF_ENDPOINT")


def _no_constant(name: str):
    raise ValueError(name)


def _check_disk(src, total: int) -> None:
    """SRG785 when the bounded total cannot fit the cache's free space (nothing is fetched)."""
    folder = settings.hub_cache()
    while not os.path.isdir(folder) and folder.parent != folder:
        folder = folder.parent
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return
    if total > free:
        raise fail("SRG785", f"the download of {src.repo_id}@{src.commit[:12]} needs {total} bytes and the file "
                   f"system of {folder} has {free} free: nothing fetched", Location(src.location()),
                   hint="free space, or point HF_HOME at another file system")
