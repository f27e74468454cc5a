"""`surgery doctor`: the check a user runs in the server's environment before serving, because an
engine that finds no entry point starts with no plugin at all, silently (the H200, 2026-12-03).

The entry-point cases run in a subprocess whose sys.path is this checkout plus a copy of the venv's
site-packages (symlinks) without spec-surgery's dist-info: exactly what `importlib.metadata` and
the engine see when the repository is on PYTHONPATH but not installed. They use `--engine sglang`
(no SGLang in CI: the entry-point check still runs, the engine import fails fast with SRG042), so
no vLLM import is paid per subprocess."""
from __future__ import annotations

import json
import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

from testpaths import ROOT

from surgery import doctor
from surgery.vllm import hooks as vllm_hooks

EP_TEXT = "[vllm.general_plugins]\nspec_surgery = surgery.vllm.plugin:register\n\n" \
          "[sglang.srt.plugins]\nspec_surgery = surgery.sglang.plugin:register\n"


@pytest.fixture(scope="module")
def bare_site(tmp_path_factory) -> Path:
    """The venv's site-packages as symlinks, minus spec-surgery's own install (dist-info, editable finder)."""
    real = Path(next(p for p in site.getsitepackages() if Path(p, "vllm").exists() or Path(p, "yaml").exists()))
    bare = tmp_path_factory.mktemp("site")
    for entry in real.iterdir():
        low = entry.name.lower()
        if low.startswith(("spec_surgery", "__editable__")) or low.endswith(".pth"):
            continue
        (bare / entry.name).symlink_to(entry)
    return bare


