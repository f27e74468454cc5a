"""`surgery convert` is atomic on every OS error, and on SIGTERM (issue 48), and writes what vLLM will
read (issue 42 class 10). The errnos are simulated by patching the low-level calls convert reaches
(os.mkdir, shutil.copyfile, Path.write_text, os.replace): the tests run as root, where chmod cannot make
a folder read-only. After each failure: a coded error naming the path and the errno's meaning, no
traceback, nothing under OUT_DIR's name, no hidden staging folder, no parent folder left behind."""
from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from surgery.cli import main

ROOT = Path(__file__).resolve().parents[2]
PAIRS = ROOT / "surgery" / "data" / "pairs"
DRAFT = PAIRS / "eagle3" / "draft"
DRAFT_OUTPUTS = PAIRS / "eagle3-outputs" / "draft"  # vLLM ids (1, 7, 8): has a ModelOpt spelling
TARGET = PAIRS / "llama-target"


def _convert(out, *extra, draft=DRAFT, to="speculators"):
    return ["convert", str(draft), "--to", to, str(out), "--target", str(TARGET), "--producer", "vllm", *extra]


def _run(argv, capsys):
    rc = main(list(argv) + ["--json"])
    captured = capsys.readouterr()
    return rc, json.loads(captured.out), captured.err


def _nothing_left(folder: Path, name: str) -> None:
    """No file under OUT_DIR's name and no staging (`.name-xxxx`) or stale (`.name-old-xxxx`) folder."""
    assert not [p.name for p in folder.iterdir() if p.name == name or p.name.startswith(f".{name}-")], \
        sorted(p.name for p in folder.iterdir())


def _raiser(err: int):
    def raise_(*args, **kwargs):
        raise OSError(err, os.strerror(err), str(args[0]) if args else None)
    return raise_


# (what is patched, the errno, the code expected): read-only file system, full disk, no inodes,
# quota, any other errno
FAULTS = [
    ("mkdir", errno.EROFS, "SRG014"),      # read-only file system: the staging folder cannot be created
    ("mkdir", errno.ENOSPC, "SRG015"),     # no inodes: mkdir fails with ENOSPC
    ("mkdir", errno.EDQUOT, "SRG015"),     # inode quota
    ("copy", errno.ENOSPC, "SRG015"),      # disk full while copying the weights (after a partial write)
    ("copy", errno.EROFS, "SRG014"),
    ("write", errno.ENOSPC, "SRG015"),     # disk full while writing config.json
    ("write", errno.EIO, "SRG018"),
    ("replace", errno.EROFS, "SRG014"),    # the final rename
]


@pytest.mark.parametrize("where,err,code", FAULTS, ids=[f"{w}-{errno.errorcode[e]}" for w, e, _ in FAULTS])
def test_os_errors_are_coded_and_leave_nothing(where, err, code, tmp_path, capsys, monkeypatch):
    out = tmp_path / "new" / "deeper" / "out"  # two parent folders convert must create, then remove again
    if where == "mkdir":
        real = os.mkdir
        # the parents are created, then the staging folder fails (read-only, or no inode left)
        monkeypatch.setattr(os, "mkdir", lambda p, *a, **k: _raiser(err)(p) if ".out-" in str(p) else real(p, *a, **k))
    elif where == "copy":
        def partial_copy(src, dst, *a, **k):
            Path(dst).write_bytes(b"half")  # a partial file in the staging folder, then the disk is full
            _raiser(err)(dst)
        monkeypatch.setattr(shutil, "copyfile", partial_copy)
    elif where == "write":
        real_write = Path.write_text
        monkeypatch.setattr(Path, "write_text", lambda self, *a, **k: _raiser(err)(self) if self.name == "config.json"
                            else real_write(self, *a, **k))
    else:
        real_replace = os.replace
        monkeypatch.setattr(os, "replace", lambda a, b: _raiser(err)(b) if Path(b) == out else real_replace(a, b))
    rc, result, err_text = _run(_convert(out), capsys)
    d = result["diagnostics"][0]
    assert rc == 2 and d["code"] == code, result
    assert os.strerror(err) in d["message"] and errno.errorcode[err] in d["message"], d
    assert "Traceback" not in err_text
    assert not (tmp_path / "new").exists()  # the parents it created are removed, with the staging folder
    _nothing_left(tmp_path, "new")


