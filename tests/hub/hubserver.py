"""A local server that speaks the Hugging Face hub's file protocol, on 127.0.0.1, for tests and the
hub benchmark: the real `huggingface_hub` client and `surgery` talk to it through HF_ENDPOINT.

What it serves, as the hub does:
- `GET /api/models/<repo>[/revision/<rev>]` (`?blobs=true`): id, sha, gated, siblings (rfilename,
  size, blobId, lfs {sha256, size});
- `HEAD` / `GET /<repo>/resolve/<rev>/<path>` with `X-Repo-Commit`, `ETag`, `Content-Length`,
  `Accept-Ranges` and Range (206 + `Content-Range`); LFS files answer with a 302 to `/cdn/<sha256>`
  (the hub sends its CDN), carrying `X-Linked-Etag` / `X-Linked-Size` as the hub does;
- 401 `X-Error-Code: GatedRepo` without a token on a gated repo, 401/404 `RepoNotFound`,
  404 `RevisionNotFound`, 404 `EntryNotFound`.

Weight files are virtual: a real safetensors header followed by sparse data (zeros, plus the bytes
a test puts at given offsets), so a 16 GB checkpoint costs no disk and no memory. Every answer's
body bytes are counted (`served_bytes`, `log`). `faults` makes it lie, for the hostile-server suite.
"""
from __future__ import annotations

import functools
import hashlib
import json
import re
import struct
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
               "BOOL": 1, "F8_E4M3": 1}


@dataclass
class VirtualFile:
    """`size` bytes: `prefix` at 0, `patches` at their offsets, zeros elsewhere."""

    size: int
    prefix: bytes = b""
    patches: list[tuple[int, bytes]] = field(default_factory=list)

    def read(self, start: int, end: int) -> bytes:  # [start, end)
        end = min(end, self.size)
        if start >= end:
            return b""
        out = bytearray(end - start)
        for off, data in [(0, self.prefix), *self.patches]:
            lo, hi = max(start, off), min(end, off + len(data))
            if lo < hi:
                out[lo - start:hi - start] = data[lo - off:hi - off]
        return bytes(out)


