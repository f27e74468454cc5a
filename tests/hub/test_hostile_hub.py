"""A hostile hub (issue 48): whatever the server at HF_ENDPOINT answers never reaches the file system
outside the cache, a bad answer never poisons the cache, and a run is bounded in total.

Every test runs in a sandbox: HF_HOME is `<tmp>/hf`, the rest of `<tmp>` is "outside". Each test
lists every file under `<tmp>` before and after, and `nothing_outside` fails on any file created or
changed outside HF_HOME. The misbehaviours each test stands for are in its docstring; the hostile
stand-in for the protocol is hubserver.py (`Fault`)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from hub.hostile import nothing_outside, refused, snapshot, validate
from hub.hubserver import Fault, Repo, RepoFile, safetensors_file
from hub.repos import TINY_HEAD, TINY_TARGET


# -- names from the network are data, never paths ------------------------------------------------------

@pytest.mark.parametrize("where", ["relative", "absolute"])
def test_hostile_etag_writes_nothing_outside_the_cache(run_cli, sandbox, hubenv, where):
    """(high) The ETag becomes `blobs/<etag>`: `../../../../pwned` or an absolute path created a file
    anywhere, holding the served bytes, and validate still said valid."""
    root, cache_root, _ = sandbox
    etag = "../../../../pwned" if where == "relative" else str(root / "pwned-absolute")
    hubenv.faults[f"/{TINY_TARGET}/resolve/"] = Fault(etag=etag)
    before = snapshot(root)
    err = refused(validate(run_cli), "SRG063")
    assert "not a 40- or 64-hex digest" in err
    nothing_outside(root, cache_root, before)
    assert not list(root.rglob("pwned*"))


def test_hostile_blob_id_without_etag_writes_nothing(run_cli, sandbox, hubenv):
    """(high) With no ETag, the model info's `blobId` named the blob: the same escape."""
    root, cache_root, _ = sandbox
    repo = hubenv.repos[TINY_TARGET]
    info = {"id": TINY_TARGET, "sha": repo.main, "siblings": [
        {"rfilename": n, "size": f.size, "blobId": "../../../../pwned-blob"} for n, f in sorted(repo.files.items())]}
    hubenv.faults["/api/models/" + TINY_TARGET] = Fault(body_override=json.dumps(info).encode())
    hubenv.faults[f"/{TINY_TARGET}/resolve/"] = Fault(etag="")
    before = snapshot(root)
    err = refused(validate(run_cli), "SRG063")
    assert "blob id" in err
    nothing_outside(root, cache_root, before)


@pytest.mark.parametrize("name", ["../../../../pwned.json", "/etc/pwned.json", "a/../../b.json", "a\\b.json"])
def test_hostile_file_name_in_the_listing_is_refused(run_cli, sandbox, hubenv, name):
    """A file name in the model info becomes `snapshots/<commit>/<name>` and a ranges folder."""
    root, cache_root, _ = sandbox
    repo = hubenv.repos[TINY_TARGET]
    siblings = [{"rfilename": n, "size": f.size, "blobId": f.oid} for n, f in sorted(repo.files.items())]
    siblings.append({"rfilename": name, "size": 2, "blobId": "0" * 40})
    hubenv.faults["/api/models/" + TINY_TARGET] = Fault(
        body_override=json.dumps({"id": TINY_TARGET, "sha": repo.main, "siblings": siblings}).encode())
    before = snapshot(root)
    refused(validate(run_cli), "SRG063")
    nothing_outside(root, cache_root, before)


def test_hostile_shard_name_in_the_index_is_refused(run_cli, sandbox, hubenv):
    """A safetensors index whose weight_map names `../../../../pwned.safetensors`: its header range
    would be stored under that name."""
    root, cache_root, _ = sandbox
    name = "test-org/hostile-index"
    good = hubenv.repos[TINY_TARGET]
    shard = "../../../../pwned.safetensors"
    index = {"metadata": {}, "weight_map": {"model.embed_tokens.weight": shard}}
    files = {"config.json": good.files["config.json"],
             "model.safetensors.index.json": RepoFile(json.dumps(index).encode()),
             shard: RepoFile(safetensors_file([("model.embed_tokens.weight", "F32", [4, 4])]), lfs=True)}
    hubenv.repos[name] = Repo(name, files)
    before = snapshot(root)
    refused(validate(run_cli, name), "SRG063")
    nothing_outside(root, cache_root, before)


