"""Issue 58: DSpark's block layout per vLLM release (surgery/checks/dspark_layout.py, SRG740 / SRG741).

The miniature DSpark pair accepted 80.8 % on vLLM 0.26 and 25.3 % on 0.34, outputs identical to greedy and
every check passing. Its config stated the fill-in layout (the anchor is the bonus token) with
`dspark_bonus_anchor: true`, the key 0.25-0.26 read; 0.27 renamed it `sample_from_anchor` (default: the
anchor-first layout) and reads the old key no longer. These tests hold the check to the releases' facts
(surgery/data/releases/vllm.json, read from each wheel), to the wheels themselves where they are on disk,
and to the plugin's start check and the audit on stand-ins; tests/release_oracle/test_dspark_layout_oracle.py
(slow) holds it to the releases' own code in their oracle venvs."""
from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from testpaths import ROOT, VLLM_WHEELS_WHERE, vllm_wheels
from surgery.checks.dspark_layout import audit_finding, layout_finding, runs_anchor_first, start_finding
from surgery.engine.releases import known, release
from surgery.facts import read_facts

PAIR = ROOT / "surgery" / "data" / "pairs" / "dspark" / "draft"
TARGET = ROOT / "surgery" / "data" / "pairs" / "llama-target"
OLD_KEY_RELEASES = {"0.25.0", "0.25.1", "0.26.0"}


def _config(tmp_path: Path, drop=(), **changes) -> Path:
    """A copy of the miniature draft's config.json (config only: validate reads no weights) with changes."""
    cfg = json.loads((PAIR / "config.json").read_text())
    for key in drop:
        cfg.pop(key)
    cfg.update(changes)
    folder = tmp_path / "draft"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def _facts(folder: Path):
    return read_facts(folder / "config.json")


def test_each_release_reads_its_own_layout_key():
    """The facts of every covered release: 0.25-0.26 `not dspark_bonus_anchor` (default False), 0.27+
    `sample_from_anchor` (default True); both defaults give the anchor-first layout."""
    for v in known("vllm"):
        flag = release("vllm", v)[0].facts["dspark"]["layout_flag"]
        old = v in OLD_KEY_RELEASES
        assert flag["key"] == ("dspark_bonus_anchor" if old else "sample_from_anchor"), v
        assert (flag["default"], flag["negated"]) == ((False, True) if old else (True, False)), v
        assert flag["at"].startswith("vllm/v1/worker/gpu/spec_decode/dspark/speculator.py:")
        assert runs_anchor_first(flag, {}) is True  # nothing stated: anchor-first everywhere


@pytest.mark.parametrize("version", ["0.26.0", "0.27.0", "0.34.0"])
def test_the_facts_are_the_wheels(version):
    """tools/releasefacts.py on the wheel itself (where it is on disk) gives the committed facts."""
    found = vllm_wheels(version)
    if not found:
        pytest.skip(f"no vLLM {version} wheel in .cache/wheels/vllm (tools/gen_engine_releases.py fetches it) or .cache/oracles/wheels")
    sys.path.insert(0, str(ROOT / "tools"))
    from releasefacts import SourceTree, vllm_dspark_facts

    assert vllm_dspark_facts(SourceTree(found[0])) == release("vllm", version)[0].facts["dspark"]


@pytest.mark.parametrize("version", ["0.25.0", "0.26.0", "0.27.0", "0.32.0", "0.34.0"])
def test_the_old_key_alone_is_named_on_the_releases_that_do_not_read_it(tmp_path, version):
    """The miniature's config as it was (issue 58): fine on 0.25-0.26, SRG740 on 0.27+ naming the key."""
    draft = _facts(_config(tmp_path, drop=["sample_from_anchor"]))
    rel = release("vllm", version)[0]
    found = layout_finding(rel, draft, "dspark")
    if version in OLD_KEY_RELEASES:
        assert found is None
        return
    assert found is not None and found.code == "SRG740" and found.severity == "error"
    assert "reads sample_from_anchor (default True, vllm/v1/worker/gpu/spec_decode/dspark/speculator.py:" \
        in found.message
    assert "never dspark_bonus_anchor" in found.message and "fill-in" in found.message
    assert found.location.key_path == "dspark_bonus_anchor"


