"""The hub, second round (issue 54): every protocol fault coded, pins verified, a cache that heals,
bounded downloads. One test (or one parametrised row) per misbehaviour the outside campaign found;
each says the class it stands for (the issue's list) in its docstring, and checks the exit code, the
code, that nothing was written outside the cache (tests/hub/hostile.py) and the bound that fired,
by counting (requests, interim answers, bytes), never by timing.

The hostile server is hubserver.py (`Fault`: `raw` answers that break HTTP, `headers`, `bare_404`,
`endless`, `encoding`); a hostile cache is planted by hand after a healthy run."""
from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
import threading
from pathlib import Path

import pytest

from hub.hostile import half_written, nothing_outside, refused, snapshot, validate
from hub.hubserver import MAX_RAW_PIECES, Fault, Repo, RepoFile
from hub.repos import EAGLE3, LLAMA, TINY_HEAD, TINY_TARGET

TARGET_FOLDER = "models--test-org--tiny-llama"


def hub_repo(cache_root: Path, repo: str = TARGET_FOLDER) -> Path:
    return cache_root / "hub" / repo


def raw_rows(hubenv) -> list[dict]:
    hubenv.settle(10)
    return [r for r in hubenv.log if r["status"] == -1]


# -- class: protocol errors are not OSError (tracebacks) -------------------------------------------------

@pytest.mark.parametrize("mode,tries", [("garbage-status", 1), ("many-headers", 1), ("long-header", 1),
                                        ("chunked-cut", 3), ("bad-chunk", 3)])
def test_an_answer_that_breaks_http_is_coded(run_cli, sandbox, hubenv, mode, tries):
    """A garbage status line, more than 100 headers, a 70 kB header line, a chunked body cut short or
    with a chunk size that is not hex: http.client exceptions, not OSError, were tracebacks. Now
    SRG055; a cut body is retried (3 tries, counted), the others are not; nothing cached."""
    root, cache_root, _ = sandbox
    hubenv.faults[f"/{TINY_TARGET}/resolve/"] = Fault(raw=mode)
    before = snapshot(root)
    refused(validate(run_cli), "SRG055")
    assert len(raw_rows(hubenv)) == tries
    nothing_outside(root, cache_root, before)
    assert not half_written(cache_root)
    assert not list(hub_repo(cache_root).rglob("config.json"))


# -- class: past the deadline (interim answers, trickled headers) -----------------------------------------

@pytest.mark.parametrize("mode", ["continue-flood", "trickle-header"])
def test_the_deadline_holds_while_headers_are_read(run_cli, sandbox, hubenv, monkeypatch, mode):
    """`100 Continue` every interval, or a status line and headers trickled one byte at a time, never
    leave the socket silent for the stall timeout (5 s here): the deadline was checked only while a
    body was read, and a run took 150 s under SURGERY_HUB_DEADLINE=20. Now every read of the answer
    is bounded by the deadline (2 s total, 1 s for one request): SRG056, and the server sent fewer
    pieces than it would have (its own bound: MAX_RAW_PIECES), so the deadline is what ended it."""
    root, cache_root, _ = sandbox
    monkeypatch.setenv("SURGERY_HUB_DEADLINE", "2")
    hubenv.faults["/api/models/" + TINY_TARGET] = Fault(raw=mode, raw_interval_s=0.1)
    before = snapshot(root)
    err = refused(validate(run_cli), "SRG056")
    assert "not complete within" in err and "SURGERY_HUB" in err, err
    rows = raw_rows(hubenv)
    assert len(rows) == 1 and rows[0]["bytes"] < MAX_RAW_PIECES, rows
    nothing_outside(root, cache_root, before)


# -- class: names from an index the file system cannot take ------------------------------------------------

def _repo_with_shard(hubenv, name: str, shard: str) -> None:
    tiny = hubenv.repos[TINY_TARGET]
    index = {"metadata": {}, "weight_map": {"model.embed_tokens.weight": shard}}
    hubenv.repos[name] = Repo(name, {"config.json": tiny.files["config.json"],
                                     "model.safetensors.index.json": RepoFile(json.dumps(index).encode()),
                                     shard: tiny.files["model.safetensors"]})