@pytest.mark.parametrize("revision", ["../../../../victim/file.txt", "/ABS", "a\\b", "a..b", "v1/", ".hidden",
                                      "x.lock", "x\x00y", "a//b", "a~1", "a:b"])
def test_hostile_revision_is_a_usage_error_before_any_request(run_cli, sandbox, hubenv, revision):
    """(medium) `org/name@../../../../some/file`, against an endpoint that answers any revision,
    replaced an existing file's content with the 40-hex commit; `@/path` did the same."""
    root, cache_root, victim = sandbox
    hubenv.repos[TINY_TARGET].any_revision = True
    try:
        revision = revision.replace("/ABS", str(victim))
        before = snapshot(root)
        refused(validate(run_cli, f"{TINY_TARGET}@{revision}"), "SRG062")
        nothing_outside(root, cache_root, before)
        assert victim.read_bytes() == b"precious\n"
        assert not [r for r in hubenv.log if TINY_TARGET in r["path"]]  # refused before any request
    finally:
        hubenv.repos[TINY_TARGET].any_revision = False


def test_a_branch_with_a_slash_is_still_a_revision(run_cli, sandbox, hubenv):
    """The hub's branch names may hold `/` (`refs/pr/1`, `feature/x`): the rules refuse escapes only."""
    root, cache_root, _ = sandbox
    repo = hubenv.repos[TINY_TARGET]
    repo.revisions["feature/x"] = repo.main
    try:
        rc, out, err = validate(run_cli, f"{TINY_TARGET}@feature/x")
        assert rc == 0, err
        assert (cache_root / "hub" / "models--test-org--tiny-llama" / "refs" / "feature" / "x").read_text() == repo.main
    finally:
        del repo.revisions["feature/x"]


def test_redirect_to_a_local_file_is_refused(run_cli, sandbox, hubenv):
    """urllib opens `file://` addresses: a redirect there would read a local file as the config."""
    root, cache_root, victim = sandbox
    hubenv.faults[f"/{TINY_TARGET}/resolve/"] = Fault(redirect_to=f"file://{victim}")
    err = refused(validate(run_cli), "SRG055")
    assert "not an http(s) address" in err


def test_deeply_nested_model_info_is_coded(run_cli, sandbox, hubenv):
    hubenv.faults["/api/models/" + TINY_TARGET] = Fault(body_override=b"[" * 200_000 + b"]" * 200_000)
    refused(validate(run_cli), "SRG055")


# -- the cache holds only what was verified --------------------------------------------------------------

@pytest.mark.parametrize("body", [b"<html>proxy error</html>", b'{"model_type": "llama", "hidden'])
def test_bad_config_answer_is_not_cached(run_cli, sandbox, hubenv, body):
    """(low-medium) A non-JSON config.json, or a body cut short behind a matching Content-Length, was
    stored at the pinned commit, and every later run failed against a healthy hub and offline too."""
    root, cache_root, _ = sandbox
    hubenv.faults[f"/{TINY_TARGET}/resolve/"] = Fault(body_override=body)
    err = refused(validate(run_cli), "SRG055")
    assert "not stored in the cache" in err
    hubenv.faults.clear()
    rc, out, err = validate(run_cli)  # the healthy hub is asked again
    assert rc == 0, err


