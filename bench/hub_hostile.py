"""A hostile-input campaign (issues 54 and 67): modes the test suite does not run, each in a fresh sandbox.

    python bench/hub_hostile.py [--json bench/results/hub_hostile.json] [--only NAME]

Each case is a fresh `python -m surgery` process against the local hub (tests/hub/hubserver.py),
with HF_HOME in a sandbox root that also holds a "victim" folder and the process's working folder.
Three kinds:
  server   the server misbehaves on one path; then the same command against a healthy server;
  plant    a healthy run fills the cache, something is planted in it, the command runs again; then
           a `--refresh` run and a plain run against the healthy server;
  convert  `surgery convert` of the hub head (a whole download) against a misbehaving server;
  local    (issue 67) a local input that is no regular file: a recipe, config or prompt file that is a
           FIFO, a device, a socket, a link loop or a 5,000-character path;
  interrupt (issue 67) a convert killed mid-download (SIGTERM, SIGINT, SIGKILL); then the healthy run.
Each case belongs to a class (`--class`): hub, local, environment, proxy, interrupts. The environment
and proxy cases set variables for the hostile run only (an HTTPS proxy that trickles after CONNECT,
stays silent, refuses with escapes; HF_ENDPOINT=file://, fractional and huge numbers).
Per case: the exit code and the codes said, a traceback or not, files created or changed outside
HF_HOME, `*.incomplete` files or dangling snapshot links left, wall seconds and peak RSS (wait4),
the token printed, a raw escape (ESC) on stdout or stderr, and whether the healthy rerun(s) exit 0. Deadlines: SURGERY_HUB_DEADLINE=6,
SURGERY_HUB_DOWNLOAD_DEADLINE=6, HF_HUB_DOWNLOAD_TIMEOUT=3; a process is killed at 120 s.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from hub import hubserver as hs  # noqa: E402
from hub.hostile import half_written, snapshot  # noqa: E402
from hub.hubserver import Fault, HubServer, Repo, RepoFile  # noqa: E402
from hub.repos import TINY_HEAD, TINY_TARGET, tiny_repos  # noqa: E402

DEADLINE = 6.0
KILL_AFTER = 120
TARGET_FOLDER = "models--test-org--tiny-llama"
API = "/api/models/" + TINY_TARGET
RESOLVE = f"/{TINY_TARGET}/resolve/"
HEAD_RESOLVE = f"/{TINY_HEAD}/resolve/"

# the campaign's own answers that break HTTP (hubserver's tables, extended here)
hs.RAW_MODES.update({
    "status-not-numeric": b"HTTP/1.1 abc OK\r\nContent-Length: 2\r\n\r\n{}",
    "status-999": b"HTTP/1.1 999 Weird\r\nContent-Length: 2\r\n\r\n{}",
    "status-099": b"HTTP/1.1 099 Low\r\nContent-Length: 2\r\n\r\n{}",
    "http09-body-only": b'{"model_type": "llama"}',
    "header-no-colon": b"HTTP/1.1 200 OK\r\nNoColonHere\r\nContent-Length: 2\r\n\r\n{}",
    "header-nul": b"HTTP/1.1 200 OK\r\nX-A: a\x00b\r\nContent-Length: 2\r\n\r\n{}",
    "length-negative": b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n{}",
    "length-twice": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 9\r\n\r\n{}",
    "length-float": b"HTTP/1.1 200 OK\r\nContent-Length: 1e3\r\n\r\n{}",
    "length-superscript": "HTTP/1.1 200 OK\r\nContent-Length: ²\r\n\r\n{}".encode("latin-1", "replace"),
    "te-unknown": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    "chunk-line-64k": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;" + b"e" * 70_000 + b"\r\n{}\r\n0\r\n\r\n",
    "trailer-flood": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n"
                     + b"".join(b"T%d: x\r\n" % i for i in range(5000)) + b"\r\n",
    "early-hints-then-ok": b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
    "close-at-once": b"",
    "range-star-total": b"HTTP/1.1 206 Partial\r\nContent-Range: bytes 0-1/*\r\nContent-Length: 2\r\n\r\n{}",
    "range-huge-total": b"HTTP/1.1 206 Partial\r\nContent-Range: bytes 0-1/1000000000000000000000000000\r\n"
                        b"Content-Length: 2\r\n\r\n{}",
    "redirect-bad-ipv6": b"HTTP/1.1 302 Found\r\nLocation: http://[::1/x\r\nContent-Length: 0\r\n\r\n",
    "redirect-port-huge": b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:99999/x\r\nContent-Length: 0\r\n\r\n",
    "redirect-non-ascii": "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:1/é\x7f\r\nContent-Length: 0\r\n\r\n"
                          .encode("latin-1"),
    "redirect-ftp": b"HTTP/1.1 302 Found\r\nLocation: ftp://127.0.0.1/x\r\nContent-Length: 0\r\n\r\n",
    "retry-after-superscript": "HTTP/1.1 503 Busy\r\nRetry-After: ²\r\nContent-Length: 0\r\n\r\n".encode("latin-1"),
    "retry-after-huge": b"HTTP/1.1 429 Slow\r\nRetry-After: 99999999999999\r\nContent-Length: 0\r\n\r\n",
    "error-bidi-flood": b"HTTP/1.1 418 Teapot\r\nX-Error-Message: " + "\u202e".encode("utf-8") * 20_000
                        + b"\r\nContent-Length: 0\r\n\r\n",
    "error-body-10mb": b"HTTP/1.1 400 Bad\r\nContent-Length: 10485760\r\n\r\n" + b"\x1b[2J" * (10 << 18),
    "brotli-config": b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 2\r\n\r\n{}",
})
hs.RAW_FLOODS.update({"processing-flood": b"HTTP/1.1 102 Processing\r\n\r\n",
                      "early-hints-flood": b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"})
hs.RAW_TRICKLES.update({"trickle-status-slow": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"})


def raw(mode: str, where: str = RESOLVE, **kw) -> dict:
    return {where: Fault(raw=mode, raw_interval_s=kw.pop("interval", 0.2), **kw)}


def listing_with(server: HubServer, edit) -> dict:
    repo = server.repos[TINY_TARGET]
    siblings = [{"rfilename": n, "size": f.size, "blobId": f.oid} for n, f in sorted(repo.files.items())]
    info = {"id": TINY_TARGET, "sha": repo.main, "siblings": siblings}
    edit(info)
    return {API: Fault(body_override=json.dumps(info).encode())}


def listing_with_head(server: HubServer, edit) -> dict:
    """The head's model info (what convert downloads), edited."""
    repo = server.repos[TINY_HEAD]
    siblings = [{"rfilename": n, "size": f.size, "blobId": f.oid} for n, f in sorted(repo.files.items())]
    info = {"id": TINY_HEAD, "sha": repo.main, "siblings": siblings}
    edit(info)
    return {"/api/models/" + TINY_HEAD: Fault(body_override=json.dumps(info).encode())}