@pytest.mark.parametrize("shard", ["a" * 300 + ".safetensors", "\ud800.safetensors", "d/" + "b" * 256])
def test_a_shard_name_no_file_system_takes_is_refused(run_cli, sandbox, hubenv, shard):
    """A path part longer than the 255 bytes a file system takes for one name (ENAMETOOLONG when its
    range was stored), a lone surrogate (UnicodeEncodeError): tracebacks. Now SRG063 with the listing,
    before any write; the name is shown escaped."""
    root, cache_root, _ = sandbox
    name = "test-org/odd-shard"
    _repo_with_shard(hubenv, name, shard)
    before = snapshot(root)
    err = refused(validate(run_cli, name), "SRG063")
    assert "\ud800" not in err
    nothing_outside(root, cache_root, before)


def test_a_shard_named_listing_json_keeps_its_own_ranges(run_cli, sandbox, hubenv, monkeypatch):
    """A shard named `listing.json` collided with the range store's own file list (FileExistsError /
    NotADirectoryError). Now a file's ranges live under `ranges/<quoted name>`: the run is valid,
    and so is the offline rerun from the cache alone."""
    name = "test-org/listing-shard"
    _repo_with_shard(hubenv, name, "listing.json")
    rc, out, err = validate(run_cli, name)
    assert rc == 0 and "Traceback" not in err, err
    hubenv.reset_log()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rc, out, err = validate(run_cli, name)
    assert rc == 0, err
    assert not [r for r in hubenv.log if "listing-shard" in r["path"]]


# -- class: a tokenizer.json whose added_tokens is not a list of objects with int ids --------------------

@pytest.mark.parametrize("added", [7, [{"id": "x", "content": "a"}, {"id": 1, "content": "b"}],
                                   [{"id": None}, {"id": 1}], "abc"])
def test_malformed_added_tokens_over_the_hub_are_not_checked_said_so(run_cli, hubenv, added):
    """`added_tokens` of a draft's tokenizer.json that is no list of {id: int, content: str}: a
    TypeError traceback while sorting. Now the comparison is "not checked" (SRG671, a note) with why."""
    name = "test-org/tok-head"
    head = hubenv.repos[TINY_HEAD]
    tok = {"model": {"type": "BPE", "vocab": {"a": 0}}, "added_tokens": added}
    hubenv.repos[name] = Repo(name, {**head.files, "tokenizer.json": RepoFile(json.dumps(tok).encode())})
    rc, out, err = run_cli("validate", "eagle3", "--target", TINY_TARGET, "--draft", name, "--json")
    assert "Traceback" not in err, err
    notes = [d for d in json.loads(out)["diagnostics"] if d["code"] == "SRG671"]
    assert [d["severity"] for d in notes] == ["info"] and "added_tokens" in notes[0]["message"], notes


# -- class: a full or read-only cache file system ----------------------------------------------------------

def _fail_cache_writes(m, home: Path, err: int, call: str) -> None:
    """The errno for every cache write under `home` (mkstemp: the file cannot be created, EROFS;
    replace: after the temporary file was written, ENOSPC). Other writes are left alone."""
    if call == "mkstemp":
        real = tempfile.mkstemp

        def mkstemp(*a, **k):
            if str(k.get("dir", "")).startswith(str(home)):
                raise OSError(err, os.strerror(err), str(k.get("dir")))
            return real(*a, **k)
        m.setattr(tempfile, "mkstemp", mkstemp)
    else:
        real_replace = os.replace

        def replace(src, dst, *a, **k):
            if str(dst).startswith(str(home)):
                raise OSError(err, os.strerror(err), str(dst))
            return real_replace(src, dst, *a, **k)
        m.setattr(os, "replace", replace)


@pytest.mark.parametrize("err,call", [(errno.ENOSPC, "replace"), (errno.EROFS, "mkstemp"),
                                      (errno.EDQUOT, "replace")])
def test_a_full_or_read_only_cache_is_coded(run_cli, sandbox, hubenv, monkeypatch, err, call):
    """ENOSPC / EROFS from the cache's atomic write were tracebacks. Now SRG065 with the path and the
    errno; the temporary file is removed (nothing half-written), nothing written outside."""
    root, cache_root, _ = sandbox
    before = snapshot(root)
    with monkeypatch.context() as m:
        _fail_cache_writes(m, cache_root, err, call)
        err_text = refused(validate(run_cli), "SRG065")
    assert f"({errno.errorcode[err]})" in err_text, err_text
    nothing_outside(root, cache_root, before)
    assert not half_written(cache_root)


