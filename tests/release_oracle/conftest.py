"""The release oracles' shared fixtures: the grid's cases and every oracle process, started together on
first use and read by each test (test_release_oracle.py: each release's config layer and class facts;
test_construct_oracle.py: the classes constructed on meta, issue 65). Started together they run side by
side on the machine's cores; started per module, the second module would wait for the first's."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import venvs  # noqa: E402
from oracle_cases import construct_cases, facts_asked, published_cases  # noqa: E402

#: the releases the construct oracle asks (issue 65: 0.26 and 0.34, each in its oracle venv)
CONSTRUCT_RELEASES = ("0.26.0", "0.34.0")


@pytest.fixture(scope="session")
def cases(tmp_path_factory):
    return published_cases(tmp_path_factory.mktemp("release_oracle"))


@pytest.fixture(scope="session")
def oracle_runs(cases):
    """Every release's grid, fact and construct run, started together on first use."""
    from surgery.engine.releases import release_data

    runs = {}
    for release in venvs.RELEASES:
        if venvs.oracle_python(release)[0] is None:
            continue
        runs[("grid", release)] = venvs.OracleRun(release, cases)
        facts = release_data("vllm")["releases"][release]
        runs[("facts", release)] = venvs.OracleRun(release, {"facts_for": facts_asked(facts), "kv_sharing_copy":
                                                             (facts.get("kv_sharing_copy") or {}).get("defined_in", {})})
        if release in CONSTRUCT_RELEASES:
            runs[("construct", release)] = venvs.OracleRun(release, construct_cases(cases),
                                                           runner=venvs.CONSTRUCT_RUNNER)
    yield runs
    for run in runs.values():
        run.discard()