def test_the_shipped_pair_states_its_layout_for_every_release():
    draft = _facts(PAIR)
    assert draft.raw["sample_from_anchor"] is False and draft.raw["dspark_bonus_anchor"] is True
    for v in known("vllm"):
        rel = release("vllm", v)[0]
        assert layout_finding(rel, draft, "dspark") is None, v
        assert runs_anchor_first(rel.facts["dspark"]["layout_flag"], draft.raw) is False, v


def test_keys_that_disagree_and_the_new_key_alone(tmp_path):
    both = _facts(_config(tmp_path, sample_from_anchor=True))  # + dspark_bonus_anchor true: they disagree
    for v in ("0.26.0", "0.34.0"):
        found = layout_finding(release("vllm", v)[0], both, "dspark")
        assert found is not None and found.code == "SRG740" and "disagree" in found.message, v
    new_only = _facts(_config(tmp_path / "n", drop=["dspark_bonus_anchor"]))
    assert layout_finding(release("vllm", "0.34.0")[0], new_only, "dspark") is None
    found = layout_finding(release("vllm", "0.26.0")[0], new_only, "dspark")
    assert found is not None and "reads dspark_bonus_anchor" in found.message and "never sample_from_anchor" in found.message
    # not a DSpark serving: nothing to say
    old = _facts(_config(tmp_path / "o", drop=["sample_from_anchor"]))
    assert layout_finding(release("vllm", "0.34.0")[0], old, "dflash") is None


def test_a_speculators_file_that_0_26s_reader_overrides(tmp_path):
    """0.25-0.26's update_dspark writes dspark_bonus_anchor true whatever the file says (algos.py)."""
    src = json.loads((ROOT / "tests" / "data" / "formats" / "speculators-miniature-dspark" / "config.json").read_text())
    for value, refused_026 in ((True, True), (False, False)):
        folder = tmp_path / str(value)
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({**src, "sample_from_anchor": value}))
        draft = _facts(folder)
        found = layout_finding(release("vllm", "0.26.0")[0], draft, "dspark")
        assert (found is not None) == refused_026
        if found is not None:
            assert "speculators reader writes the fill-in" in found.message and "algos.py:" in found.message
        assert layout_finding(release("vllm", "0.34.0")[0], draft, "dspark") is None


def test_validate_names_it(run_cli, tmp_path):
    old = _config(tmp_path, drop=["sample_from_anchor"])
    for version, code_expected in (("0.34.0", True), ("0.26.0", False)):
        code, out, err = run_cli("validate", "dspark", "--target", TARGET, "--draft", old, "--engine", "vllm",
                                 "--engine-version", version, "--json")
        found = {d["code"]: d for d in json.loads(out)["diagnostics"]}
        assert ("SRG740" in found) == code_expected, (version, sorted(found))
        if code_expected:
            assert code == 1 and found["SRG740"]["severity"] == "error"
    code, out, _ = run_cli("validate", "dspark", "--target", TARGET, "--draft", PAIR, "--engine", "vllm",
                           "--engine-version", "0.34.0", "--json")
    assert "SRG740" not in {d["code"] for d in json.loads(out)["diagnostics"]}


def _vllm_config(hf_config, method="dspark"):
    draft = types.SimpleNamespace(hf_config=hf_config)
    return types.SimpleNamespace(speculative_config=types.SimpleNamespace(method=method, draft_model_config=draft))


