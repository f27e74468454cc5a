"""Every input bounded, the third round (issue 67): the environment, proxies, interrupted downloads,
cached header ranges, convert's own bounds, secrets and summary lines, ids full-matched. One test (or
row) per class of the issue's list; the local files class is tests/test_local_inputs.py. Each checks
the exit code and code, no traceback, and the bound that fired by counting (bytes, pieces, files),
never by timing."""
from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
from time import sleep  # pauses only: no clock is read (tests/test_no_timed_assertions.py)
from pathlib import Path

import pytest

from hub.hostile import half_written, nothing_outside, refused, snapshot, validate
from hub.hubserver import Fault, Repo, RepoFile
from hub.repos import TINY_HEAD, TINY_TARGET
from testpaths import ROOT

TOKEN = "hf_test_token"  # the server's (tests/hub/conftest.py)
TARGET_FOLDER = "models--test-org--tiny-llama"
HEAD_FOLDER = "models--test-org--tiny-eagle3"


def surgery(*args, env_extra: dict | None = None, timeout: int = 300):
    """`python -m surgery ...` in a fresh process (what a module-level import crash needs)."""
    env = {**os.environ, **(env_extra or {})}
    proc = subprocess.run([sys.executable, "-m", "surgery", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=str(ROOT), timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


# -- class: the environment is trusted ----------------------------------------------------------------------

def test_a_fractional_download_timeout_does_not_crash_the_hub_library(sandbox, hubenv):
    """HF_HUB_DOWNLOAD_TIMEOUT=2.5 crashed huggingface_hub's constants on import (`int('2.5')`), a
    traceback from settings.token(). Now our parser takes it (2.5 s) and the library's own copy is
    written as an integer before it is imported: the run validates."""
    rc, out, err = surgery("validate", "eagle3", "--target", TINY_TARGET, "--draft", TINY_HEAD, "--weights",
                           env_extra={"HF_HUB_DOWNLOAD_TIMEOUT": "2.5"})
    assert rc == 0, err
    assert "Traceback" not in err


@pytest.mark.parametrize("name,value", [
    ("HF_HUB_DOWNLOAD_TIMEOUT", "abc"), ("HF_HUB_DOWNLOAD_TIMEOUT", "-1"), ("HF_HUB_DOWNLOAD_TIMEOUT", "nan"),
    ("HF_HUB_ETAG_TIMEOUT", "1e400"), ("SURGERY_HUB_DEADLINE", "1e300"), ("SURGERY_HUB_DEADLINE", "inf"),
    ("SURGERY_HUB_DEADLINE", "0"), ("SURGERY_HUB_REQUEST_DEADLINE", "-5"),
    ("SURGERY_HUB_DOWNLOAD_DEADLINE", "1e20"), ("SURGERY_HUB_DOWNLOAD_MAX_BYTES", "12abc")])
def test_a_bad_number_in_the_environment_is_a_usage_error(run_cli, sandbox, hubenv, monkeypatch, name, value):
    """A huge SURGERY_HUB_DEADLINE overflowed time_t in the socket layer; garbage was silently the
    default. Now SRG782 naming the variable, before any request."""
    monkeypatch.setenv(name, value)
    err = refused(validate(run_cli), "SRG782")
    assert name in err
    assert hubenv.log == []


@pytest.mark.parametrize("value", ["file:///etc", "ftp://example.com", "example.com", "http://", "https://u:p@h.co",
                                   "https://h.co/?q=1", "https://h.co:99999", "https://h.co/\x1b[2J"])
def test_an_endpoint_that_is_not_http_is_a_usage_error(run_cli, sandbox, hubenv, monkeypatch, value):
    """HF_ENDPOINT=file://... was accepted and read with no deadline. Now only http(s) with a host: SRG783."""
    monkeypatch.setenv("HF_ENDPOINT", value)
    err = refused(validate(run_cli), "SRG783")
    assert "\x1b" not in err


# -- class: the deadline has holes (a proxy) ---------------------------------------------------------------

class TrickleProxy:
    """An HTTPS proxy that answers CONNECT with 200 and then trickles its header lines, one byte every
    `interval` s, at most `limit` bytes (so its thread ends by itself); counts the bytes it sent."""

    def __init__(self, interval: float = 0.05, limit: int = 400):
        self.interval, self.limit = interval, limit
        self.sent = 0
        self.connects = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.thread = threading.Thread(target=self._serve, daemon=True)

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
            data = b""
            while b"\r\n\r\n" not in data:
                piece = conn.recv(4096)
                if not piece:
                    return
                data += piece
            if data.startswith(b"CONNECT "):
                self.connects += 1
            try:
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n")
                padding = b"X-Pad: " + b"p" * self.limit
                for i in range(self.limit):
                    conn.sendall(padding[i:i + 1])
                    self.sent += 1
                    sleep(self.interval)
            except OSError:
                return

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.sock.close()


def test_a_proxy_that_trickles_after_connect_is_cut_by_the_deadline(run_cli, sandbox, hubenv, monkeypatch):
    """An HTTPS proxy that answered CONNECT and then trickled its headers held the run past any
    deadline (the tunnel's answer was read before the deadline's socket was in place). Now it is read
    through that socket: SRG056 with SURGERY_HUB_DEADLINE=1, and the proxy sent fewer bytes than it
    would have (its own bound), so the deadline is what ended it."""
    root, cache_root, _ = sandbox
    with TrickleProxy() as proxy:
        monkeypatch.setenv("HF_ENDPOINT", "https://hub.example.invalid")
        for name in ("HTTPS_PROXY", "https_proxy"):
            monkeypatch.setenv(name, proxy.url)
        for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("SURGERY_HUB_DEADLINE", "1")
        before = snapshot(root)
        err = refused(validate(run_cli), "SRG056")
        assert proxy.connects >= 1
        assert proxy.sent < proxy.limit, proxy.sent
    nothing_outside(root, cache_root, before)


# -- class: interrupted downloads leak --------------------------------------------------------------------

def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_dead_processs_partial_file_is_removed_and_a_live_one_kept(run_cli, sandbox, hubenv):
    """SIGKILL mid-download left `blobs/.<sha>.<rand>.incomplete` for ever. Now partial files carry
    the writer's pid and a download's is locked: the next run removes one whose pid is gone and whose
    lock nobody holds, and never touches a live one (locked) or huggingface_hub's own (`<etag>.incomplete`)."""
    import fcntl

    root, cache_root, _ = sandbox
    assert validate(run_cli)[0] == 0
    blobs = cache_root / "hub" / TARGET_FOLDER / "blobs"
    sha = "a" * 64
    dead = blobs / f".{sha}.{_dead_pid()}.k1l2m3n4.incomplete"
    live = blobs / f".{sha}.{os.getpid()}.q5r6s7t8.incomplete"
    theirs = blobs / f"{sha}.incomplete"
    for p in (dead, live, theirs):
        p.write_bytes(b"partial")
    with open(live, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        from surgery.hub import cache

        cache._SWEPT.clear()  # a new run (one sweep a process)
        assert validate(run_cli)[0] == 0
        assert not dead.exists()
        assert live.exists() and theirs.exists()


def _wait_for(predicate, tries: int = 600, pause: float = 0.1) -> bool:
    for _ in range(tries):  # a hang guard (at most a minute), counted in tries, not timed
        if predicate():
            return True
        sleep(pause)
    return False


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_download_interrupted_leaves_nothing_the_next_run_keeps(sandbox, hubenv, tmp_path, how):
    """SIGTERM had no handler in the download phase, and SIGKILL leaves the partial file. Now SIGTERM
    unwinds as SIGINT does (exit 143, the partial file removed on the way out), and what SIGKILL left
    is removed by the next run, which converts the head."""
    root, cache_root, _ = sandbox
    hubenv.faults["/cdn/"] = Fault(trickle_s=0.05)
    out = tmp_path / "converted"
    args = [sys.executable, "-m", "surgery", "convert", TINY_HEAD, "--to", "speculators", str(out), "--target",
            TINY_TARGET, "--producer", "eagle"]
    proc = subprocess.Popen(args, cwd=str(ROOT), env=dict(os.environ), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    blobs = cache_root / "hub" / HEAD_FOLDER / "blobs"
    try:
        assert _wait_for(lambda: blobs.is_dir() and any(p.name.endswith(".incomplete") for p in blobs.iterdir()))
        proc.send_signal(getattr(signal, how))
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "Traceback" not in err, err
    if how == "SIGTERM":
        assert proc.returncode == 143, err
        assert not half_written(cache_root)
    else:
        assert half_written(cache_root)
    hubenv.faults.clear()
    rc, _, err = surgery("convert", TINY_HEAD, "--to", "speculators", str(out), "--target", TINY_TARGET,
                         "--producer", "eagle")
    assert rc == 0, err
    assert not half_written(cache_root)


# -- class: bad ranges stick -------------------------------------------------------------------------------

def _raw_safetensors(header: str, data_bytes: int = 64) -> bytes:
    raw = header.encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + b"\0" * data_bytes


BAD_HEADERS = {
    "overlapping": '{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},'
                   '"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}}',
    "negative": '{"a":{"dtype":"F32","shape":[4],"data_offsets":[-16,0]}}',
    "nan": '{"a":{"dtype":"F32","shape":[NaN],"data_offsets":[0,16]}}',
    "huge-int": '{"a":{"dtype":"F32","shape":[' + "9" * 5000 + '],"data_offsets":[0,16]}}',
    "bad-json": '{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]',
}


@pytest.mark.parametrize("kind", sorted(BAD_HEADERS))
def test_a_header_that_fails_the_checks_is_never_stored(run_cli, sandbox, hubenv, kind):
    """A header range that did not parse (bad JSON, huge ints, NaN, overlapping or negative offsets)
    was stored in ranges/ and every later run failed on it against a healthy hub. Now SRG600 and
    nothing stored for that file; overlapping offsets (which the safetensors package refuses) too."""
    root, cache_root, _ = sandbox
    name = f"test-org/bad-header-{kind}"
    tiny = hubenv.repos[TINY_TARGET]
    hubenv.repos[name] = Repo(name, {"config.json": tiny.files["config.json"],
                                     "model.safetensors": RepoFile(_raw_safetensors(BAD_HEADERS[kind]), lfs=True)})
    refused(validate(run_cli, name), "SRG600")
    stored = list((cache_root / "spec-surgery" / f"models--test-org--bad-header-{kind}").rglob("ranges/*/*"))
    assert stored == [], stored


def _stored_head(cache_root: Path) -> Path:
    found = [p for p in (cache_root / "spec-surgery" / TARGET_FOLDER).rglob("ranges/model.safetensors/0-*")]
    assert len(found) == 1, found
    return found[0]


def test_a_stored_range_that_fails_the_checks_heals_online_and_is_named_offline(run_cli, sandbox, hubenv,
                                                                                monkeypatch):
    """A range an older version stored (or someone planted) that fails the header checks: offline it is
    SRG784 naming the cache (not the repo) and removed; online it is read anew and the run passes."""
    root, cache_root, _ = sandbox
    assert validate(run_cli)[0] == 0
    head = _stored_head(cache_root)
    good = head.read_bytes()
    bad = _raw_safetensors(BAD_HEADERS["overlapping"], 0)
    head.write_bytes((bad + b" " * len(good))[:len(good)])  # same size, as its name says
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    err = refused(validate(run_cli), "SRG784")
    assert "removed" in err and not head.exists()
    monkeypatch.delenv("HF_HUB_OFFLINE")
    head.parent.mkdir(parents=True, exist_ok=True)
    head.write_bytes((bad + b" " * len(good))[:len(good)])
    hubenv.reset_log()
    rc, out, err = validate(run_cli)
    assert rc == 0, err
    assert _stored_head(cache_root).read_bytes() == good
    assert any("/model.safetensors" in r["path"] or "/cdn/" in r["path"] for r in hubenv.log)


# -- class: convert takes its bounds from the listing -------------------------------------------------------

@pytest.mark.parametrize("declared", [1 << 40, 60 << 30])
def test_convert_does_not_take_its_bounds_from_the_listing(sandbox, hubenv, monkeypatch, declared):
    """A listing that declared 1 TiB for a 134 kB file set both the byte bound and the download
    deadline; 1 GiB was written before the refusal. Now a listed size past our own bound
    (SURGERY_HUB_DOWNLOAD_MAX_BYTES, 64 GiB) is SRG785 before the file is asked for, and one under it
    is held to the file's own header as its first bytes arrive: SRG785 after 8 bytes of a body of
    zeros that never ends (the server's own cap is 256 MiB; it sent less than 64 MiB, socket buffers)."""
    from surgery.text.diagnostics import SurgeryError
    from surgery.hub.source import open_hub_model
    from surgery.modelfiles.source import parse_hub_ref

    root, cache_root, _ = sandbox
    monkeypatch.setenv("SURGERY_HUB_DOWNLOAD_DEADLINE", "20")
    src = open_hub_model(parse_hub_ref(TINY_HEAD), TINY_HEAD)
    src.files["model.safetensors"]["size"] = declared  # what the listing declared
    hubenv.faults["/cdn/"] = Fault(endless=True)
    before = snapshot(root)
    with pytest.raises(SurgeryError) as ei:
        src.download()
    assert ei.value.diagnostics[0].code == "SRG785", ei.value
    hubenv.settle(30)
    sent = sum(r["bytes"] for r in hubenv.log if r["path"].startswith("/cdn/"))
    assert sent < 64 << 20, sent
    nothing_outside(root, cache_root, before)
    assert not half_written(cache_root)


# -- class: text and secrets --------------------------------------------------------------------------------

def test_a_server_that_echoes_the_token_never_gets_it_printed(run_cli, sandbox, hubenv):
    """A 401 whose message echoed the Authorization header printed the token. Now our token is masked
    in every server text we quote (before it is cut, so no prefix of it survives either)."""
    hubenv.faults["/api/models/" + TINY_TARGET] = Fault(status=401, headers={
        "X-Error-Message": f"invalid credentials in header Authorization: Bearer {TOKEN}"})
    err = refused(validate(run_cli), "SRG053")
    assert TOKEN not in err and "<your token>" in err, err
    hubenv.faults["/api/models/" + TINY_TARGET] = Fault(status=418, headers={"X-Error-Message": "x" * 190 + TOKEN})
    err = refused(validate(run_cli), "SRG055")
    assert TOKEN[:6] not in err, err


def test_a_model_type_with_terminal_escapes_is_printed_escaped(run_cli, tmp_path):
    """The verdict line and the plan printed a config's model_type raw (the diagnostics were escaped).
    Now every stdout line goes through the same escaping."""
    from testpaths import E2B, E2B_ASSISTANT

    draft = json.loads(Path(E2B_ASSISTANT).read_text())
    draft["model_type"] = draft["model_type"] + "\x1b[2J\x1b[32m"
    path = tmp_path / "draft.json"
    path.write_text(json.dumps(draft))
    for command in ("validate", "plan"):
        rc, out, err = run_cli(command, "gemma4-mtp", "--target", E2B, "--draft", path)
        assert "\x1b" not in out and "\x1b" not in err, (command, out[:300])


# -- class: patterns ---------------------------------------------------------------------------------------

def test_a_commit_with_a_trailing_newline_is_refused(run_cli, sandbox, hubenv):
    """`^[0-9a-f]{40}$` with re.match passes a commit with a trailing newline, which became a folder
    name. Now every id from the network is full-matched: SRG055, nothing cached for it."""
    root, cache_root, _ = sandbox
    import urllib.request

    with urllib.request.urlopen(f"{hubenv.endpoint}/api/models/{TINY_TARGET}?blobs=true", timeout=60) as resp:
        info = json.loads(resp.read())
    info["sha"] += "\n"
    hubenv.faults["/api/models/" + TINY_TARGET] = Fault(body_override=json.dumps(info).encode())
    before = snapshot(root)
    refused(validate(run_cli), "SRG055")
    nothing_outside(root, cache_root, before)
    assert not [p for p in cache_root.rglob("*") if "\n" in p.name]