def shard_repo(server: HubServer, *shards: str) -> str:
    """A repo whose index maps one tensor to each of `shards` (all copies of the tiny target's file)."""
    name = "test-org/shards-" + str(abs(hash(shards)) % 10**8)
    tiny = server.repos[TINY_TARGET]
    weight_map = {"model.embed_tokens.weight": shards[0]}
    index = {"metadata": {}, "weight_map": weight_map}
    files = {"config.json": tiny.files["config.json"],
             "model.safetensors.index.json": RepoFile(json.dumps(index).encode())}
    for s in shards:
        files[s] = tiny.files["model.safetensors"]
    server.repos[name] = Repo(name, files)
    return name


# -- plants ------------------------------------------------------------------------------------------------

def _ranges(home: Path, commit: str) -> Path:
    return home / "spec-surgery" / TARGET_FOLDER / commit


def plant(which: str, how: str):
    def do(home: Path, server: HubServer) -> None:
        commit = server.repos[TINY_TARGET].main
        repo = home / "hub" / TARGET_FOLDER
        paths = {"refs": repo / "refs" / "main", "snapshot": repo / "snapshots" / commit / "config.json",
                 "listing": _ranges(home, commit) / "listing.json",
                 "range": next(p for p in (_ranges(home, commit) / "ranges").rglob("*") if p.is_file()),
                 "range-folder": next(p for p in (_ranges(home, commit) / "ranges").iterdir()),
                 "blob": (repo / "snapshots" / commit / "config.json").resolve(),
                 "no-exist": repo / ".no_exist" / commit / "config.json",
                 "no-exist-folder": repo / ".no_exist" / commit,
                 "snapshots": repo / "snapshots" / commit,
                 "blobs": repo / "blobs"}
        p = paths[which]
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            p.unlink()
        p.parent.mkdir(parents=True, exist_ok=True)
        if how == "fifo":
            os.mkfifo(p)
        elif how == "socket":
            s = socket.socket(socket.AF_UNIX)
            s.bind(str(p))
            s.close()
        elif how == "dir":
            p.mkdir()
        elif how == "loop":
            p.symlink_to(p.name)
        elif how.startswith("link:"):
            p.symlink_to(how[5:])
        elif how == "big":
            with open(p, "wb") as fh:
                fh.truncate(100 << 20)
        elif how == "garbage":
            p.write_bytes(b"  not-a-sha \n")
        elif how == "file":
            p.write_bytes(b"")
        else:
            raise ValueError(how)
    return do


