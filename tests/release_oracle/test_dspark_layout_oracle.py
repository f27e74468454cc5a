"""Issue 58, held to the releases' own code: the DSpark block layout vLLM 0.26 and 0.34 run for each
variant of the miniature draft's config (tests/release_oracle/dspark_layout_probe.py, in each release's
oracle venv), against surgery's reading of the releases' facts (surgery/checks/dspark_layout.py): the same
layout, and SRG740 exactly where that layout is not the one the config states. Slow: one engine-config
build per variant in each oracle (about 2 min from cold on two busy cores)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testpaths import ROOT
from surgery.checks.dspark_layout import layout_finding, runs_anchor_first, stated_layout
from surgery.engine.releases import release
from surgery.facts import read_facts

sys.path.insert(0, str(Path(__file__).resolve().parent))
from venvs import ENV, ORACLES, oracle_python  # noqa: E402

PAIR = ROOT / "surgery" / "data" / "pairs" / "dspark" / "draft"
TARGET = ROOT / "surgery" / "data" / "pairs" / "llama-target"
PROBE = Path(__file__).resolve().parent / "dspark_layout_probe.py"
VARIANTS = {  # id -> config edits (None: drop the key)
    "old-key-only": {"sample_from_anchor": None},  # the pair as it was (issue 58)
    "fixed": {},  # the shipped pair: both keys
    "new-key-only": {"dspark_bonus_anchor": None},
    "anchor-first-both": {"sample_from_anchor": True, "dspark_bonus_anchor": False},
    "none": {"sample_from_anchor": None, "dspark_bonus_anchor": None},
}

pytestmark = pytest.mark.slow


def _variant(tmp: Path, name: str, edits: dict) -> Path:
    folder = tmp / f"dspark-{name}"
    folder.mkdir()
    cfg = json.loads((PAIR / "config.json").read_text())
    for k, v in edits.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (folder / "config.json").write_text(json.dumps(cfg))
    (folder / "model.safetensors").symlink_to(PAIR / "model.safetensors")
    return folder


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dspark-layout")
    return {name: _variant(tmp, name, edits) for name, edits in VARIANTS.items()}


@pytest.mark.parametrize("version", ["0.26.0", "0.34.0"])
def test_surgery_reads_the_layout_the_release_runs(variants, version):
    py, why = oracle_python(version)
    if py is None:
        pytest.skip(why)
    payload = {"target": str(TARGET), "cases": [{"id": n, "draft": str(p)} for n, p in variants.items()]}
    env = {**os.environ, **ENV}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([py, str(PROBE)], input=json.dumps(payload), capture_output=True, text=True, env=env,
                          cwd=str(ORACLES if ORACLES.is_dir() else ROOT), timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    oracle = json.loads(proc.stdout.strip().splitlines()[-1])
    rel = release("vllm", version)[0]
    flag = rel.facts["dspark"]["layout_flag"]
    for name, folder in variants.items():
        got = oracle[name]
        assert "refused" not in got, (name, got)
        draft = read_facts(folder / "config.json")
        assert got["at"] == flag["at"], (name, got)
        assert got["sample_from_anchor"] == runs_anchor_first(flag, draft.raw), (version, name, got)
        if "num_lookahead_tokens" in got:  # 0.34's config layer reads the same key (dspark/config.py)
            k = got["num_speculative_tokens"]
            assert got["num_lookahead_tokens"] == (k if got["sample_from_anchor"] else k + 1), (name, got)
        _, wanted = stated_layout(draft.raw)
        found = layout_finding(rel, draft, "dspark")
        named = found is not None and found.code == "SRG740"
        assert named == (wanted is not None and wanted != got["sample_from_anchor"]), (version, name, got, found)
    # the pair: fill-in on 0.26, anchor-first on 0.34
    assert oracle["old-key-only"]["sample_from_anchor"] is (version != "0.26.0")
    assert oracle["fixed"]["sample_from_anchor"] is False