def safetensors_file(tensors: list[tuple[str, str, list[int]]], data: dict[str, bytes] | None = None,
                     metadata: dict | None = None) -> VirtualFile:
    """A virtual .safetensors file: the real header for `tensors` (name, dtype, shape), in order;
    `data` gives real bytes for some tensors (the rest are zeros)."""
    header, offset = {}, 0
    if metadata is not None:
        header["__metadata__"] = metadata
    spans = {}
    for name, dtype, shape in tensors:
        n = DTYPE_BYTES[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        spans[name] = (offset, n)
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    base = 8 + len(raw)
    patches = []
    for name, value in (data or {}).items():
        off, n = spans[name]
        assert len(value) <= n, name
        patches.append((base + off, value))
    return VirtualFile(base + offset, struct.pack("<Q", len(raw)) + raw, patches)


@dataclass
class RepoFile:
    content: bytes | VirtualFile
    lfs: bool = False

    @property
    def size(self) -> int:
        return self.content.size if isinstance(self.content, VirtualFile) else len(self.content)

    def read(self, start: int, end: int) -> bytes:
        if isinstance(self.content, VirtualFile):
            return self.content.read(start, end)
        return self.content[start:end]

    @property
    def oid(self) -> str:
        """git blob sha1 (a small file's ETag) or the sha256 of the bytes for LFS, as the hub lists them;
        for an LFS file over 64 MiB (virtual: its bulk is never materialised) a stand-in computed from
        its header and size only. Computed once."""
        cached = self.__dict__.get("_oid")
        if cached is not None:
            return cached
        if self.lfs and self.size > 64 << 20:
            head = self.content.prefix if isinstance(self.content, VirtualFile) else self.content
            patches = b"".join(p for _, p in getattr(self.content, "patches", []))
            value = hashlib.sha256(head + patches + str(self.size).encode()).hexdigest()
        else:
            data = self.content if isinstance(self.content, bytes) else self.content.read(0, self.content.size)
            value = hashlib.sha256(data).hexdigest() if self.lfs else \
                hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        self.__dict__["_oid"] = value
        return value


@dataclass
class Repo:
    repo_id: str
    files: dict[str, RepoFile]
    gated: bool = False
    revisions: dict[str, str] = field(default_factory=dict)  # branch / tag -> commit
    any_revision: bool = False  # a server that answers every revision name with main's commit

    def __post_init__(self):
        if not self.revisions:
            names = sorted(f.encode("utf-8", "surrogatepass") for f in self.files)  # a hostile name may be no UTF-8
            digest = hashlib.sha1(self.repo_id.encode() + b"".join(names)).hexdigest()
            self.revisions = {"main": digest}

    @property
    def main(self) -> str:
        return self.revisions["main"]

    def commit_of(self, rev: str) -> str | None:
        if rev in self.revisions:
            return self.revisions[rev]
        if re.fullmatch(r"[0-9a-f]{40}", rev) and rev in self.revisions.values():
            return rev
        return self.main if self.any_revision else None


@dataclass
class Fault:
    """How the server misbehaves on one path (matched by substring of the request path)."""

    status: int | None = None  # answer this status (e.g. 500) `times` times
    times: int = 1 << 30
    truncate_to: int | None = None  # send only this many body bytes (Content-Length still the full)
    ignore_range: bool = False  # answer 200 with the whole body
    redirect_loop: bool = False
    stall_after: int | None = None  # send this many body bytes, then hang `stall_s`
    stall_s: float = 30.0
    trickle_s: float | None = None  # one byte every trickle_s seconds
    wrong_commit: bool = False
    body_override: bytes | None = None  # the model info's body, or a file's (with its own Content-Length)
    etag: str | None = None  # the ETag / X-Linked-Etag header sent instead of the file's ("": none at all)
    delay_s: float = 0.0  # a pause before the answer (each request stays inside its own bounds)
    redirect_to: str | None = None  # answer 302 to this address
    # issue 54: answers that break HTTP itself, written straight to the socket (RAW_MODES), `times` times
    raw: str | None = None
    raw_interval_s: float = 0.2  # continue-flood / trickle-header: the pause between pieces
    headers: dict[str, str] | None = None  # extra headers on the fault's answer (e.g. X-Error-Message)
    bare_404: bool = False  # 404 with no X-Error-Code (a proxy's page, not the hub's answer)
    endless: bool = False  # a file's 200 body that never ends (no Content-Length), until the client hangs up
    encoding: str | None = None  # Content-Encoding sent with the file's body (a gzip bomb: the body gzipped)


# Answers that break HTTP, each bounded in what the server sends (count and time) so a test's server
# thread always ends by itself: the bytes are the hostile campaign's of issue 54. RAW_MODES are sent
# once; RAW_FLOODS again and again (every raw_interval_s); RAW_TRICKLES one byte every raw_interval_s.
# bench/hub_hostile.py adds its own modes to these tables.
MAX_RAW_PIECES = 100  # a flood's answers, a trickle's bytes
RAW_MODES = {
    "garbage-status": b"HTTZ/9.9 abc def\r\n\r\n",
    "many-headers": b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(150))
                    + b"Content-Length: 2\r\n\r\n{}",
    "long-header": b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 70_000 + b"\r\nContent-Length: 2\r\n\r\n{}",
    "chunked-cut": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n40\r\n{\"model_type\"",
    "bad-chunk": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
}
RAW_FLOODS = {"continue-flood": b"HTTP/1.1 100 Continue\r\n\r\n"}
RAW_TRICKLES = {"trickle-header": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Padding: " + b"p" * 60
                + b"\r\nContent-Length: 2\r\n\r\n{}"}


@functools.lru_cache(maxsize=1)
def gzip_bomb() -> bytes:
    """64 MiB of zeros in a few hundred kB, made once (level 1: fast): compressing it in the answer's thread took seconds on
    a loaded machine, past the client's stall timeout (a test that failed by load, issue 67)."""
    import gzip

    return gzip.compress(b"\0" * (64 << 20), 1)


class HubServer:
    def __init__(self, repos: list[Repo], token: str | None = "hf_test_token", rtt_s: float = 0.0):
        self.repos = {r.repo_id: r for r in repos}
        self.rtt_s = rtt_s  # a delay before every answer: a network's round trip, for the benchmark
        self.token = token
        self.faults: dict[str, Fault] = {}
        self._log: list[dict] = []
        self.in_flight = 0
        self.peak_in_flight = 0  # the most answers in progress at once (independent reads side by side)
        self.lock = threading.Lock()
        self.arrived = threading.Condition(self.lock)
        # > 0: an answer in progress alone is held until a second request arrives, at most this many
        # seconds (a hang guard, never a measure): a client that asks two things side by side then
        # reaches peak_in_flight 2 however the threads are scheduled; a sequential one never does
        self.pair_hold_s = 0.0
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    @property
    def cdn(self) -> str:
        """Where LFS files are redirected: the same server under another host name, so a redirect leaves
        the hub's origin as the hub's CDN redirects do (the client drops its token there)."""
        return f"http://localhost:{self.httpd.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    def settle(self, timeout_s: float = 2.0) -> None:
        """Wait until the answers in flight are recorded: a client can read the last byte before the
        server thread writes its log row."""
        until = time.monotonic() + timeout_s
        while self.in_flight and time.monotonic() < until:
            time.sleep(0.005)

    @property
    def log(self) -> list[dict]:
        self.settle()
        with self.lock:
            return list(self._log)

    def served_bytes(self) -> int:
        return sum(r["bytes"] for r in self.log)

    def reset_log(self) -> None:
        """Forget what was served, once the answers in flight are recorded."""
        self.settle()
        with self.lock:
            self._log.clear()
            self.peak_in_flight = 0
            self.pair_hold_s = 0.0

    def declared_bytes(self, *repo_ids: str) -> int:
        return sum(f.size for r in repo_ids for f in self.repos[r].files.values())

    # -- the handler ----------------------------------------------------------------------------------
    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_HEAD(self):
                self._counted(head=True)

            def do_GET(self):
                self._counted(head=False)

            def _counted(self, head: bool) -> None:
                with server.arrived:
                    server.in_flight += 1
                    server.peak_in_flight = max(server.peak_in_flight, server.in_flight)
                    server.arrived.notify_all()
                    if server.pair_hold_s and server.peak_in_flight < 2:
                        server.arrived.wait_for(lambda: server.peak_in_flight >= 2, timeout=server.pair_hold_s)
                if server.rtt_s:
                    time.sleep(server.rtt_s)
                try:
                    self._dispatch(head=head)
                finally:
                    with server.lock:
                        server.in_flight -= 1

            # -- plumbing
            def _record(self, status: int, n: int) -> None:
                with server.lock:
                    server._log.append({"method": self.command, "path": self.path, "status": status, "bytes": n,
                                       "range": self.headers.get("Range")})

            def _send(self, status: int, headers: dict, body: bytes = b"", head: bool = False,
                      fault: Fault | None = None) -> None:
                self.send_response(status)
                full = len(body)
                headers = {"Content-Length": str(full), **headers}
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                if head:
                    self._record(status, 0)
                    return
                sent = 0
                try:
                    if fault and fault.truncate_to is not None:
                        body = body[:fault.truncate_to]
                    if fault and fault.trickle_s is not None:
                        for i in range(len(body)):
                            self.wfile.write(body[i:i + 1])
                            self.wfile.flush()
                            sent += 1
                            time.sleep(fault.trickle_s)
                    elif fault and fault.stall_after is not None:
                        self.wfile.write(body[:fault.stall_after])
                        self.wfile.flush()
                        sent = min(len(body), fault.stall_after)
                        time.sleep(fault.stall_s)
                        self.wfile.write(body[fault.stall_after:])
                        sent = len(body)
                    else:
                        self.wfile.write(body)
                        sent = len(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                finally:
                    self._record(status, sent)
                if fault and (fault.truncate_to is not None):
                    self.close_connection = True

            def _raw(self, fault: Fault) -> None:
                """Bytes that break HTTP, straight to the socket; the row's `bytes` counts the pieces sent
                (interim answers, header bytes) so a test can say which bound fired by counting."""
                pieces = 0
                try:
                    if fault.raw in RAW_FLOODS:
                        for pieces in range(1, MAX_RAW_PIECES + 1):
                            self.wfile.write(RAW_FLOODS[fault.raw])
                            self.wfile.flush()
                            time.sleep(fault.raw_interval_s)
                    elif fault.raw in RAW_TRICKLES:
                        data = RAW_TRICKLES[fault.raw]
                        for pieces in range(1, min(len(data), MAX_RAW_PIECES) + 1):
                            self.wfile.write(data[pieces - 1:pieces])
                            self.wfile.flush()
                            time.sleep(fault.raw_interval_s)
                    else:
                        self.wfile.write(RAW_MODES[fault.raw])
                        self.wfile.flush()
                        pieces = 1
                except (BrokenPipeError, ConnectionResetError):
                    pass
                self.close_connection = True
                self._record(-1, pieces)

            def _error(self, status: int, code: str, message: str, head: bool, extra: dict | None = None) -> None:
                body = json.dumps({"error": message}).encode()
                self._send(status, {"X-Error-Code": code, "X-Error-Message": message,
                                    "Content-Type": "application/json", **(extra or {})}, body, head)

            def _authorized(self) -> bool:
                auth = self.headers.get("Authorization", "")
                return server.token is not None and auth == f"Bearer {server.token}"

            def _fault(self) -> Fault | None:
                for key, fault in server.faults.items():
                    if key in self.path:
                        return fault
                return None

            def _dispatch(self, head: bool) -> None:
                url = urllib.parse.urlsplit(self.path)
                path = urllib.parse.unquote(url.path)
                fault = self._fault()
                if fault and fault.delay_s:
                    time.sleep(fault.delay_s)
                if fault and fault.redirect_to:
                    self._send(302, {"Location": fault.redirect_to})
                    return
                if fault and fault.redirect_loop:
                    self._send(302, {"Location": self.path})
                    return
                if fault and fault.raw is not None and fault.times > 0:
                    fault.times -= 1
                    return self._raw(fault)
                if fault and fault.status is not None and fault.times > 0:
                    fault.times -= 1
                    self._send(fault.status, {"Content-Type": "text/plain", **(fault.headers or {})}, b"server error",
                               head)
                    return
                if fault and fault.bare_404:
                    self._send(404, {"Content-Type": "text/html"}, b"<html>not here</html>", head)
                    return
                m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/([^/]+)(?:/.*)?", path)
                if m:
                    return self._tree(m.group(1), m.group(2), head, fault)
                m = re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/revision/(.+))?", path)
                if m:
                    return self._api(m.group(1), m.group(2), head, fault)
                m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
                if m:
                    return self._resolve(m.group(1), m.group(2), m.group(3), head, fault)
                m = re.fullmatch(r"/cdn/([0-9a-f]+)/([^/]+/[^/]+)/([0-9a-f]{40})/(.+)", path)
                if m:
                    return self._cdn(m.group(2), m.group(3), m.group(4), head, fault)
                self._error(404, "EntryNotFound", "not found", head)

            def _repo(self, repo_id: str, head: bool) -> Repo | None:
                auth = self.headers.get("Authorization", "")
                if auth and not self._authorized():  # the hub answers a bad token before anything else
                    self.send_response(401)
                    body = b'{"error": "Invalid credentials in Authorization header"}'
                    self.send_header("Content-Length", str(len(body)))
                    self.send_header("X-Error-Message", "Invalid credentials in Authorization header")
                    self.end_headers()
                    if not head:
                        self.wfile.write(body)
                    self._record(401, len(body))
                    return None
                repo = server.repos.get(repo_id)
                if repo is None:
                    self._error(404 if self._authorized() else 401, "RepoNotFound",
                                f"Repository Not Found for url: {self.path}", head)
                return repo

            def _api(self, repo_id: str, rev: str | None, head: bool, fault: Fault | None) -> None:
                repo = self._repo(repo_id, head)
                if repo is None:
                    return
                commit = repo.commit_of(rev or "main")
                if commit is None:
                    return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}", head)
                siblings = []
                for name, f in sorted(repo.files.items()):
                    entry = {"rfilename": name, "size": f.size, "blobId": f.oid if not f.lfs else
                             hashlib.sha1(f.oid.encode()).hexdigest()}
                    if f.lfs:
                        entry["lfs"] = {"sha256": f.oid, "size": f.size, "pointerSize": 134}
                    siblings.append(entry)
                body = json.dumps({"id": repo.repo_id, "modelId": repo.repo_id, "sha": commit,
                                   "gated": "manual" if repo.gated else False, "private": False,
                                   "siblings": siblings}).encode()
                if fault and fault.body_override is not None:
                    body = fault.body_override
                self._send(200, {"Content-Type": "application/json"}, body, head, fault)

            def _tree(self, repo_id: str, rev: str, head: bool, fault: Fault | None) -> None:
                """`/api/models/<repo>/tree/<rev>` (snapshot_download, list_repo_files): every file, no paging."""
                repo = self._repo(repo_id, head)
                if repo is None:
                    return
                if repo.commit_of(rev) is None:
                    return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}", head)
                entries = []
                for name, f in sorted(repo.files.items()):
                    e = {"type": "file", "oid": f.oid if not f.lfs else hashlib.sha1(f.oid.encode()).hexdigest(),
                         "size": f.size, "path": name}
                    if f.lfs:
                        e["lfs"] = {"oid": f.oid, "size": f.size, "pointerSize": 134}
                    entries.append(e)
                self._send(200, {"Content-Type": "application/json"}, json.dumps(entries).encode(), head, fault)

            def _resolve(self, repo_id: str, rev: str, name: str, head: bool, fault: Fault | None) -> None:
                repo = self._repo(repo_id, head)
                if repo is None:
                    return
                if repo.gated and not self._authorized():
                    return self._error(401, "GatedRepo", f"Access to model {repo_id} is restricted. You must have "
                                       "access to it and be authenticated to access it. Please log in.", head)
                commit = repo.commit_of(urllib.parse.unquote(rev))
                if commit is None:
                    return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}", head)
                f = repo.files.get(name)
                if f is None:  # the hub names the commit it looked in (huggingface_hub needs it for .no_exist)
                    return self._error(404, "EntryNotFound", f"{name} does not exist", head,
                                       {"X-Repo-Commit": commit})
                served_commit = "f" * 40 if fault and fault.wrong_commit else commit
                common = {"X-Repo-Commit": served_commit, "Accept-Ranges": "bytes"}
                etag = {} if fault and fault.etag == "" else \
                    {"ETag": f'"{fault.etag if fault and fault.etag is not None else f.oid}"'}
                if f.lfs:  # the hub sends LFS files from its CDN
                    loc = f"{server.cdn}/cdn/{f.oid}/{repo_id}/{commit}/{urllib.parse.quote(name)}"
                    linked = {"X-Linked-Etag": etag["ETag"]} if etag else {}
                    return self._send(302, {**common, "Location": loc, **linked,
                                            "X-Linked-Size": str(f.size), **etag}, b"", head)
                if fault and fault.body_override is not None and not head:
                    return self._send(200, {**common, **etag, **(fault.headers or {})}, fault.body_override, False)
                self._serve(f, {**common, **etag, **((fault and fault.headers) or {})}, head, fault)

            def _cdn(self, repo_id: str, commit: str, name: str, head: bool, fault: Fault | None) -> None:
                if self.headers.get("Authorization"):  # the hub's token never goes to its CDN
                    return self._error(400, "TokenLeak", "a hub token was sent to the CDN", head)
                repo = server.repos.get(repo_id)
                f = repo.files.get(name) if repo else None
                if f is None:
                    return self._error(404, "EntryNotFound", "no such object", head)
                self._serve(f, {"ETag": f'"{f.oid}"'}, head, fault)

            def _serve(self, f: RepoFile, headers: dict, head: bool, fault: Fault | None) -> None:
                rng = self.headers.get("Range")
                if fault and fault.endless and not head:
                    return self._endless(headers)
                if fault and fault.encoding and not head:
                    bomb = gzip_bomb()
                    return self._send(200, {**headers, "Content-Encoding": fault.encoding}, bomb, False)
                m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng or "")
                if fault and fault.ignore_range and not head and f.size > 64 << 20:
                    return self._stream_whole(f, headers)
                if m and not (fault and fault.ignore_range):
                    start = int(m.group(1))
                    end = int(m.group(2)) + 1 if m.group(2) else f.size
                    end = min(end, f.size)
                    if start >= f.size:
                        return self._send(416, {"Content-Range": f"bytes */{f.size}"}, b"", head)
                    hdrs = {**headers, "Content-Range": f"bytes {start}-{end - 1}/{f.size}"}
                    if head:
                        return self._send_head(206, hdrs, end - start)
                    return self._send(206, hdrs, f.read(start, end), False, fault)
                if head:
                    return self._send_head(200, headers, f.size)
                if f.size > 64 << 20:  # a whole weight file: never sent by these tests; refuse loudly
                    return self._send(500, {}, b"test server: refusing to send a whole virtual weight file", head)
                self._send(200, headers, f.read(0, f.size), head, fault)

            def _endless(self, headers: dict) -> None:
                """A 200 body with no Content-Length that goes on until the client hangs up (at most
                256 MiB, so the server thread ends by itself)."""
                self.send_response(200)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Connection", "close")
                self.end_headers()
                sent, chunk = 0, b"\0" * (1 << 20)
                try:
                    while sent < 256 << 20:
                        self.wfile.write(chunk)
                        sent += len(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                self._record(200, sent)
                self.close_connection = True

            def _stream_whole(self, f: RepoFile, headers: dict) -> None:
                """A server that ignores Range and sends a whole (virtual) weight file: in 1 MiB
                pieces until the client hangs up."""
                self.send_response(200)
                self.send_header("Content-Length", str(f.size))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                sent = 0
                try:
                    while sent < f.size:
                        chunk = f.read(sent, sent + (1 << 20))
                        self.wfile.write(chunk)
                        sent += len(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                self._record(200, sent)
                self.close_connection = True

            def _send_head(self, status: int, headers: dict, length: int) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(length))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self._record(status, 0)

        return Handler