def outside_dir(home: Path) -> str:
    out = home.parent / "elsewhere"
    out.mkdir(exist_ok=True)
    return str(out)


def plant_outside(which: str):
    def do(home: Path, server: HubServer) -> None:
        plant(which, "link:" + outside_dir(home))(home, server)
    return do



# -- issue 67: proxies, local inputs, interrupts -----------------------------------------------------------

TOKEN = "hf_test_token"
MAX_RSS_MIB = 1024


class Proxy:
    """An HTTPS proxy for the campaign, one mode for all its connections (bounded: its threads end)."""

    def __init__(self, mode: str):
        self.mode = mode
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn):
        with conn:
            try:
                conn.settimeout(60)
                data = b""
                while b"\r\n\r\n" not in data and len(data) < 65536:
                    piece = conn.recv(4096)
                    if not piece:
                        return
                    data += piece
                if self.mode == "silent":
                    time.sleep(40)
                elif self.mode == "trickle":
                    conn.sendall(b"HTTP/1.1 200 Connection established\r\n")
                    for _ in range(400):
                        conn.sendall(b"p")
                        time.sleep(0.1)
                elif self.mode == "refuse-escapes":
                    conn.sendall(b"HTTP/1.1 407 \x1b[2J\x1b]0;pwned\x07" + TOKEN.encode() + b"\r\n\r\n")
                elif self.mode == "close":
                    conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                elif self.mode == "header-flood":
                    conn.sendall(b"HTTP/1.1 200 Connection established\r\n")
                    for i in range(200_000):
                        conn.sendall(b"X-%d: v\r\n" % i)
            except OSError:
                return

    def close(self):
        self.sock.close()


def local_input(kind: str):
    """A path under the case's root that is no regular file (made when the case runs)."""
    def make(root: Path) -> str:
        p = root / "cwd" / f"input-{kind}.yaml"
        if kind == "fifo":
            os.mkfifo(p)
        elif kind == "dev-zero-link":
            p.symlink_to("/dev/zero")
        elif kind == "dev-urandom":
            return "/dev/urandom"
        elif kind == "loop":
            p.symlink_to(p.name)
        elif kind == "socket":
            s = socket.socket(socket.AF_UNIX)
            s.bind(str(p))
            s.close()
        elif kind == "long":
            return str(root / ("x" * 5000))
        elif kind == "proc":
            return "/proc/self/environ"
        return str(p)
    return make


def bad_header_range(kind: str):
    """A stored header range replaced by one that fails the header checks (same size, as its name says)."""
    headers = {"overlap": '{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},'
                          '"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}}',
               "nan": '{"a":{"dtype":"F32","shape":[NaN],"data_offsets":[0,16]}}',
               "bad-json": '{"a":'}

    def do(home: Path, server: HubServer) -> None:
        commit = server.repos[TINY_TARGET].main
        head = next(p for p in (_ranges(home, commit) / "ranges").rglob("0-*") if p.is_file())
        raw = headers[kind].encode()
        raw += b" " * (-len(raw) % 8)
        data = (struct.pack("<Q", len(raw)) + raw).ljust(head.stat().st_size, b" ")
        head.write_bytes(data[:head.stat().st_size])
    return do

# -- the cases ---------------------------------------------------------------------------------------------

