"""`HubSource`: a model on the hub (or in the HF cache), read file by file and range by range.

Opening one costs at most one small API request (`/api/models/<repo>/revision/<rev>?blobs=true`),
which pins the revision to a commit sha and lists the files with their sizes and content hashes.
It costs none when HF_HUB_OFFLINE is set (the commit comes from the cache's refs/) or when the
revision is a commit sha the cache already holds. Everything after that is addressed by the commit,
so what a run read can be read again exactly, offline.
"""
from __future__ import annotations

import json
import urllib.parse
from pathlib import Path

from ..text.diagnostics import Location, SurgeryError, fail
from ..modelfiles.source import DEFER, HubRef, ModelSource
from ..text.escape import quoted, shown
from ..version import __version__
from . import cache, digests, entries, http, names, settings
from .ledger import LEDGER

MAX_API_BYTES = 16 << 20  # a model's file list with blob ids; the largest repos list a few thousand files


def _quote(revision: str) -> str:
    return urllib.parse.quote(revision, safe="")


def _fetch_hints(repo_id: str, revision: str | None, names: list[str]) -> str:
    rev = f" --revision {revision}" if revision else ""
    return (f"fetch them once with the network (`hf download {repo_id} {' '.join(names)}{rev}`, or run this "
            "command once without HF_HUB_OFFLINE), or unset HF_HUB_OFFLINE")