def _doctor(bare: Path, *extra_paths: Path, args=("--engine", "sglang")) -> tuple[int, dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SURGERY_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *map(str, extra_paths), str(bare)])
    proc = subprocess.run([sys.executable, "-S", "-m", "surgery", "doctor", "--json", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def _entry(result: dict, engine: str) -> dict:
    return next(c for c in result["checks"] if c["check"] == "entry point" and c["engine"] == engine)


def _dist_info(folder: Path, extra: dict[str, str] | None = None) -> Path:
    info = folder / "spec_surgery-0+repo.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: spec-surgery\nVersion: 0+repo\n")
    (info / "entry_points.txt").write_text(EP_TEXT)
    for name, text in (extra or {}).items():
        (info / name).write_text(text)
    return folder


# A checkout installed in place (setuptools' editable mode without a finder) carries its own
# spec_surgery.egg-info at its root, and the subprocesses below put that root on sys.path: the entry point
# is then visible from the checkout itself, so "not installed" cannot be staged there.
_CHECKOUT_HAS_METADATA = any(ROOT.glob("*.egg-info"))
_needs_bare_checkout = pytest.mark.skipif(_CHECKOUT_HAS_METADATA, reason="checkout root carries spec_surgery.egg-info")


@_needs_bare_checkout
def test_not_installed_is_the_coded_error_and_an_entry_point_only_dist_info_fixes_it(bare_site, tmp_path):
    code, result = _doctor(bare_site)
    assert code == 1 and not result["ok"]
    assert _entry(result, "sglang")["code"] == "SRG040"
    assert "pip install" in _entry(result, "sglang")["hint"]
    code, result = _doctor(bare_site, _dist_info(tmp_path / "ep"))
    found = _entry(result, "sglang")
    assert found["status"] == "ok", found
    assert str(ROOT / "surgery" / "sglang" / "plugin.py") in found["message"]


@_needs_bare_checkout
def test_an_entry_point_of_another_checkout_is_a_finding(bare_site, tmp_path):
    other = tmp_path / "other-checkout"
    (other / "surgery").mkdir(parents=True)
    direct_url = json.dumps({"url": other.as_uri(), "dir_info": {"editable": True}})
    code, result = _doctor(bare_site, _dist_info(tmp_path / "ep", {"direct_url.json": direct_url}))
    found = _entry(result, "sglang")
    assert code == 1 and found["code"] == "SRG041", found
    assert str(other) in found["message"] and str(ROOT / "surgery") in found["message"]


def test_the_real_environment_passes_for_vllm(run_cli):
    """This venv has spec-surgery installed editable. From the checkout it was installed from, doctor
    passes; from another worktree on PYTHONPATH it is the SRG041 finding (and nothing else fails)."""
    code, out, err = run_cli("doctor", "--engine", "vllm", "--json")
    result = json.loads(out)
    errors = [c for c in result["checks"] if c["status"] == "error"]
    from importlib.metadata import distribution

    installed_from = doctor.dist_package_dir(distribution("spec-surgery"))
    if installed_from == (ROOT / "surgery").resolve():
        assert code == 0 and not errors, errors
    else:
        assert [c["code"] for c in errors] == ["SRG041"], errors
    checks = {c["check"] for c in result["checks"]}
    assert {"entry point", "engine", "hook targets", "environment"} <= checks


def test_a_missing_hook_target_is_an_error(monkeypatch, run_cli):
    monkeypatch.setattr(vllm_hooks, "LOAD_MODEL_TARGETS", (("vllm.no_such_module", "NoProposer"),))
    found = doctor.check_vllm_hooks()
    assert [d.code for d in found if d.severity == "error"] == ["SRG044"]
    assert "vllm.no_such_module.NoProposer" in found[0].message


def test_the_real_hook_targets_are_found():
    """The same lists on the installed vLLM: the draft-load line is ok (an untouched lookup fails above)."""
    found = doctor.check_vllm_hooks()
    assert all(d.severity != "error" for d in found), [d.render() for d in found]
    assert any(f"{m}.{c}" in found[0].message for m, c in vllm_hooks.LOAD_MODEL_TARGETS)


def test_a_bad_recipe_is_its_coded_error_without_traceback(run_cli, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("recipe: x\nversion: [1\n")
    code, out, err = run_cli("doctor", "--engine", "sglang", "--recipe", bad)
    assert code == 1 and "Traceback" not in out + err
    line = next(line for line in out.splitlines() if line.startswith("error   recipe"))
    assert "SRG0" in line and str(bad) in line
    code, out, _ = run_cli("doctor", "--engine", "sglang", "--recipe", "gemma4-mtp")
    assert next(line for line in out.splitlines() if " recipe" in line).startswith("ok")


def test_env_vars_are_shown_and_an_unwritable_report_folder_is_an_error(run_cli, monkeypatch, tmp_path):
    monkeypatch.setenv("SURGERY_MODE", "audit")
    monkeypatch.setenv("SURGERY_REPORT", str(tmp_path / "missing" / "report.json"))
    code, out, _ = run_cli("doctor", "--engine", "sglang", "--json")
    result = json.loads(out)
    assert any(c["message"] == "SURGERY_MODE=audit" for c in result["checks"])
    assert [c["code"] for c in result["checks"] if c["check"] == "report path"] == ["SRG045"]
    monkeypatch.setenv("SURGERY_REPORT", str(tmp_path / "report.json"))
    _, out, _ = run_cli("doctor", "--engine", "sglang", "--json")
    assert [c["status"] for c in json.loads(out)["checks"] if c["check"] == "report path"] == ["ok"]


def test_a_missing_sglang_draft_load_point_is_an_error(monkeypatch):
    """The SGLang list comes from its engine card; only `sglang.` modules are looked up."""
    from surgery.sglang import hooks as sglang_hooks

    monkeypatch.setattr(sglang_hooks, "draft_load_points", lambda: [("os.path", "join", "x")])
    found = doctor.check_sglang_hooks()
    assert [d.code for d in found] == ["SRG044"] and "not an SGLang module" in found[0].message


@pytest.mark.parametrize("engine,label", [("vllm", "vLLM"), ("sglang", "SGLang")])
def test_the_cards_versions_are_the_readme_rows(engine, label):
    """`ran_versions` (what doctor compares with) and README "Supported versions" say the same."""
    from surgery.engine.cards import card

    table = (ROOT / "README.md").read_text().split("## Supported versions", 1)[1].split("\n## ", 1)[0]
    rows = [r.split("|") for r in table.splitlines() if r.startswith("| ")]
    readme = {cells[2].strip().split()[0] for cells in rows
              if cells[1].strip().split()[0] == label and cells[4].strip() != "-"}
    assert set(card(engine).ran_versions) == readme