def cases(server: HubServer) -> list[dict]:
    big = 10 ** 20
    out = []

    def add(name, kind="server", faults=None, plant_fn=None, target=TINY_TARGET, offline=False, env=None,
            refused=None, mount=None, cls="hub", hostile_env=None, local=None, sig=None, proxy=None):
        out.append({"name": name, "kind": kind, "faults": faults or {}, "plant": plant_fn, "target": target,
                    "offline": offline, "env": env or {}, "refused": refused, "mount": mount, "cls": cls,
                    "hostile_env": hostile_env or {}, "local": local, "signal": sig, "proxy": proxy})

    for mode in ("status-not-numeric", "status-999", "status-099", "http09-body-only", "header-no-colon",
                 "header-nul", "length-negative", "length-twice", "length-float", "length-superscript",
                 "te-unknown", "chunk-line-64k", "trailer-flood", "early-hints-then-ok", "close-at-once",
                 "redirect-bad-ipv6", "redirect-port-huge", "redirect-non-ascii", "redirect-ftp",
                 "retry-after-superscript", "retry-after-huge", "error-bidi-flood", "error-body-10mb",
                 "brotli-config"):
        add(f"config: {mode}", faults=raw(mode))
    for mode in ("range-star-total", "range-huge-total"):
        add(f"range: {mode}", faults=raw(mode, "/cdn/"))
    add("api: 102 Processing flood", faults=raw("processing-flood", API, interval=0.5))
    add("api: 103 Early Hints flood", faults=raw("early-hints-flood", API, interval=0.5))
    add("range: 100 Continue flood on the CDN", faults=raw("continue-flood", "/cdn/", interval=0.5))
    add("range: headers trickled from the CDN", faults=raw("trickle-status-slow", "/cdn/", interval=1.0))
    add("config: status line trickled, 1 byte / 2 s", faults=raw("trickle-status-slow", interval=2.0))
    add("config: accepted, never answered", faults={RESOLVE: Fault(delay_s=30)})
    add("range: body trickled 1 byte / 0.5 s", faults={"/cdn/": Fault(trickle_s=0.5)})
    add("api: sizes as strings, negative, 10^20", faults=listing_with(server, lambda i: [
        s.update(size=v) for s, v in zip(i["siblings"], ("12", -1, big))]))
    add("api: a file name with a bidi override", faults=listing_with(server, lambda i: i["siblings"].append(
        {"rfilename": "evil\u202egnp.json", "size": 2, "blobId": "0" * 40})))
    add("api: 50,000 siblings", faults=listing_with(server, lambda i: i["siblings"].extend(
        {"rfilename": f"f/{k}.bin", "size": 1, "blobId": "%040x" % k} for k in range(50_000))))
    add("api: the sha in upper case", faults=listing_with(server, lambda i: i.update(sha=i["sha"].upper())))
    add("api: a blob id in upper case", faults=listing_with(server, lambda i: i["siblings"][0].update(
        blobId=i["siblings"][0]["blobId"].upper())))
    add("api: gated is a deep object", faults=listing_with(server, lambda i: i.update(gated={"a": [{"b": 1}] * 1000})))
    add("api: the same file listed twice, two sizes", faults=listing_with(server, lambda i: i["siblings"].append(
        {**i["siblings"][0], "size": 7})))
    # a repo whose own content is hostile: refused on every run, against any server
    add("index: shard name with a NUL", target=shard_repo(server, "a\x00b.safetensors"), refused="SRG063")
    add("index: shards `x` and `x/y`", target=shard_repo(server, "x", "x/y"))
    add("index: shards `a/b` and `a%2Fb`", target=shard_repo(server, "a/b", "a%2Fb"))
    add("index: a shard named `ranges`", target=shard_repo(server, "ranges"))
    add("index: a 1,000-byte shard name of 4 parts", target=shard_repo(server, "/".join(["p" * 249] * 4)))
    add("pin: a branch answered with files of another commit", faults={RESOLVE: Fault(wrong_commit=True)})
    add("error: 418 with a 60 kB message of escapes", faults={API: Fault(status=418, headers={
        "X-Error-Message": "\x1b]0;pwned\x07\x1b[2J" * 4000})})
    add("pin: X-Repo-Commit with escapes", faults={RESOLVE: Fault(headers={"X-Repo-Commit": "\x1b[31m" + "f" * 40})})
    for which, how, offline in (("refs", "socket", False), ("refs", "dir", False), ("refs", "loop", False),
                                ("refs", "big", False), ("refs", "garbage", False), ("listing", "fifo", True),
                                ("listing", "big", True), ("snapshot", "link:/dev/urandom", False),
                                ("snapshot", "dir", False), ("blob", "fifo", False), ("range", "dir", False),
                                ("range", "link:/etc/passwd", False), ("range-folder", "file", False),
                                ("no-exist", "fifo", False), ("no-exist-folder", "file", False),
                                ("refs", "link:/proc/self/mem", False), ("range", "link:/dev/zero", True)):
        add(f"cache: {which} planted as {how}{' (offline)' if offline else ''}", kind="plant",
            plant_fn=plant(which, how), offline=offline)
    # a folder of the cache linked outside it: refused (SRG063) on every run until a person removes the
    # link (it may be theirs: a blob folder moved to another disk), never written through, never removed
    add("cache: snapshots/<commit> linked outside", kind="plant", plant_fn=plant_outside("snapshots"), refused="SRG063")
    add("cache: blobs/ linked outside", kind="plant", plant_fn=plant_outside("blobs"), refused="SRG063")
    # a real full and a real read-only file system under HF_HOME (tmpfs; only where mount is allowed):
    # refused (SRG065) until the disk has room / is writable
    add("fs: HF_HOME on a 24 kB tmpfs (ENOSPC)", mount="size=24k", refused="SRG065")
    add("fs: HF_HOME on a read-only tmpfs (EROFS)", mount="ro,size=1m", refused="SRG065")
    add("convert: config.json body never ends", kind="convert", faults={HEAD_RESOLVE: Fault(endless=True)})
    add("convert: config Content-Length 1 GiB past the listed size", kind="convert",
        faults={HEAD_RESOLVE: Fault(headers={"Content-Length": str(1 << 30)})})
    add("convert: gzip bomb on the config", kind="convert", faults={HEAD_RESOLVE: Fault(encoding="gzip")})
    add("convert: weights trickled within every stall bound", kind="convert", faults={"/cdn/": Fault(trickle_s=0.02)})
    add("convert: redirect loop on the weights", kind="convert", faults={"/cdn/": Fault(redirect_loop=True)})
    add("convert: 5xx on every try", kind="convert", faults={"/cdn/": Fault(status=503)})
    add("convert: weights declared 1 TiB (listing)", kind="convert", faults=listing_with_head(
        server, lambda i: [s.update(size=1 << 40) for s in i["siblings"] if s["rfilename"] == "model.safetensors"]))
    add("convert: weights declared 60 GiB, body of zeros never ends", kind="convert", faults={
        **listing_with_head(server, lambda i: [s.update(size=60 << 30) for s in i["siblings"]
                                               if s["rfilename"] == "model.safetensors"]),
        "/cdn/": Fault(endless=True)})
    # issue 67, hub: secrets, escapes in summary lines, ids with a trailing newline
    add("error: 401 echoing the Authorization header", faults={API: Fault(status=401, headers={
        "X-Error-Message": f"invalid credentials: Authorization: Bearer {TOKEN}"})})
    add("error: 500 message with the token after 190 characters", faults={API: Fault(status=500, headers={
        "X-Error-Message": "x" * 190 + TOKEN})})
    add("redirect: to an address holding the token", faults={RESOLVE: Fault(redirect_to=f"ftp://{TOKEN}@h/x")})
    add("config: model_type with terminal escapes", faults={RESOLVE: Fault(body_override=json.dumps(
        {**json.loads(server.repos[TINY_TARGET].files["config.json"].content),
         "model_type": "llama\x1b[2J\x1b[32m"}).encode())})
    add("api: the sha with a trailing newline", faults=listing_with(server, lambda i: i.update(sha=i["sha"] + "\n")))
    add("api: a blob id with a trailing newline", faults=listing_with(server, lambda i: i["siblings"][0].update(
        blobId=i["siblings"][0]["blobId"] + "\n")))
    for kind in ("overlap", "nan", "bad-json"):
        add(f"cache: a stored header range that fails the checks ({kind})", kind="plant",
            plant_fn=bad_header_range(kind))
    add("cache: a stored header range that fails the checks (offline)", kind="plant",
        plant_fn=bad_header_range("overlap"), offline=True)
    # issue 67, local files: a recipe / a config / a prompt file that is no regular file
    for kind in ("fifo", "dev-zero-link", "dev-urandom", "loop", "socket", "long", "proc"):
        add(f"local: recipe is {kind}", kind="local", cls="local", local=("recipe", local_input(kind)))
        add(f"local: --target is {kind}", kind="local", cls="local", local=("target", local_input(kind)))
    for kind in ("fifo", "dev-zero-link"):
        add(f"local: --prompts is {kind}", kind="local", cls="local", local=("prompts", local_input(kind)))
    # issue 67, the environment (the hostile run only)
    for name, value in (("HF_HUB_DOWNLOAD_TIMEOUT", "2.5"), ("HF_HUB_DOWNLOAD_TIMEOUT", "abc"),
                        ("HF_HUB_DOWNLOAD_TIMEOUT", "-3"), ("HF_HUB_ETAG_TIMEOUT", "0.5"),
                        ("HF_HUB_ETAG_TIMEOUT", "x"), ("SURGERY_HUB_DEADLINE", "1e300"),
                        ("SURGERY_HUB_DEADLINE", "nan"), ("SURGERY_HUB_REQUEST_DEADLINE", "1e308"),
                        ("SURGERY_HUB_DOWNLOAD_DEADLINE", "-inf"), ("SURGERY_HUB_DOWNLOAD_MAX_BYTES", "1e30"),
                        ("HF_ENDPOINT", "file:///etc"), ("HF_ENDPOINT", "ftp://127.0.0.1/"),
                        ("HF_ENDPOINT", "http://"), ("HF_ENDPOINT", "http://h:99999"),
                        ("HF_ENDPOINT", "https://user:pw@h.co"), ("HF_ENDPOINT", "http://h.co/\x1b[2J"),
                        ("HF_HUB_OFFLINE", "\x1b[2J"), ("HF_HOME", "/dev/null/x")):
        add(f"env: {name}={value!r}", cls="environment", hostile_env={name: value})
    add("env: HF_HUB_DOWNLOAD_TIMEOUT=2.5 (convert)", kind="convert", cls="environment",
        hostile_env={"HF_HUB_DOWNLOAD_TIMEOUT": "2.5"})
    # issue 67, proxies: an HTTPS endpoint reached through HTTPS_PROXY
    for mode in ("trickle", "silent", "refuse-escapes", "close", "header-flood"):
        add(f"proxy: {mode} after CONNECT", cls="proxy", proxy=mode)
    # issue 67, interrupts: a convert stopped mid-download, then the healthy run
    for sig in ("SIGTERM", "SIGINT", "SIGKILL"):
        add(f"interrupt: convert, {sig} mid-download", kind="interrupt", cls="interrupts", sig=sig,
            faults={"/cdn/": Fault(trickle_s=0.05)})
    return out