def test_a_cache_path_too_long_for_the_file_system_is_coded(run_cli, sandbox, hubenv, monkeypatch):
    """ENAMETOOLONG for real: an HF_HOME so deep that a blob's path passes the 4096 bytes a path may
    have. SRG065 (the cache cannot be written), not a traceback and not SRG066."""
    root, cache_root, _ = sandbox
    deep = cache_root
    while len(str(deep)) < 4000:  # room for the cache's folders, not for a temporary file's name in them
        deep = deep / ("d" * min(250, 4000 - len(str(deep)) - 1))
    deep.mkdir(parents=True)
    monkeypatch.setenv("HF_HOME", str(deep))
    err = refused(validate(run_cli), "SRG065")
    assert "ENAMETOOLONG" in err, err


# -- class: FIFOs, devices and odd links planted in the cache ---------------------------------------------

def _entry(cache_root: Path, hubenv, which: str) -> Path:
    commit = hubenv.repos[TINY_TARGET].main
    if which == "refs":
        return hub_repo(cache_root) / "refs" / "main"
    if which == "snapshot":
        return hub_repo(cache_root) / "snapshots" / commit / "config.json"
    ranges = cache_root / "spec-surgery" / TARGET_FOLDER / commit
    if which == "listing":
        return ranges / "listing.json"
    return next(p for p in (ranges / "ranges").rglob("*") if p.is_file())  # a stored range


def _run_guarded(run_cli, args, fifo: Path | None):
    """run_cli in a thread; a FIFO that blocks it is opened for writing after 60 s so the thread ends and
    the assertions fail (a watchdog against a hang, not a time bound)."""
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("r", run_cli(*args)), daemon=True)
    t.start()
    t.join(60)
    if t.is_alive() and fifo is not None:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        t.join(30)
    assert "r" in result, "the command hung on the planted FIFO"
    return result["r"]


ARGS = ("validate", "eagle3", "--target", TINY_TARGET, "--draft", TINY_HEAD, "--weights")


@pytest.mark.parametrize("which,plant,offline", [
    ("refs", "fifo", False), ("range", "fifo", False), ("snapshot", "fifo", False),
    ("refs", "/dev/zero", False), ("range", "/dev/zero", False), ("listing", "/dev/zero", True),
    ("refs", "long-link", False), ("refs", "dir", False), ("snapshot", "dir", False)])
def test_a_cache_entry_that_is_no_regular_file_is_refused_and_refresh_replaces_it(
        run_cli, sandbox, hubenv, monkeypatch, which, plant, offline):
    """A FIFO planted as `refs/main`, a stored range or a snapshot file hung the command; a link to
    /dev/zero was read to a MemoryError at 5-6 GiB; a link whose target is too long for the file
    system; a folder where a file belongs. Now SRG066 naming the entry, at once; `--refresh` reads
    none of them and replaces each (a folder removed first), and the next plain run is valid."""
    root, cache_root, _ = sandbox
    assert validate(run_cli)[0] == 0
    entry = _entry(cache_root, hubenv, which)
    entry.unlink()
    if plant == "fifo":
        os.mkfifo(entry)
    elif plant == "dir":
        entry.mkdir()
    elif plant == "/dev/zero":
        entry.symlink_to("/dev/zero")
    else:
        entry.symlink_to("/" + "x" * 300)
    if offline:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    before = snapshot(root)
    err = refused(_run_guarded(run_cli, ARGS, entry if plant == "fifo" else None), "SRG066")
    assert str(entry) in err and "--refresh" in err, err
    nothing_outside(root, cache_root, before)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    rc, out, err = _run_guarded(run_cli, ARGS + ("--refresh",), entry if plant == "fifo" else None)
    assert rc == 0, err
    assert entry.is_file() and not entry.is_symlink() or which == "snapshot" and entry.resolve().is_file()
    assert validate(run_cli)[0] == 0


def test_a_cache_entry_is_read_only_up_to_the_size_it_may_have(tmp_path):
    """Every cache read is bounded by the size the entry should have: a 100 MB (sparse) `listing.json`
    or `refs/main` is not read at all, only its size is looked at (counted: the bytes returned)."""
    from surgery.hub import entries

    big = tmp_path / "listing.json"
    with open(big, "wb") as fh:
        fh.truncate(100 << 20)
    entry = entries.read_regular(big, 64 << 20, "test")
    assert entry.data == b"" and entry.size == 100 << 20
    assert entries.read_regular(tmp_path / "absent", 10, "test") is None
    (tmp_path / "small").write_bytes(b"x" * 10)
    assert entries.read_regular(tmp_path / "small", 10, "test").data == b"x" * 10