def test_damaged_cached_file_is_named_and_refresh_fetches_it_again(run_cli, sandbox, hubenv, monkeypatch):
    """A cached file an older version stored (here: written by hand where huggingface_hub keeps it):
    the diagnostic names the cached copy and the way out; --refresh fetches it anew; offline
    --refresh is a usage error."""
    root, cache_root, _ = sandbox
    rc, out, err = validate(run_cli)
    assert rc == 0, err
    cfg = next(p for p in (cache_root / "hub").rglob("config.json") if "tiny-llama" in str(p))
    blob = cfg.resolve()
    blob.write_bytes(b"<html>")
    err = refused(validate(run_cli), "SRG064")
    assert str(cfg) in err and "--refresh" in err
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    refused(validate(run_cli), "SRG064")  # offline too: the same clear line
    refused(validate(run_cli, TINY_TARGET, TINY_HEAD, "--refresh"), "SRG062")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    rc, out, err = validate(run_cli, TINY_TARGET, TINY_HEAD, "--refresh")
    assert rc == 0, err
    assert json.loads(cfg.read_bytes())["model_type"] == "llama"  # overwritten with the hub's copy
    rc, out, err = validate(run_cli)
    assert rc == 0, err


# -- bounds on the whole run ----------------------------------------------------------------------------

def test_total_deadline_bounds_the_sum_of_requests(run_cli, sandbox, hubenv, monkeypatch):
    """(low) Bodies that each arrived within the per-request bounds added up (four at 25 s each: 97 s).
    Here every answer waits 0.3 s, far within its own 30 s share, and a --weights run makes about ten
    requests (3 s of waiting): the command's total of 1.2 s stops it, names the total, and leaves
    requests unmade. No wall-clock assertion: on a loaded machine each request only takes longer, and
    the total fires sooner."""
    monkeypatch.setenv("SURGERY_HUB_DEADLINE", "1.2")
    monkeypatch.setenv("SURGERY_HUB_REQUEST_DEADLINE", "30")
    for key in (f"/api/models/{TINY_TARGET}", f"/api/models/{TINY_HEAD}", f"/{TINY_TARGET}/resolve/",
                f"/{TINY_HEAD}/resolve/", "/cdn/"):
        hubenv.faults[key] = Fault(delay_s=0.3)
    err = refused(validate(run_cli), "SRG056")
    assert "(SURGERY_HUB_DEADLINE" in err and "total" in err and "REQUEST_DEADLINE, one request" not in err
    assert len(hubenv.log) < 10, hubenv.log  # stopped part way: a full run makes more requests than this


# -- the last fence: every write site ---------------------------------------------------------------------

WRITES = ("_write_atomic(", "_link(", "os.replace(", "os.unlink(", "mkstemp(", ".mkdir(", "rmtree(")


def _write_sites():
    """Every public function of the cache module that writes: named `store_*`, or any other whose
    source calls a write primitive (a new one must be added to HOSTILE below, or this test fails)."""
    import inspect

    from surgery.hub import cache

    return sorted(n for n, f in vars(cache).items() if inspect.isfunction(f) and f.__module__ == cache.__name__
                  and not n.startswith("_") and (n.startswith("store_") or any(w in inspect.getsource(f)
                                                                                for w in WRITES)))


class _Hasher:
    """A stand-in for digests.Hasher with a hostile blob id."""

    def __init__(self, blob_id):
        self.blob_id, self.size, self.declared = blob_id, 1, 1

    def matches(self):
        return True