# -- running -----------------------------------------------------------------------------------------------

# the child reports its own peak RSS (VmHWM: per address space, so not the campaign's own memory that
# ru_maxrss would carry across fork and exec)
_CHILD = ("import atexit, runpy, sys\n"
          "def _hwm():\n"
          "    for line in open('/proc/self/status'):\n"
          "        if line.startswith('VmHWM'):\n"
          "            sys.stderr.write('\\n@@' + line)\n"
          "atexit.register(_hwm)\n"
          "sys.argv = ['surgery', *sys.argv[1:]]\n"
          "runpy.run_module('surgery', run_name='__main__')\n")


def run(args: list[str], env: dict, cwd: Path, interrupt=None) -> dict:
    """One process; `interrupt`: (signal name, a folder) sends the signal once a partial download
    (`*.incomplete`) appears under the folder."""
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, *args], env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    if interrupt is not None:
        sig, folder = interrupt
        for _ in range(1200):
            if proc.poll() is not None or any(folder.rglob("blobs/.*.incomplete")):  # the weights' download
                break
            time.sleep(0.05)
        if proc.poll() is None:
            proc.send_signal(getattr(signal, sig))
    try:
        out, err = proc.communicate(timeout=KILL_AFTER)
        killed = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        killed = True
    wall = time.monotonic() - started
    text = err.decode("utf-8", "replace")
    hwm = re.search(r"\n@@VmHWM:\s+(\d+) kB", text)
    text = text[:hwm.start()] if hwm else text
    return {"rc": proc.returncode, "killed": killed, "wall_s": round(wall, 2),
            "rss_kb": int(hwm.group(1)) if hwm else None,
            "codes": sorted(set(re.findall(r"SRG\d{3}", text))), "traceback": "Traceback" in text,
            "stderr_bytes": len(text.encode()), "tail": text[-300:],
            "token_printed": TOKEN.encode() in out or TOKEN in text,
            "raw_escape": b"\x1b" in out or "\x1b" in text}