def test_an_entry_planted_where_the_cache_has_a_folder_is_removed(run_cli, sandbox, hubenv):
    """A file where a file's range folder belongs (`ranges/<file key>`), and a file where a commit's
    `.no_exist/<commit>` folder belongs: the next write failed with EEXIST / ENOTDIR on every run.
    Now the entry in the way is removed (inside the cache only) and the run is valid."""
    root, cache_root, _ = sandbox
    assert validate(run_cli)[0] == 0
    commit = hubenv.repos[TINY_TARGET].main
    folder = next((cache_root / "spec-surgery" / TARGET_FOLDER / commit / "ranges").iterdir())
    shutil.rmtree(folder)
    folder.write_bytes(b"planted")
    (hub_repo(cache_root) / ".no_exist").mkdir()
    (hub_repo(cache_root) / ".no_exist" / commit).write_bytes(b"planted")
    before = snapshot(root)
    assert validate(run_cli, TINY_TARGET, TINY_HEAD, "--refresh")[0] == 0
    assert folder.is_dir() and validate(run_cli)[0] == 0
    nothing_outside(root, cache_root, before)


# -- class: a cache that poisons itself (.no_exist markers) ------------------------------------------------

@pytest.mark.parametrize("fault", [Fault(bare_404=True), Fault(redirect_to="/nowhere")], ids=["bare-404", "redirect"])
def test_a_404_that_is_not_the_hubs_writes_no_marker(run_cli, sandbox, hubenv, fault):
    """One bare 404 for config.json, or a redirect to some path (which then answers 404), wrote
    huggingface_hub's `.no_exist/<commit>/config.json`; every later run against a healthy hub said the
    repo has no config.json. Now the marker needs the hub's own answer (EntryNotFound with the commit,
    no redirect): this one is SRG055 (the file is listed), no marker, and the healthy rerun is valid."""
    root, cache_root, _ = sandbox
    hubenv.faults[f"/{TINY_TARGET}/resolve/"] = fault
    before = snapshot(root)
    refused(validate(run_cli), "SRG055")
    nothing_outside(root, cache_root, before)
    assert not list(cache_root.rglob(".no_exist"))
    hubenv.faults.clear()
    rc, out, err = validate(run_cli)
    assert rc == 0, err


def test_a_marker_the_listing_contradicts_heals(run_cli, sandbox, hubenv):
    """A `.no_exist` marker an older version wrote for a file the hub lists: the file is fetched all
    the same (the listing is the hub's word) and the marker removed; `--refresh` removes a marker for
    any listed file, read or not. An authoritative EntryNotFound still writes one (huggingface_hub's
    layout), checked through the real client's reader."""
    root, cache_root, _ = sandbox
    commit = hubenv.repos[TINY_TARGET].main
    no_exist = hub_repo(cache_root) / ".no_exist" / commit
    no_exist.mkdir(parents=True)
    (no_exist / "config.json").write_bytes(b"")
    (no_exist / "model.safetensors").write_bytes(b"")  # listed, never read whole
    rc, out, err = validate(run_cli)
    assert rc == 0, err
    assert not (no_exist / "config.json").exists() and (no_exist / "model.safetensors").exists()
    rc, out, err = validate(run_cli, TINY_TARGET, TINY_HEAD, "--refresh")
    assert rc == 0, err
    assert not (no_exist / "model.safetensors").exists()


def test_the_hubs_own_entry_not_found_still_writes_the_marker(sandbox, hubenv):
    """huggingface_hub's marker where the hub itself says the file is missing at that commit."""
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.file_download import _CACHED_NO_EXIST

    from surgery.text.diagnostics import SurgeryError
    from surgery.facts.modelref import open_model

    src = open_model(TINY_TARGET)
    src.listed = False  # a source that does not know the file list: it has to ask
    with pytest.raises(SurgeryError) as exc:
        src.read_bytes("generation_config.json", 1 << 20, "generation config")
    assert exc.value.diagnostics[0].code == "SRG057"
    found = try_to_load_from_cache(TINY_TARGET, "generation_config.json", cache_dir=os.environ["HF_HOME"] + "/hub",
                                   revision=src.commit)
    assert found is _CACHED_NO_EXIST


# -- class: a cache that poisons itself (one ETag for every file) -----------------------------------------

