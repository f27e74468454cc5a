"""What a blob id says about a file's bytes, checked.

The hub names every file by its content: a regular (git) file by its git blob id, the sha1 of
`blob <size>\\0` + the bytes (40 hex); an LFS / Xet file by the sha256 of the bytes (64 hex). The
model info lists that id for each file, and a blob in the cache is stored under it. So the id is a
promise about the bytes that can be kept: a blob is stored (and a snapshot link made to it) only
when the bytes hash to the id the listing gives for that file. A server that sends every file with
the same ETag, or a body that is not the listed file, can then never make a link point at the wrong
blob (issue 54: one ETag for every file linked the index to config.json's blob).
"""
from __future__ import annotations

import hashlib


class Hasher:
    """The id of `blob_id`'s kind, computed piece by piece (a download streams to disk). A git blob
    id hashes the size first, so the size the listing declares is given up front; `matches` also
    checks that exactly that many bytes came."""

    def __init__(self, blob_id: str, size: int):
        self.blob_id, self.declared, self.size = blob_id, size, 0
        self._h = hashlib.sha256() if len(blob_id) == 64 else hashlib.sha1(b"blob %d\x00" % size)

    def update(self, data: bytes) -> None:
        self.size += len(data)
        self._h.update(data)

    def matches(self) -> bool:
        return self.size == self.declared and self._h.hexdigest() == self.blob_id


def git_blob_id(data: bytes) -> str:
    """The git blob id of `data`: sha1(b"blob <len>\\0" + data)."""
    h = hashlib.sha1(b"blob %d\x00" % len(data))
    h.update(data)
    return h.hexdigest()


def digest_like(blob_id: str, data: bytes) -> str:
    """`data`'s id of the same kind as `blob_id` (64 hex: sha256; 40 hex: git blob sha1)."""
    return hashlib.sha256(data).hexdigest() if len(blob_id) == 64 else git_blob_id(data)


def matches(blob_id: str, data: bytes) -> bool:
    return digest_like(blob_id, data) == blob_id