def one_case(server: HubServer, case: dict, base: Path) -> dict:
    root = Path(tempfile.mkdtemp(prefix="case-", dir=base))
    home, cwd = root / "hf", root / "cwd"
    home.mkdir()
    cwd.mkdir()
    if case["mount"]:
        subprocess.run(["mount", "-t", "tmpfs", "-o", case["mount"], "tmpfs", str(home)], check=True)
    (root / "victim").mkdir()
    (root / "victim" / "file.txt").write_bytes(b"precious\n")
    env = {**os.environ, "HF_ENDPOINT": server.endpoint, "HF_HOME": str(home), "HF_TOKEN": "hf_test_token",
           "SURGERY_HUB_DEADLINE": str(DEADLINE), "SURGERY_HUB_DOWNLOAD_DEADLINE": str(DEADLINE),
           "HF_HUB_DOWNLOAD_TIMEOUT": "3", "PYTHONPATH": str(REPO), **case["env"]}
    for k in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "SURGERY_HUB_CACHE", "HF_HUB_OFFLINE"):
        env.pop(k, None)
    if case["kind"] in ("convert", "interrupt"):
        args = ["convert", TINY_HEAD, "--to", "speculators", str(root / "converted"), "--target", TINY_TARGET,
                "--producer", "eagle"]
    else:
        args = ["validate", "eagle3", "--target", case["target"], "--draft", TINY_HEAD, "--weights"]
    hostile_args = args
    if case["local"]:
        where, make = case["local"]
        path = make(root)
        hostile_args = {"recipe": ["validate", path, "--target", TINY_TARGET, "--draft", TINY_HEAD],
                        "target": ["validate", "eagle3", "--target", path, "--draft", TINY_HEAD],
                        "prompts": ["probe", "gemma4-mtp", "--engine", "hf", "--prompts", path]}[where]
    result = {"name": case["name"], "kind": case["kind"], "class": case["cls"]}
    server.faults.clear()
    if case["kind"] == "plant":
        result["fill"] = run(args, env, cwd)["rc"]
        case["plant"](home, server)
    before = {p: v for p, v in snapshot(root).items() if not Path(p).is_relative_to(home)}
    planted_half = {str(p) for p in half_written(home)}  # a plant can leave a dangling link itself
    server.faults.update(case["faults"])
    hostile_env = {**env, **({"HF_HUB_OFFLINE": "1"} if case["offline"] else {}), **case["hostile_env"]}
    proxy = Proxy(case["proxy"]) if case["proxy"] else None
    if proxy is not None:
        hostile_env.update({"HF_ENDPOINT": "https://hub.example.invalid", "HTTPS_PROXY": proxy.url,
                            "https_proxy": proxy.url})
        for k in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
            hostile_env.pop(k, None)
    interrupt = (case["signal"], home) if case["signal"] else None
    result["hostile"] = run(hostile_args, hostile_env, cwd, interrupt)
    if proxy is not None:
        proxy.close()
    server.settle(30)
    server.faults.clear()
    after = {p: v for p, v in snapshot(root).items() if not Path(p).is_relative_to(home)}
    if case["local"]:  # the planted input itself is the case's, not a write
        before = {p: v for p, v in before.items() if "/input-" not in p}
        after = {p: v for p, v in after.items() if "/input-" not in p}
    if case["kind"] in ("convert", "interrupt"):
        after.pop(str(root / "converted"), None)
        after = {p: v for p, v in after.items() if not p.startswith(str(root / "converted"))}
    result["outside"] = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
    result["half_written"] = [str(p) for p in half_written(home) if str(p) not in planted_half]
    if case["signal"] == "SIGKILL":  # what a killed process leaves: the healthy run must remove it
        result["left_by_kill"], result["half_written"] = len(result["half_written"]), []
    reruns = [args + ["--refresh"]] if case["kind"] == "plant" else []
    if case["kind"] in ("convert", "interrupt"):
        shutil.rmtree(root / "converted", ignore_errors=True)
    healthy = [run(a, env, cwd) for a in reruns + [args]]
    result["healthy"] = [h["rc"] for h in healthy]
    result["half_written_after_healthy"] = [str(p) for p in half_written(home) if str(p) not in planted_half]
    if case["mount"]:
        subprocess.run(["umount", str(home)], check=True)
    result["refused"] = case["refused"]
    if case["refused"]:  # the same refusal again, nothing written outside meanwhile
        result["healthy_refused"] = all(h["rc"] == 2 and case["refused"] in h["codes"] for h in healthy)
    shutil.rmtree(root, ignore_errors=True)
    return result


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--only")
    ap.add_argument("--class", dest="cls", choices=("hub", "local", "environment", "proxy", "interrupts"))
    opts = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="hub-hostile-"))
    results = []
    probe = base / "probe"
    probe.mkdir()
    can_mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)],
                               capture_output=True).returncode == 0
    if can_mount:
        subprocess.run(["umount", str(probe)], check=True)
    with HubServer(tiny_repos(), token="hf_test_token") as server:
        for case in cases(server):
            if opts.only and opts.only not in case["name"] or case["mount"] and not can_mount \
                    or opts.cls and case["cls"] != opts.cls:
                continue
            r = one_case(server, case, base)
            h = r["hostile"]
            healthy_ok = r["healthy_refused"] if r["refused"] else all(rc == 0 for rc in r["healthy"])
            h["hung"] = h["killed"] or h["wall_s"] > KILL_AFTER / 2
            h["over_memory"] = (h["rss_kb"] or 0) > MAX_RSS_MIB << 10
            stopped = r["kind"] == "interrupt" and h["rc"] in (-9, 130, 143)
            ok = not h["traceback"] and not h["hung"] and not r["outside"] and not r["half_written"] \
                and not h["over_memory"] and not h["token_printed"] and not h["raw_escape"] \
                and not r["half_written_after_healthy"] and healthy_ok and (h["rc"] == 0 or h["codes"] or stopped)
            r["ok"] = ok
            results.append(r)
            print(f"{'ok ' if ok else 'BAD'} {h['rc']} {','.join(h['codes']) or '-':<18} {h['wall_s']:6.2f}s "
                  f"{(h['rss_kb'] or 0) // 1024:4d}MiB healthy={r['healthy']} {r['name']}"
                  + ("" if ok else f"\n    {h['tail']!r} outside={r['outside']} half={r['half_written']}"),
                  flush=True)
    shutil.rmtree(base, ignore_errors=True)
    hostile = [r["hostile"] for r in results]
    summary = {"cases": len(results), "bad": sum(not r["ok"] for r in results),
               "by_class": {c: sum(r["class"] == c for r in results) for c in sorted({r["class"] for r in results})},
               "tracebacks": sum(h["traceback"] for h in hostile), "killed": sum(h["killed"] for h in hostile),
               "hung": sum(h["hung"] for h in hostile), "over_1_gib": sum(h["over_memory"] for h in hostile),
               "token_printed": sum(h["token_printed"] for h in hostile),
               "raw_escapes": sum(h["raw_escape"] for h in hostile),
               "caches_not_healed": sum(bool(r["half_written_after_healthy"]) for r in results),
               "files_outside": sum(len(r["outside"]) for r in results),
               "half_written": sum(len(r["half_written"]) for r in results),
               "healthy_rerun_failures": sum(any(rc != 0 for rc in r["healthy"]) for r in results
                                             if not r["refused"]),
               "refused_on_every_run": sum(bool(r["refused"]) for r in results),
               "max_wall_s": max(h["wall_s"] for h in hostile), "max_rss_mib": max((h["rss_kb"] or 0) for h in hostile) // 1024,
               "max_stderr_bytes": max(h["stderr_bytes"] for h in hostile), "deadline_s": DEADLINE}
    print(json.dumps(summary, indent=2))
    if opts.json:
        Path(opts.json).write_text(json.dumps({"summary": summary, "cases": results}, indent=1) + "\n")
    return 0 if summary["bad"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