def test_start_check_reads_the_config_vllm_built(tmp_path):
    """The plugin's start check: the running release's key and default on the draft config object vLLM
    built (the one DSparkSpeculator reads), against what the draft's config.json states."""
    old = _facts(_config(tmp_path, drop=["sample_from_anchor"]))
    built = types.SimpleNamespace(**old.raw)  # vLLM's PretrainedConfig: the file's keys as attributes
    found = start_finding(_vllm_config(built), old, "0.34.0+cu130")
    assert found is not None and found.code == "SRG741" and "anchor-first" in found.message
    assert "vLLM 0.34.0+cu130 reads sample_from_anchor" in found.message
    assert start_finding(_vllm_config(built), old, "0.26.0") is None
    assert start_finding(_vllm_config(built, "dflash"), old, "0.34.0") is None
    fixed = _facts(PAIR)
    assert start_finding(_vllm_config(types.SimpleNamespace(**fixed.raw)), fixed, "0.34.0") is None


def test_plugin_start_refuses_it(tmp_path, monkeypatch):
    from surgery.vllm import config_check, hooks

    old = _facts(_config(tmp_path, drop=["sample_from_anchor"]))
    monkeypatch.setattr(hooks, "engine_version", lambda: "0.34.0")
    selection = types.SimpleNamespace(draft=old)
    found = config_check.dspark_layout_misread(_vllm_config(types.SimpleNamespace(**old.raw)), selection)
    assert [d.code for d in found] == ["SRG741"]


class DSparkSpeculator:  # the name the audit reads; the attribute is DSparkSpeculator.__init__'s
    def __init__(self, sample_from_anchor):
        self.sample_from_anchor = sample_from_anchor
        self.speculative_config = types.SimpleNamespace(method="dspark")


def test_audit_reads_the_speculators_own_choice(tmp_path):
    old = _facts(_config(tmp_path, drop=["sample_from_anchor"]))
    found = audit_finding(DSparkSpeculator(True), old)
    assert found is not None and found.code == "SRG741" and "its sample_from_anchor is True" in found.message
    assert audit_finding(DSparkSpeculator(False), old) is None
    assert audit_finding(types.SimpleNamespace(sample_from_anchor=False,
                                               speculative_config=types.SimpleNamespace(method="dflash")), old) is None


@pytest.mark.slow
def test_the_builder_writes_both_keys():
    """tools/build_block_pairs.py writes the config the shipped pair has, both layout keys included
    (about 30 s: the builder imports the family kit)."""
    pytest.importorskip("torch")
    sys.path.insert(0, str(ROOT / "tools"))
    import build_block_pairs

    built = json.loads(json.dumps(build_block_pairs.dflash_config(markov_rank=16), sort_keys=True))
    assert built == json.loads((PAIR / "config.json").read_text())
    assert built["sample_from_anchor"] is False and built["dspark_bonus_anchor"] is True
    copy = json.loads((ROOT / "tests" / "data" / "block_drafts" / "dspark-qwen3.json").read_text())
    copy.pop("_source")
    assert copy == built


def test_the_gpu_bench_builds_and_checks_its_rows(tmp_path, monkeypatch):
    """bench/gpu/dspark034.py --cpu: each suspect row's draft is built and checked (no engine)."""
    monkeypatch.setenv("OUT", str(tmp_path))
    monkeypatch.syspath_prepend(str(ROOT / "bench" / "gpu"))
    import importlib

    import common

    monkeypatch.setattr(common, "OUT", tmp_path)
    bench = importlib.import_module("dspark034")
    monkeypatch.setattr(bench, "save", lambda name, data: (tmp_path / f"{name}.json").write_text(json.dumps(data)))
    assert bench.main(["--cpu", "--only", "old-key-only,anchor-first-both,fixed,old-key-only+recipe"]) == 0
    rows = json.loads((tmp_path / "dspark034_cpu.json").read_text())["rows"]
    got = {n: (r["checks"]["0.26.0"]["anchor_first"], r["checks"]["0.34.0"]["anchor_first"],
               r["checks"]["0.34.0"]["SRG740"] is not None, r["checks"]["plugin_start_0.34"]) for n, r in rows.items()}
    assert got == {"old-key-only": (False, True, True, "SRG741"), "anchor-first-both": (True, True, False, "ok"),
                   "fixed": (False, False, False, "ok"), "old-key-only+recipe": (False, True, True, "SRG741")}