HOSTILE = {
    "store_file": [dict(repo_id="o/n", revision=None, commit="a" * 40, name="../../../../x", data=b"1", blob_id="b" * 40),
                   dict(repo_id="o/n", revision=None, commit="a" * 40, name="c.json", data=b"1", blob_id="../../x"),
                   dict(repo_id="o/n", revision=None, commit="../../x" + "a" * 33, name="c.json", data=b"1",
                        blob_id="b" * 40),
                   dict(repo_id="o/n", revision="../../../x", commit="a" * 40, name="c.json", data=b"1",
                        blob_id="b" * 40)],
    "store_ref": [dict(repo_id="o/n", revision="../../../../x", commit="a" * 40),
                  dict(repo_id="o/n", revision="/abs/x", commit="a" * 40)],
    "store_missing": [dict(repo_id="o/n", revision=None, commit="a" * 40, name="../../../../x"),
                      dict(repo_id="o/n", revision=None, commit="../../../x", name="c.json")],
    "store_listing": [dict(repo_id="o/n", commit="../../../../x", listing={"files": {}})],
    "store_range": [dict(repo_id="o/n", commit="a" * 40, name="../../../../x", start=0, data=b"1", at_eof=True),
                    dict(repo_id="o/n", commit="/abs", name="m.safetensors", start=0, data=b"1", at_eof=True)],
    "store_blob": [dict(repo_id="o/n", revision=None, commit="a" * 40, name="../../../../x", tmp=Path("/nonexistent"),
                        hasher=_Hasher("b" * 40)),
                   dict(repo_id="o/n", revision=None, commit="a" * 40, name="c.json", tmp=Path("/nonexistent"),
                        hasher=_Hasher("../../x")),
                   dict(repo_id="o/n", revision="../../x", commit="a" * 40, name="c.json", tmp=Path("/nonexistent"),
                        hasher=_Hasher("b" * 40)),
                   dict(repo_id="o/n", revision=None, commit="a" * 40, name="c.json", tmp=Path("/tmp/elsewhere"),
                        hasher=_Hasher("b" * 40))],
    "forget_missing": [dict(repo_id="o/n", commit="a" * 40, name="../../../../x"),
                       dict(repo_id="o/n", commit="../../../x", name="c.json")],
    "blob_tmp": [dict(repo_id="o/n", blob_id="../../../../x", where="o/n")],
    "drop_ranges": [dict(repo_id="o/n", commit="a" * 40, name="../../../../x"),
                    dict(repo_id="o/n", commit="../../../x", name="c.json")],
}


def test_every_cache_write_site_refuses_an_escape(tmp_path, monkeypatch):
    from surgery.text.diagnostics import SurgeryError
    from surgery.hub import cache

    home = tmp_path / "a" / "b" / "c" / "hf"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("SURGERY_HUB_CACHE", raising=False)
    assert _write_sites() == sorted(HOSTILE)
    before = snapshot(tmp_path)
    for site, calls in HOSTILE.items():
        for kwargs in calls:
            with pytest.raises(SurgeryError) as exc:
                getattr(cache, site)(**kwargs)
            assert exc.value.diagnostics[0].code in ("SRG062", "SRG063"), (site, kwargs)
    assert snapshot(tmp_path) == before


def test_a_link_inside_the_cache_that_points_outside_is_not_followed(tmp_path, monkeypatch):
    """The fence resolves symlinks: a `blobs` folder that links outside the cache is refused."""
    from surgery.text.diagnostics import SurgeryError
    from surgery.hub import cache

    home = tmp_path / "hf"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    outside = tmp_path / "outside"
    outside.mkdir()
    repo = home / "hub" / "models--o--n"
    repo.mkdir(parents=True)
    (repo / "blobs").symlink_to(outside)
    with pytest.raises(SurgeryError) as exc:
        cache.store_file("o/n", None, "a" * 40, "config.json", b"{}", hashlib.sha1(b"blob 2\0{}").hexdigest())
    assert exc.value.diagnostics[0].code == "SRG063" and "outside the cache" in exc.value.diagnostics[0].message
    assert not list(outside.iterdir())


def test_download_fences_huggingface_hubs_etag(sandbox, hubenv):
    """`download()` (convert / apply from a hub id) goes through huggingface_hub's snapshot_download,
    which joins the ETag to `blobs/` unchecked: fenced the same way."""
    from surgery.text.diagnostics import SurgeryError
    from surgery.facts.modelref import open_model

    root, cache_root, _ = sandbox
    src = open_model(TINY_HEAD)
    hubenv.faults[f"/{TINY_HEAD}/resolve/"] = Fault(etag="../../../../pwned-dl")
    hubenv.faults["/cdn/"] = Fault(etag="../../../../pwned-dl")
    before = snapshot(root)
    with pytest.raises(SurgeryError) as exc:
        src.download()
    assert exc.value.diagnostics[0].code == "SRG063"
    nothing_outside(root, cache_root, before)