def test_a_failed_force_replacement_keeps_the_old_out_dir(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("before")
    monkeypatch.setattr(shutil, "copyfile", _raiser(errno.ENOSPC))
    rc, result, _ = _run(_convert(out, "--force"), capsys)
    assert rc == 2 and result["diagnostics"][0]["code"] == "SRG015"
    assert sorted(p.name for p in out.iterdir()) == ["old.txt"] and (out / "old.txt").read_text() == "before"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_the_final_rename_failing_puts_the_old_out_dir_back(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("before")
    real_replace = os.replace
    calls = []

    def replace(a, b):
        calls.append((Path(a), Path(b)))
        if Path(b) == out and ".out-old-" not in str(a):  # the staged folder onto OUT_DIR
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), str(b))
        return real_replace(a, b)

    monkeypatch.setattr(os, "replace", replace)
    rc, result, _ = _run(_convert(out, "--force"), capsys)
    assert rc == 2 and result["diagnostics"][0]["code"] == "SRG018" and "EXDEV" in result["diagnostics"][0]["message"]
    assert (out / "old.txt").read_text() == "before" and len(calls) == 3  # aside, staged -> out (failed), back
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_output_under_a_regular_file_is_refused_before_writing(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    for out in (tmp_path / "afile" / "out", tmp_path / "afile" / "sub" / "out"):
        rc, result, _ = _run(_convert(out), capsys)
        d = result["diagnostics"][0]
        assert rc == 2 and d["code"] == "SRG016" and str(tmp_path / "afile") in d["message"], d
        assert os.strerror(errno.ENOTDIR) in d["message"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


@pytest.mark.parametrize("below", ["", "sub/"])
def test_output_under_a_symlink_loop_is_coded(below, tmp_path, capsys):
    """OUT_DIR through a symlink loop (`loop -> loop`): Path.resolve raised RuntimeError, a traceback
    (issue 54). Now SRG018 naming ELOOP, before anything is written."""
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    before = sorted(p.name for p in tmp_path.iterdir())
    rc, result, err = _run(_convert(tmp_path / "loop" / f"{below}out"), capsys)
    d = result["diagnostics"][0]
    assert rc == 2 and d["code"] == "SRG018" and "ELOOP" in d["message"], d
    assert "Traceback" not in err and sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("out", [".", "..", "./", "sub/..", "CWD", "CWD_PARENT", "SOURCE_PARENT"])
def test_force_onto_dot_dotdot_cwd_or_a_parent_is_refused_before_touching_anything(out, tmp_path, capsys,
                                                                                   monkeypatch):
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    src = work / "src" / "head"
    shutil.copytree(DRAFT, src)
    (work / "keep.txt").write_text("keep")
    monkeypatch.chdir(work)
    out = {"CWD": str(work), "CWD_PARENT": str(tmp_path), "SOURCE_PARENT": str(work / "src")}.get(out, out)
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    rc, result, _ = _run(["convert", str(src), "--to", "speculators", out, "--target", str(TARGET),
                               "--producer", "vllm", "--force"], capsys)
    assert rc == 2 and result["diagnostics"][0]["code"] == "SRG017", result
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before  # no `.-old-XXXX` either


def test_force_onto_a_mount_point_is_refused(tmp_path, capsys):
    mount = Path("/proc") if os.path.ismount("/proc") else Path("/")
    rc, result, _ = _run(_convert(mount, "--force"), capsys)
    assert rc == 2 and result["diagnostics"][0]["code"] == "SRG017" and ("mount point" in result["diagnostics"][0]
                                                                        ["message"] or "root" in result["diagnostics"][0]["message"])


def test_a_real_read_only_folder_where_permissions_bind(tmp_path, capsys):
    """chmod 0555 on the parent: coded SRG014 where the OS enforces it (not for root, which the
    patched tests above cover)."""
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        probe = ro / "probe"
        try:
            probe.mkdir()
        except PermissionError:
            pass
        else:
            probe.rmdir()
            pytest.skip("running as root: permissions do not bind (the errno is simulated above)")
        rc, result, _ = _run(_convert(ro / "out"), capsys)
        assert rc == 2 and result["diagnostics"][0]["code"] == "SRG014"
        assert list(ro.iterdir()) == []
    finally:
        ro.chmod(0o755)


SLOW_CONVERT = """
import shutil, signal, sys, time
from pathlib import Path
# a terminal's SIGINT, whatever this test was started from: a shell's background job starts with SIGINT
# ignored, and convert rightly leaves a signal the process was told to ignore ignored
signal.signal(signal.SIGINT, signal.default_int_handler)
real = shutil.copyfile
def slow(src, dst, *a, **k):
    Path(dst).write_bytes(b"partial")  # half a weight file in the staging folder
    Path(sys.argv[1]).write_text("copying")
    time.sleep(60)
    return real(src, dst, *a, **k)
shutil.copyfile = slow
from surgery.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_removes_the_staging_folder_as_sigint_does(signum, tmp_path):
    out = tmp_path / "out"
    marker = tmp_path / "started"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", SLOW_CONVERT, str(marker), *_convert(out)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(2400):  # polled until the copy has begun (bounded by a count, not a time budget)
            if marker.exists() or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert marker.exists(), proc.communicate()
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out-")]  # the staging folder exists
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, (proc.returncode, stderr)
    assert "SRG019" in stderr and signal.Signals(signum).name in stderr and "Traceback" not in stderr, stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["started"]  # no out, no hidden staging folder


def test_a_source_without_weights_needs_config_only(tmp_path, capsys):
    src = tmp_path / "head"
    src.mkdir()
    shutil.copy(DRAFT / "config.json", src / "config.json")
    out = tmp_path / "out"
    rc, result, _ = _run(["convert", str(src), "--to", "speculators", str(out), "--target", str(TARGET),
                          "--producer", "vllm"], capsys)
    assert rc == 2 and result["diagnostics"][0]["code"] == "SRG022" and not out.exists()
    rc, result, _ = _run(["convert", str(src), "--to", "speculators", str(out), "--target", str(TARGET),
                          "--producer", "vllm", "--config-only"], capsys)
    assert rc == 0 and result["config_only"] is True
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "surgery-provenance.json"]
    # --config-only on a head with weights writes the config alone too
    rc, result, _ = _run(_convert(tmp_path / "cfg", "--config-only"), capsys)
    assert rc == 0 and sorted(p.name for p in (tmp_path / "cfg").iterdir()) == ["config.json", "surgery-provenance.json"]


def test_local_verifier_is_absolute_and_says_vllm_033_refuses_it(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(TARGET.parent)
    out = tmp_path / "spec"
    rc = main(["convert", str(DRAFT), "--to", "speculators", str(out), "--target", TARGET.name, "--producer", "vllm"])
    captured = capsys.readouterr()
    assert rc == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["speculators_config"]["verifier"]["name_or_path"] == str(TARGET.resolve())  # not "llama-target"
    assert f"verifier: {TARGET.resolve()}" in captured.out
    assert "warning SRG024" in captured.err and "Speculators verifier must name a remote model repository" in captured.err
    prov = json.loads((out / "surgery-provenance.json").read_text())
    assert "absolute path" in prov["fields"]["speculators_config.verifier.name_or_path"]


def _validate_findings(out: Path, capsys) -> list[tuple[str, str]]:
    main(["validate", "eagle3", "--target", str(TARGET), "--draft", str(out), "--engine", "vllm", "--json"])
    data = json.loads(capsys.readouterr().out)
    return sorted((d["code"], d["message"]) for d in data["diagnostics"]
                  if d["code"] in ("SRG656", "SRG657", "SRG659") and d["severity"] in ("error", "warning"))


def test_modelopt_output_warns_at_write_time_what_validate_reports(tmp_path, capsys):
    out = tmp_path / "mo"
    rc, result, err = _run(_convert(out, draft=DRAFT_OUTPUTS, to="modelopt"), capsys)
    assert rc == 0 and (out / "config.json").exists()
    warned = sorted(d["message"].split(": ", 1)[0].split("report ")[1].split(" ")[0] for d in result["diagnostics"]
                    if d["code"] == "SRG023")
    found = _validate_findings(out, capsys)
    assert found and warned == sorted(code for code, _ in found)  # the same findings, at write time
    assert all(any(msg in d["message"] for d in result["diagnostics"]) for _, msg in found)
    # speculators files say whose ids they hold: nothing to warn; the plain EAGLE layout cannot say it, so
    # validate asks for --producer (SRG659) and the write-time warning says the same
    for to, expect_any in (("speculators", False), ("eagle", True)):
        rc, result, _ = _run(_convert(tmp_path / to, draft=DRAFT_OUTPUTS, to=to), capsys)
        warned = sorted(d["message"].split(": ", 1)[0].split("report ")[1].split(" ")[0]
                        for d in result["diagnostics"] if d["code"] == "SRG023")
        found = _validate_findings(tmp_path / to, capsys)
        assert rc == 0 and warned == sorted(code for code, _ in found) and bool(found) == expect_any, found