class HubSource(ModelSource):
    keeps_ranges = True
    def __init__(self, hub: HubRef, ref: str, commit: str, files: dict[str, dict], listed: bool, origin: str):
        self.ref, self.hub, self.commit = ref, hub, commit
        self.repo_id = hub.repo_id
        self.files = files  # name -> {"size": int|None, "blob": str|None}
        self.listed = listed  # the file list is the repo's own (else: what the cache holds)
        self.origin = origin  # "hub": asked the hub; "hf-cache": answered from the cache alone
        self.token = None if settings.offline() else settings.token()
        self._deferred: dict[str, tuple[int, bytes, bool]] = {}  # a header's first range, until the rest passes

    # -- naming -------------------------------------------------------------------------------------
    def location(self, name: str | None = None) -> str:
        base = f"{self.repo_id}@{self.commit[:12]}"
        return base if name is None else f"{base}/{name}"

    def pin(self) -> dict:
        return {"ref": self.ref, "source": self.origin, "repo_id": self.repo_id,
                "revision": self.hub.revision or "main", "commit": self.commit,
                **({"endpoint": settings.endpoint()} if self.origin == "hub" else {}),
                **({} if self.listed else {"file_list": "from the cache snapshot only"})}

    def same_model(self, other: ModelSource) -> bool:
        return isinstance(other, HubSource) and (self.repo_id, self.commit) == (other.repo_id, other.commit)

    # -- what there is --------------------------------------------------------------------------------
    def names(self) -> list[str]:
        return sorted(self.files)

    def has(self, name: str) -> bool:
        if name in self.files:
            return True
        if self.listed:
            return False
        return cache.cached_file(self.repo_id, name, self.commit) not in (None, False)

    def size(self, name: str) -> int | None:
        return (self.files.get(name) or {}).get("size")

    def blob_id(self, name: str) -> str | None:
        return (self.files.get(name) or {}).get("blob")

    # -- reading --------------------------------------------------------------------------------------
    def url(self, name: str) -> str:
        return f"{settings.endpoint()}/{self.repo_id}/resolve/{self.commit}/{urllib.parse.quote(name)}"

    def request_headers(self) -> dict[str, str]:
        h = {"User-Agent": f"spec-surgery/{__version__}", "Accept-Encoding": "identity"}
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        return h

    def _known(self, name: str) -> str | bool | None:
        """The cache's word on `name` at the commit (see `cache.cached_file`), with a `.no_exist` marker
        the hub's own file list contradicts taken as no word at all: the file is asked for again, and
        the marker removed once it is stored (a cache poisoned by an older version heals)."""
        local = None if settings.refresh() else cache.cached_file(self.repo_id, name, self.commit)
        if local is False and self.listed and name in self.files:
            return None
        return local

    def read_bytes(self, name: str, max_bytes: int, what: str) -> bytes:
        where = self.location(name)
        names.check_file_name(name, where, "the request")
        local = self._known(name)
        if isinstance(local, str):
            size = self.size(name)
            entry = entries.read_regular(Path(local), max_bytes + 1 if size is None else min(max_bytes, size) + 1,
                                         where)
            if entry is not None:
                LEDGER.hit()
                if entry.size > max_bytes:
                    raise fail("SRG008", f"{what} is larger than {max_bytes} bytes", Location(where))
                problem = self._problem(name, entry.data, entry.size)
                if problem:
                    raise fail("SRG064", f"the cached copy of {name} ({shown(local, 300)}) {problem}: an earlier run "
                               "or download stored a bad answer", Location(where),
                               hint=f"run the command again with --refresh (fetches it anew), or delete "
                                    f"{shown(local, 300)}")
                return entry.data
        if local is False or (self.listed and name not in self.files):
            raise fail("SRG057", f"the repo has no {name} at commit {self.commit[:12]}", Location(where))
        if settings.offline():
            raise fail("SRG050", f"HF_HUB_OFFLINE is set and {name} of {self.repo_id} is not in the cache",
                       Location(where), hint=_fetch_hints(self.repo_id, self.hub.revision, [name]))
        size = self.size(name)
        if size is not None and size > max_bytes:
            raise fail("SRG008", f"{what} is {size} bytes (limit {max_bytes})", Location(where))
        try:
            resp = http.request(self.url(name), what=f"{self.repo_id}/{name}", where=where, max_bytes=max_bytes,
                                headers=self.request_headers(), kind="file")
        except http.EntryMissing as missing:
            raise self._missing(name, missing, where) from None
        served = self.check_answer(resp, where)
        problem = self._problem(name, resp.body, len(resp.body), check_blob=False)
        if problem:  # never committed to the cache: a later run asks again
            raise fail("SRG055", f"the hub served a {name} that {problem}; not stored in the cache", Location(where),
                       hint="a misbehaving server at HF_ENDPOINT or a cut connection; run the command again")
        blob = self.blob_id(name) or served or digests.git_blob_id(resp.body)
        cache.store_file(self.repo_id, self.hub.revision, self.commit, name, resp.body, blob)
        return resp.body

    def _missing(self, name: str, missing: http.EntryMissing, where: str):
        """The error for a 404 (SRG057; SRG055 for a listed file); the `.no_exist` marker is written only
        for the hub's own answer about this commit (`http.EntryMissing.authoritative`)."""
        if missing.authoritative and missing.commit == self.commit:
            cache.store_missing(self.repo_id, self.hub.revision, self.commit, name)
            return fail("SRG057", f"the repo has no {name} at commit {self.commit[:12]}", Location(where))
        if self.listed and name in self.files:
            return fail("SRG055", f"the repo lists {name} at commit {self.commit[:12]}, and the server answered 404 "
                        "for it (not the hub's EntryNotFound for this commit); nothing recorded in the cache",
                        Location(where), hint="a misbehaving server or proxy at HF_ENDPOINT; run the command again")
        return fail("SRG057", f"the repo has no {name} at commit {self.commit[:12]} (a 404 that is not the hub's "
                    "own EntryNotFound answer: not recorded in the cache)", Location(where))

    def _problem(self, name: str, data: bytes, size: int, check_blob: bool = True) -> str | None:
        """Why `data` (of a file `size` bytes long) cannot be `name` as the repo listed it (None when it
        can): its size differs from the listing's, its bytes do not hash to the listed blob id, or a
        `.json` file does not parse. Checked before a file enters the cache (the blob id by
        `cache.store_file`), and again when a cached copy is read (a copy an older version, another
        tool or a hub that sent one ETag for every file left behind)."""
        listed = self.size(name)
        if listed is not None and size != listed:
            return f"is {size} bytes where the repo lists {listed}"
        blob = self.blob_id(name)
        if check_blob and blob is not None and names.BLOB_ID.fullmatch(blob) and not digests.matches(blob, data):
            return f"does not hash to the blob id {blob[:12]} the repo lists for it"
        if name.endswith(".json"):
            try:
                json.loads(data)
            except (ValueError, RecursionError):
                return "is not valid JSON"
        return None

    def read_range(self, name: str, start: int, length: int, check=None) -> bytes:
        where = self.location(name)
        names.check_file_name(name, where, "the request")
        local = self._known(name)
        if isinstance(local, str):  # the whole file is in the cache (e.g. `hf download`)
            span = entries.read_span(Path(local), start, length, where)
            if span is not None:
                data, size = span
                listed = self.size(name)
                if listed is not None and size != listed:
                    raise fail("SRG064", f"the cached copy of {name} ({shown(local, 300)}) is {size} bytes where "
                               f"the repo lists {listed}", Location(where),
                               hint=f"run the command again with --refresh, or delete {shown(local, 300)}")
                LEDGER.hit()
                return data
        stored = cache.get_range(self.repo_id, self.commit, name, start, length)
        if stored is not None:
            problem = check(stored) if check is not None else None
            if problem is None or problem == DEFER:
                LEDGER.hit()
                return stored
            # a stored range that fails the checks (an older version stored it, or it was planted): removed;
            # a header's first range is read again from the hub, a continuation (its head came from the
            # cache too) is refused with what happened, and the next run reads both anew (issue 67)
            dropped = cache.drop_ranges(self.repo_id, self.commit, name)
            if settings.offline() or start != 0:
                raise fail("SRG784", f"the cached range of {name} (bytes {start}-{start + len(stored) - 1}, "
                           f"{shown(dropped, 300)}) fails the header checks ({problem}): removed from the cache",
                           Location(where),
                           hint="run the command again online: the header is read anew from the hub"
                           + (" (HF_HUB_OFFLINE is set)" if settings.offline() else ""))
        if settings.offline():
            raise fail("SRG050", f"HF_HUB_OFFLINE is set and bytes {start}-{start + length - 1} of {name} "
                       f"({self.repo_id}) were never read into the cache", Location(where),
                       hint=_fetch_hints(self.repo_id, self.hub.revision, [name]) + " (or run the same "
                       "check once online: only the ranges it reads are kept)")
        try:
            resp = http.request(self.url(name), what=f"{self.repo_id}/{name}", where=where, max_bytes=length,
                                headers=self.request_headers(), byte_range=(start, length), kind="range")
        except http.EntryMissing:
            raise fail("SRG057", f"the repo has no {name} at commit {self.commit[:12]}", Location(where)) from None
        self.check_answer(resp, where, etag=False)
        total = (http.content_range(resp.headers) or (0, 0, None))[2]
        if total is None and resp.status == 200:
            total = http.number(resp.headers.get("content-length"))
        if total is not None:
            known = self.size(name)
            if known is not None and known != total:
                raise fail("SRG055", f"the hub lists {name} as {known} bytes but serves {total}", Location(where))
            self.files.setdefault(name, {"size": None, "blob": None})["size"] = total
        at_eof = total is not None and start + len(resp.body) >= total
        problem = check(resp.body) if check is not None else None
        if problem == DEFER:  # kept in memory until the rest of the header is read and passes
            self._deferred[name] = (start, resp.body, at_eof)
        elif problem is None:
            held = self._deferred.pop(name, None)
            if held is not None and check is not None:
                cache.store_range(self.repo_id, self.commit, name, held[0], held[1], held[2])
            cache.store_range(self.repo_id, self.commit, name, start, resp.body, at_eof)
        else:
            self._deferred.pop(name, None)  # never stored: the caller refuses it (SRG600), a later run asks again
        return resp.body

    def check_answer(self, resp: http.Response, where: str, etag: bool = True) -> str | None:
        """The commit the answer says it is for must be ours (SRG055); with `etag`, the ETag the hub's
        own answer gives (`X-Linked-Etag`, else `ETag`, before any redirect) must be a hex digest
        (SRG063: it could name a blob) and is returned, or None when it sent none. A CDN's ETag (a
        range read may go to the CDN directly) says nothing and is not looked at."""
        served = resp.headers.get("x-repo-commit") or resp.first.get("x-repo-commit")
        if served and served != self.commit:
            raise fail("SRG055", f"asked for commit {self.commit[:12]}, the hub served {quoted(http.masked(served), 60)}",
                       Location(where))
        if not etag:
            return None
        etag = (resp.first.get("x-linked-etag") or resp.first.get("etag") or "").strip()
        etag = etag[2:] if etag.startswith("W/") else etag
        etag = etag.strip('"')
        if not etag:
            return None
        return names.check_blob_id(etag, where, "the ETag the hub sent")

    def cached_whole(self, name: str) -> bool:
        """The snapshot holds `name` as a regular file of the size the listing gives (a link to a FIFO
        or a device, a short or long copy: not; the download fetches it again and replaces it)."""
        local = cache.cached_file(self.repo_id, name, self.commit)
        if not isinstance(local, str):
            return False
        try:
            span = entries.read_span(Path(local), 0, 0, self.location(name))
        except SurgeryError:
            return False
        size = self.size(name)
        return span is not None and (size is None or span[1] == size)

    def full_snapshot(self) -> str | None:
        """The local snapshot folder when every listed file is in the cache (weights included), each a
        regular file of its listed size: what an engine or transformers can load, or convert copy,
        without another download."""
        if self.names() and all(self.cached_whole(n) for n in self.names()):
            return str(settings.hub_cache() / cache.repo_folder(self.repo_id) / "snapshots" / self.commit)
        return None

    def download(self) -> str:
        """Every file of the model into the HF cache at the pinned commit, for commands that load or
        copy the weights themselves (convert, apply --engine hf); the folder. Bounded in bytes, time
        and content by our own client (`surgery.hub.download`)."""
        from .download import download

        return download(self)


def _api_info(hub: HubRef) -> dict:
    """`GET /api/models/<repo>[/revision/<rev>]?blobs=true`, as huggingface_hub's model_info asks it."""
    url = f"{settings.endpoint()}/api/models/{hub.repo_id}"
    if hub.revision:
        url += f"/revision/{_quote(hub.revision)}"
    url += "?blobs=true"
    tok = settings.token()
    headers = {"User-Agent": f"spec-surgery/{__version__}", "Accept-Encoding": "identity"}
    if tok:
        headers["Authorization"] = f"Bearer {tok}"
    where = str(hub)
    try:
        resp = http.request(url, what=f"{hub.repo_id} (model info)", where=where, max_bytes=MAX_API_BYTES,
                            headers=headers, kind="api")
    except http.EntryMissing:
        raise fail("SRG051", f"{hub.repo_id}: no such repo on {settings.endpoint()}", Location(where),
                   hint="check the id (`org/name`); a local folder of that name does not exist either") from None
    try:
        info = json.loads(resp.body)
        sha = info["sha"]
        siblings = info.get("siblings") or []
        if not isinstance(sha, str) or not cache.COMMIT.fullmatch(sha) or not isinstance(siblings, list):
            raise ValueError
        files = {}
        for s in siblings:
            name = s["rfilename"]
            lfs = s.get("lfs") or {}
            size = lfs.get("size", s.get("size"))
            files[name if isinstance(name, str) else str(name)] = {
                "size": size if isinstance(size, int) and size >= 0 else None,
                "blob": lfs.get("sha256") or s.get("blobId")}
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        raise fail("SRG055", f"{hub.repo_id}: the model-info answer is not what the hub sends (no commit sha or "
                   "file list)", Location(where)) from None
    if hub.revision and cache.COMMIT.fullmatch(hub.revision) and sha != hub.revision:
        raise fail("SRG067", f"{hub.repo_id}: asked for commit {hub.revision}, the hub answered with commit {sha}: "
                   "refused, nothing read or stored for it", Location(where),
                   hint="a commit sha names one state of the repo for ever: a server that answers another is "
                        "misbehaving (check HF_ENDPOINT)")
    for name, entry in files.items():  # names and blob ids become cache paths: the hub's own forms only
        names.check_file_name(name, where, "the model info's file list")
        if entry["blob"] is not None:
            names.check_blob_id(entry["blob"], where, f"the model info's blob id of {shown(name)}")
    gated = info.get("gated", False)
    gated = gated if isinstance(gated, bool) or (isinstance(gated, str) and len(gated) <= 40) else bool(gated)
    return {"commit": sha, "files": files, "gated": gated}


def open_hub_model(hub: HubRef, ref: str) -> HubSource:
    """Pin `hub` to a commit: from the cache when offline (or when the revision is a cached sha),
    else with one API request; coded errors for every way that can fail."""
    names.check_revision(hub.revision or "main", ref)
    settings.check_environment()  # SRG782 / SRG783 before any request (issue 67)
    cache.sweep_repo(hub.repo_id)  # partial downloads a killed process left (never a live one's)
    if settings.offline() and settings.refresh():
        raise fail("SRG062", "--refresh asks the hub again, and HF_HUB_OFFLINE forbids asking it", Location(ref),
                   hint="unset HF_HUB_OFFLINE, or drop --refresh")
    # --refresh reads nothing of the cache (a planted refs/ entry is replaced, not read)
    commit = None if settings.refresh() else cache.cached_commit(hub.repo_id, hub.revision)
    pinned_sha = commit is not None and hub.revision == commit
    if settings.offline() or pinned_sha:
        if commit is None:
            raise fail("SRG050", f"HF_HUB_OFFLINE is set and {hub} is not in the HF cache "
                       f"({settings.hub_cache()})", Location(ref),
                       hint=_fetch_hints(hub.repo_id, hub.revision, ["config.json"]))
        listing = cache.load_listing(hub.repo_id, commit)
        if listing is not None:
            return HubSource(hub, ref, commit, listing["files"], True, "hf-cache")
        cached_names = cache.snapshot_names(hub.repo_id, commit)
        return HubSource(hub, ref, commit, {n: {"size": None, "blob": None} for n in cached_names}, False, "hf-cache")
    info = _api_info(hub)
    cache.store_listing(hub.repo_id, info["commit"], {"files": info["files"], "gated": info["gated"]})
    if settings.refresh():  # the hub's own list: a `.no_exist` marker for a file it lists is wrong
        for name in info["files"]:
            if cache.missing_marker(hub.repo_id, info["commit"], name):
                cache.forget_missing(hub.repo_id, info["commit"], name)
    return HubSource(hub, ref, info["commit"], info["files"], True, "hub")