def test_one_etag_for_every_file_cannot_link_a_file_to_another_blob(run_cli, sandbox, hubenv, monkeypatch):
    """A hub that gave every file config.json's (valid) ETag made store_file link the index to
    config.json's blob: the first run said valid, the offline rerun failed. Now every link points at
    the blob whose bytes hash to the id the listing gives for that file: the offline rerun is valid."""
    root, cache_root, _ = sandbox
    same = hubenv.repos[LLAMA].files["config.json"].oid
    hubenv.faults[f"/{LLAMA}/resolve/"] = Fault(etag=same)
    rc, out, err = validate(run_cli, LLAMA, EAGLE3)
    assert rc == 0, err
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rc, out, err = validate(run_cli, LLAMA, EAGLE3)
    assert rc == 0, err
    snap = hub_repo(cache_root, "models--meta-llama--Llama-3.1-8B-Instruct") / "snapshots" / hubenv.repos[LLAMA].main
    for link in snap.iterdir():
        assert link.resolve().name == hubenv.repos[LLAMA].files[link.name].oid, link


def test_a_snapshot_link_to_a_blob_of_other_bytes_is_named_and_refresh_heals_it(run_cli, sandbox, hubenv):
    """A cache an older version poisoned that way, with a blob of the right size and valid JSON (only
    the bytes differ): it was read as the index. Now SRG064 names the cached copy (its bytes do not
    hash to the listed blob id); --refresh relinks it to the right blob and the next run is valid."""
    root, cache_root, _ = sandbox
    assert validate(run_cli, LLAMA, EAGLE3)[0] == 0
    repo = hub_repo(cache_root, "models--meta-llama--Llama-3.1-8B-Instruct")
    index = repo / "snapshots" / hubenv.repos[LLAMA].main / "model.safetensors.index.json"
    other = index.read_bytes().replace(b'"metadata"', b'"metadatX"')
    assert len(other) == index.stat().st_size and json.loads(other)
    fake = repo / "blobs" / ("0" * 40)
    fake.write_bytes(other)
    index.unlink()
    index.symlink_to(os.path.relpath(fake, index.parent))
    err = refused(validate(run_cli, LLAMA, EAGLE3), "SRG064")
    assert "model.safetensors.index.json" in err and "does not hash" in err, err
    assert validate(run_cli, LLAMA, EAGLE3, "--refresh")[0] == 0
    assert index.resolve().name == hubenv.repos[LLAMA].files["model.safetensors.index.json"].oid
    assert validate(run_cli, LLAMA, EAGLE3)[0] == 0


# -- class: a pin that is not checked -------------------------------------------------------------------------

def test_a_pinned_commit_answered_with_another_is_refused(run_cli, sandbox, hubenv):
    """`--target org/name@<40-hex>` answered with another commit was accepted and reported as the
    commit asked for. Now SRG067, nothing cached for it."""
    root, cache_root, _ = sandbox
    hubenv.repos[TINY_TARGET].any_revision = True
    try:
        asked = "c" * 40
        before = snapshot(root)
        err = refused(validate(run_cli, f"{TINY_TARGET}@{asked}"), "SRG067")
        assert asked in err and hubenv.repos[TINY_TARGET].main in err
        nothing_outside(root, cache_root, before)
        assert not hub_repo(cache_root).exists()
    finally:
        hubenv.repos[TINY_TARGET].any_revision = False


# -- class: output from the network printed raw ------------------------------------------------------------

def test_a_servers_error_message_is_shown_escaped_and_cut(run_cli, sandbox, hubenv):
    """`X-Error-Message` with terminal escapes (clear screen, a green "all checks passed") went
    verbatim into the SRG055 line. Now escaped (`\\x1b`) and cut at 200 characters with the length said."""
    message = "\x1b[2J\x1b[32mall checks passed\x1b[0m" + "x" * 5000
    hubenv.faults["/api/models/" + TINY_TARGET] = Fault(status=418, headers={"X-Error-Message": message})
    err = refused(validate(run_cli), "SRG055")
    assert "\x1b" not in err and "\\x1b[2J" in err, err
    assert f"({len(message)} characters in all)" in err and len(err) < 2000, len(err)


# -- class: convert from a hub id is unbounded --------------------------------------------------------------

def _convert(run_cli, out: Path):
    return run_cli("convert", TINY_HEAD, "--to", "speculators", str(out), "--target", TINY_TARGET,
                   "--producer", "eagle")


def _blob_bytes(cache_root: Path) -> int:
    return sum(p.stat().st_size for p in cache_root.rglob("*") if p.is_file() and not p.is_symlink())


