"""A whole model into the HF cache at its pinned commit, through our own bounded client.

`convert` and `apply --engine hf` copy or load the weights themselves, so they need every file.
huggingface_hub's `snapshot_download` did that with no bound of ours: for a 134 kB head, a weights
body that never ended wrote 2 GB into the cache, and a 1 MiB gzip bomb 990 MB (issue 54). Here every
file is fetched by `http.request` into a temporary file in `blobs/`, and:

- in bytes: at most the size the listing declares for the file (a longer body is cut and refused,
  a shorter one refused), identity encoding only (a compressed body is refused, never unpacked), so
  the cache never holds more than the listing's total;
- in content: the bytes must hash to the blob id the listing gives (sha256 for LFS / Xet files, the
  git blob sha1 for the others), or the temporary file is removed and nothing is linked;
- in time: the stall timeout on every read, and the whole download within
  `settings.download_deadline` (SURGERY_HUB_DOWNLOAD_DEADLINE; default SURGERY_HUB_DEADLINE plus one
  second per declared MiB), kept apart from the checks' total.

A file already cached at that commit with the listed size is not fetched again (unless --refresh).
The server's ETag names nothing here (the listing's verified id does); an ETag that is not a hex
digest still stops the download (SRG063), as it stops a check.
"""
from __future__ import annotations

import os
import time

from ..diagnostics import Location, fail
from ..shown import quoted
from . import cache, digests, http, names, settings


class _HashingSink:
    """The temporary file, hashing what is written; a retry (seek(0) + truncate) starts both again."""

    def __init__(self, fh, blob_id: str, size: int):
        self.fh, self.blob_id, self.declared = fh, blob_id, size
        self.hasher = digests.Hasher(blob_id, size)

    def write(self, data: bytes) -> None:
        self.fh.write(data)
        self.hasher.update(data)

    def seek(self, pos: int) -> None:
        self.fh.seek(pos)

    def truncate(self) -> None:
        self.fh.truncate()
        self.hasher = digests.Hasher(self.blob_id, self.declared)


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
    plan, total = _plan(src)
    seconds = settings.download_deadline(total)
    budget = http.Budget(time.monotonic() + seconds,
                         f"{seconds:g} s (SURGERY_HUB_DOWNLOAD_DEADLINE, the whole download of {total} bytes)",
                         "a slow server: SURGERY_HUB_DOWNLOAD_DEADLINE sets the time a whole download may take "
                         "(default SURGERY_HUB_DEADLINE plus 1 s per MiB)")
    for name, (size, blob) in sorted(plan.items()):
        if not settings.refresh() and src.cached_whole(name):
            continue
        _fetch(src, name, size, blob, budget)
    return str(settings.hub_cache() / cache.repo_folder(src.repo_id) / "snapshots" / src.commit)


def _fetch(src, name: str, size: int, blob: str, budget: http.Budget) -> None:
    where = src.location(name)
    fd, tmp = cache.blob_tmp(src.repo_id, blob, where)
    try:
        with os.fdopen(fd, "w+b") as fh:
            sink = _HashingSink(fh, blob, size)
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
        cache.store_blob(src.repo_id, src.hub.revision, src.commit, name, tmp, sink.hasher)
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass
