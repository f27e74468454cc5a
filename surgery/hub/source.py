"""`HubSource`: a model on the hub (or in the HF cache), read file by file and range by range.

Opening one costs at most one small API request (`/api/models/<repo>/revision/<rev>?blobs=true`),
which pins the revision to a commit sha and lists the files with their sizes and content hashes.
It costs none when HF_HUB_OFFLINE is set (the commit comes from the cache's refs/) or when the
revision is a commit sha the cache already holds. Everything after that is addressed by the commit,
so what a run read can be read again exactly, offline.
"""
from __future__ import annotations

import hashlib
import json
import sys
import urllib.parse

from ..diagnostics import Location, fail
from ..modelsource import HubRef, ModelSource
from ..version import __version__
from . import cache, http, names, settings
from .ledger import LEDGER

MAX_API_BYTES = 16 << 20  # a model's file list with blob ids; the largest repos list a few thousand files


def _quote(revision: str) -> str:
    return urllib.parse.quote(revision, safe="")


def _fetch_hints(repo_id: str, revision: str | None, names: list[str]) -> str:
    rev = f" --revision {revision}" if revision else ""
    return (f"fetch them once with the network (`hf download {repo_id} {' '.join(names)}{rev}`, or run this "
            "command once without HF_HUB_OFFLINE), or unset HF_HUB_OFFLINE")


class HubSource(ModelSource):
    def __init__(self, hub: HubRef, ref: str, commit: str, files: dict[str, dict], listed: bool, origin: str):
        self.ref, self.hub, self.commit = ref, hub, commit
        self.repo_id = hub.repo_id
        self.files = files  # name -> {"size": int|None, "blob": str|None}
        self.listed = listed  # the file list is the repo's own (else: what the cache holds)
        self.origin = origin  # "hub": asked the hub; "hf-cache": answered from the cache alone
        self.token = None if settings.offline() else settings.token()

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
    def _url(self, name: str) -> str:
        return f"{settings.endpoint()}/{self.repo_id}/resolve/{self.commit}/{urllib.parse.quote(name)}"

    def _headers(self) -> dict[str, str]:
        h = {"User-Agent": f"spec-surgery/{__version__}", "Accept-Encoding": "identity"}
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        return h

    def read_bytes(self, name: str, max_bytes: int, what: str) -> bytes:
        where = self.location(name)
        names.check_file_name(name, where, "the request")
        local = None if settings.refresh() else cache.cached_file(self.repo_id, name, self.commit)
        if isinstance(local, str):
            LEDGER.hit()
            try:
                with open(local, "rb") as fh:
                    data = fh.read(max_bytes + 1)
            except OSError as exc:
                raise fail("SRG002", f"cannot read {local}: {exc.strerror or exc}", Location(where)) from None
            if len(data) > max_bytes:
                raise fail("SRG008", f"{what} is larger than {max_bytes} bytes", Location(where))
            problem = self._problem(name, data)
            if problem:
                raise fail("SRG064", f"the cached copy of {name} ({local}) {problem}: an earlier run or download "
                           "stored a bad answer", Location(where),
                           hint=f"run the command again with --refresh (fetches it anew), or delete {local}")
            return data
        if local is False or (self.listed and name not in self.files):
            raise fail("SRG057", f"the repo has no {name} at commit {self.commit[:12]}", Location(where))
        if settings.offline():
            raise fail("SRG050", f"HF_HUB_OFFLINE is set and {name} of {self.repo_id} is not in the cache",
                       Location(where), hint=_fetch_hints(self.repo_id, self.hub.revision, [name]))
        size = self.size(name)
        if size is not None and size > max_bytes:
            raise fail("SRG008", f"{what} is {size} bytes (limit {max_bytes})", Location(where))
        try:
            resp = http.request(self._url(name), what=f"{self.repo_id}/{name}", where=where, max_bytes=max_bytes,
                                headers=self._headers(), kind="file")
        except http.EntryMissing:
            cache.store_missing(self.repo_id, self.hub.revision, self.commit, name)
            raise fail("SRG057", f"the repo has no {name} at commit {self.commit[:12]}", Location(where)) from None
        self._check_commit(resp, where)
        problem = self._problem(name, resp.body)
        if problem:  # never committed to the cache: a later run asks again
            raise fail("SRG055", f"the hub served a {name} that {problem}; not stored in the cache", Location(where),
                       hint="a misbehaving server at HF_ENDPOINT or a cut connection; run the command again")
        etag = (resp.headers.get("x-linked-etag") or resp.headers.get("etag") or "").strip()
        etag = etag[2:] if etag.startswith("W/") else etag
        etag = etag.strip('"') or self.blob_id(name) or _sha256(resp.body)
        cache.store_file(self.repo_id, self.hub.revision, self.commit, name, resp.body, etag)
        return resp.body

    def _problem(self, name: str, data: bytes) -> str | None:
        """Why `data` cannot be `name` as the repo listed it (None when it can): its size differs from
        the listing's, or a `.json` file does not parse. Checked before a file enters the cache, and
        again when a cached copy is read (a copy an older version or another tool stored)."""
        size = self.size(name)
        if size is not None and len(data) != size:
            return f"is {len(data)} bytes where the repo lists {size}"
        if name.endswith(".json"):
            try:
                json.loads(data)
            except (ValueError, RecursionError):
                return "is not valid JSON"
        return None

    def read_range(self, name: str, start: int, length: int) -> bytes:
        where = self.location(name)
        names.check_file_name(name, where, "the request")
        local = None if settings.refresh() else cache.cached_file(self.repo_id, name, self.commit)
        if isinstance(local, str):  # the whole file is in the cache (e.g. `hf download`)
            LEDGER.hit()
            with open(local, "rb") as fh:
                fh.seek(start)
                return fh.read(length)
        stored = cache.get_range(self.repo_id, self.commit, name, start, length)
        if stored is not None:
            LEDGER.hit()
            return stored
        if settings.offline():
            raise fail("SRG050", f"HF_HUB_OFFLINE is set and bytes {start}-{start + length - 1} of {name} "
                       f"({self.repo_id}) were never read into the cache", Location(where),
                       hint=_fetch_hints(self.repo_id, self.hub.revision, [name]) + " (or run the same "
                       "check once online: only the ranges it reads are kept)")
        try:
            resp = http.request(self._url(name), what=f"{self.repo_id}/{name}", where=where, max_bytes=length,
                                headers=self._headers(), byte_range=(start, length), kind="range")
        except http.EntryMissing:
            raise fail("SRG057", f"the repo has no {name} at commit {self.commit[:12]}", Location(where)) from None
        self._check_commit(resp, where)
        total = (http.content_range(resp.headers) or (0, 0, None))[2]
        if total is None and resp.status == 200 and resp.headers.get("content-length", "").isdigit():
            total = int(resp.headers["content-length"])
        if total is not None:
            known = self.size(name)
            if known is not None and known != total:
                raise fail("SRG055", f"the hub lists {name} as {known} bytes but serves {total}", Location(where))
            self.files.setdefault(name, {"size": None, "blob": None})["size"] = total
        at_eof = total is not None and start + len(resp.body) >= total
        cache.store_range(self.repo_id, self.commit, name, start, resp.body, at_eof)
        return resp.body

    def _check_commit(self, resp: http.Response, where: str) -> None:
        served = resp.headers.get("x-repo-commit")
        if served and served != self.commit:
            raise fail("SRG055", f"asked for commit {self.commit[:12]}, the hub served {served[:12]}", Location(where))

    def full_snapshot(self) -> str | None:
        """The local snapshot folder when every listed file is in the cache (weights included): what
        an engine or transformers can load without another download."""
        if self.names() and all(isinstance(cache.cached_file(self.repo_id, n, self.commit), str) for n in self.names()):
            return str(settings.hub_cache() / cache.repo_folder(self.repo_id) / "snapshots" / self.commit)
        return None


    def download(self) -> str:
        """Every file of the model into the HF cache at the pinned commit (huggingface_hub's
        snapshot_download), for commands that load or copy the weights themselves; the folder.

        huggingface_hub joins the server's ETag to `blobs/` unchecked (file_download.py, 2.4), so the
        download runs with its ETag normaliser fenced by `names.check_blob_id`: a hostile ETag stops
        the download (SRG063) before the blob path exists."""
        from huggingface_hub import file_download, snapshot_download
        from huggingface_hub.utils import disable_progress_bars

        if not sys.stderr.isatty():  # no progress lines unless stderr is a terminal (as every command)
            disable_progress_bars()
        refused: list[str] = []
        original = file_download._normalize_etag

        def fenced(etag):
            value = original(etag)
            if value is not None and not names.BLOB_ID.match(value):
                refused.append(value)
                raise ValueError("ETag refused by spec-surgery: not a hex digest")
            return value

        file_download._normalize_etag = fenced
        try:
            return snapshot_download(self.repo_id, revision=self.commit, cache_dir=str(settings.hub_cache()),
                                     token=self.token, endpoint=settings.endpoint(), force_download=settings.refresh())
        except Exception as exc:  # noqa: BLE001 - huggingface_hub's many error types: one coded line
            if refused:
                names.check_blob_id(refused[0], self.location(), "the ETag the server sent")
            raise fail("SRG060", f"could not download {self.repo_id}@{self.commit[:12]}: {type(exc).__name__}: "
                       f"{str(exc)[:300]}", Location(self.location()),
                       hint=f"`hf download {self.repo_id} --revision {self.commit}`, then run the command again")
        finally:
            file_download._normalize_etag = original


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


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
        if not isinstance(sha, str) or not cache.COMMIT.match(sha) or not isinstance(siblings, list):
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
    for name, entry in files.items():  # names and blob ids become cache paths: the hub's own forms only
        names.check_file_name(name, where, "the model info's file list")
        if entry["blob"] is not None:
            names.check_blob_id(entry["blob"], where, f"the model info's blob id of {name}")
    return {"commit": sha, "files": files, "gated": info.get("gated", False)}


def open_hub_model(hub: HubRef, ref: str) -> HubSource:
    """Pin `hub` to a commit: from the cache when offline (or when the revision is a cached sha),
    else with one API request; coded errors for every way that can fail."""
    names.check_revision(hub.revision or "main", ref)
    commit = cache.cached_commit(hub.repo_id, hub.revision)
    pinned_sha = commit is not None and hub.revision == commit and not settings.refresh()
    if settings.offline() and settings.refresh():
        raise fail("SRG062", "--refresh asks the hub again, and HF_HUB_OFFLINE forbids asking it", Location(ref),
                   hint="unset HF_HUB_OFFLINE, or drop --refresh")
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
    return HubSource(hub, ref, info["commit"], info["files"], True, "hub")