def test_a_weights_body_that_never_ends_stops_at_the_listed_size(run_cli, sandbox, hubenv, tmp_path):
    """For a 134 kB head, a weights body that never ended wrote 2 GB into the cache (huggingface_hub's
    snapshot_download, unbounded). Now each file is read to at most its listed size: SRG056, and the
    cache holds less than the head's declared bytes (no partial blob kept)."""
    root, cache_root, _ = sandbox
    hubenv.faults["/cdn/"] = Fault(endless=True)
    before = snapshot(root)
    out = tmp_path / "converted"
    # issue 67: the body's first 8 bytes (zeros) already say it is no safetensors file of that size
    err = refused(_convert(run_cli, out), "SRG785")
    assert "header length 0 is impossible" in err
    nothing_outside(root, cache_root, before)
    assert not out.exists() and not half_written(cache_root)
    assert _blob_bytes(cache_root) < hubenv.declared_bytes(TINY_HEAD)


def test_a_compressed_body_is_refused_not_unpacked(run_cli, sandbox, hubenv, tmp_path):
    """A 1 MiB gzip bomb wrote 990 MB: the body was unpacked. Now identity is asked and a body sent
    with another Content-Encoding is SRG055, never unpacked (64 MiB of zeros behind 64 kB here)."""
    root, cache_root, _ = sandbox
    hubenv.faults["/cdn/"] = Fault(encoding="gzip")
    err = refused(_convert(run_cli, tmp_path / "converted"), "SRG055")
    assert "gzip" in err
    assert _blob_bytes(cache_root) < hubenv.declared_bytes(TINY_HEAD)


def test_a_body_that_is_not_the_listed_file_is_not_stored(run_cli, sandbox, hubenv, tmp_path):
    """A body of the listed size whose bytes do not hash to the listed id: SRG055, nothing linked."""
    root, cache_root, _ = sandbox
    size = hubenv.repos[TINY_HEAD].files["config.json"].size
    hubenv.faults[f"/{TINY_HEAD}/resolve/"] = Fault(body_override=b"{" + b" " * (size - 2) + b"}")
    err = refused(_convert(run_cli, tmp_path / "converted"), "SRG055")
    assert "do not hash" in err
    assert not list(cache_root.rglob("snapshots/*/config.json"))


def test_a_download_is_bounded_in_time(run_cli, sandbox, hubenv, monkeypatch, tmp_path):
    """A weights body trickled within every stall bound: SURGERY_HUB_DOWNLOAD_DEADLINE (2 s here)
    ends the download with SRG056 naming it, and the server sent less than the file (counted)."""
    monkeypatch.setenv("SURGERY_HUB_DOWNLOAD_DEADLINE", "2")
    hubenv.faults["/cdn/"] = Fault(trickle_s=0.05)
    err = refused(_convert(run_cli, tmp_path / "converted"), "SRG056")
    assert "SURGERY_HUB_DOWNLOAD_DEADLINE" in err, err
    hubenv.settle(10)
    cdn = [r for r in hubenv.log if r["path"].startswith("/cdn/")]
    assert cdn and cdn[-1]["bytes"] < hubenv.repos[TINY_HEAD].files["model.safetensors"].size


def test_convert_fetches_again_a_cached_file_that_is_not_the_listed_one(run_cli, sandbox, hubenv, tmp_path):
    """A snapshot whose weights file is a short copy (or a FIFO) counted as complete, and convert
    copied it as it was. Now a cached file counts only as a regular file of its listed size: the
    download fetches it again and the converted head holds the hub's bytes."""
    root, cache_root, _ = sandbox
    assert _convert(run_cli, tmp_path / "first")[0] == 0
    snap = hub_repo(cache_root, "models--test-org--tiny-eagle3") / "snapshots" / hubenv.repos[TINY_HEAD].main
    blob = (snap / "model.safetensors").resolve()
    blob.write_bytes(blob.read_bytes()[:100])
    (snap / "config.json").unlink()
    os.mkfifo(snap / "config.json")
    rc, out, err = _run_guarded(run_cli, ("convert", TINY_HEAD, "--to", "speculators", str(tmp_path / "second"),
                                          "--target", TINY_TARGET, "--producer", "eagle"), snap / "config.json")
    assert rc == 0, err
    weights = hubenv.repos[TINY_HEAD].files["model.safetensors"]
    assert (tmp_path / "second" / "model.safetensors").read_bytes() == weights.read(0, weights.size)
