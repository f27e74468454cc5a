"""Catalogue 4's SGLang reports (issue 68; docs/audit.md "Catalogue 4"), caught by name per SGLang release from
the wheels (surgery/data/catalogue4.yaml `sglang:`, surgery/data/releases/sglang.json `start.catalogue4`).

Real public configs: SpecForge's gpt-oss-120B EAGLE-3 template (tests/verdicts/configs, verbatim) and
gpt-oss-120b's own config. No verbatim copy of nvidia/gpt-oss-120b-Eagle3-v3's config.json was found in
the stored public sources, so the v3 head is SpecForge's gpt-oss-120B head with the `eagle_config` v3
ships, as the fix's own test in SGLang states it (sgl-project/sglang#32334,
test/registered/unit/models/test_llama_eagle3_norm_before_fc: `eagle_aux_hidden_state_layer_ids`
[24, 30, 36], `norm_before_fc` true; the PR's table: "boundaries [24, 30, 36], norm_before_fc"). The
NemotronH MTP case is tests/data/configs/nemotron_h/Nemotron-H-MTP.json (its _source says how it was read).
Every test fails on the branch point (no SRG807 / SRG808, no `start.catalogue4` rows)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from testpaths import CONFIGS, ROOT

VERDICTS = ROOT / "tests" / "verdicts" / "configs"
GPT_OSS = VERDICTS / "gpt-oss-120b.json"
GPT_OSS_HEAD = VERDICTS / "specforge-gpt-oss-120B-eagle3.json"  # SpecForge configs/gpt-oss-120B-eagle3.json
NEMOTRON_MTP = CONFIGS / "nemotron_h" / "Nemotron-H-MTP.json"
V3_EAGLE_CONFIG = {"eagle_aux_hidden_state_layer_ids": [24, 30, 36], "norm_before_fc": True}


def head(tmp_path: Path, eagle_config: dict | None) -> Path:
    cfg = {k: v for k, v in json.loads(GPT_OSS_HEAD.read_text()).items() if not k.startswith("_")}
    if eagle_config is not None:
        cfg["eagle_config"] = eagle_config
    p = tmp_path / f"head-{len(list(tmp_path.iterdir()))}.json"
    p.write_text(json.dumps(cfg))
    return p


def findings(run_cli, recipe, target, draft, version, method) -> list[dict]:
    rc, out, err = run_cli("validate", recipe, "--target", target, "--draft", draft, "--engine", "sglang",
                           "--engine-version", version, "--method", method, "--max-model-len", "4096", "--json")
    assert out.strip(), err
    return json.loads(out)["diagnostics"]


def coded(diags: list[dict], code: str) -> list[dict]:
    return [d for d in diags if d["code"] == code]


# ------------------------------------------------------------- SRG807: sglang#32226 -> #32334 (gpt-oss v3)

def test_gpt_oss_v3_head_on_0_5_16_is_an_error_and_a_warning_naming_sglang_32226(run_cli, tmp_path):
    diags = coded(findings(run_cli, "eagle3", GPT_OSS, head(tmp_path, V3_EAGLE_CONFIG), "0.5.16", "EAGLE3"), "SRG807")
    by = {d["severity"]: d for d in diags}
    assert sorted(by) == ["error", "warning"], diags
    assert "[25, 31, 37]" in by["error"]["message"] and "2 of 3 states" in by["error"]["message"]
    assert "norm_before_fc" in by["warning"]["message"]
    assert all("sglang#32226" in d["message"] and "sglang#32334" in d["message"] for d in diags)


@pytest.mark.parametrize("version", ["0.5.17", "0.5.23"])
def test_gpt_oss_v3_head_on_releases_that_read_eagle_config_is_silent(run_cli, tmp_path, version):
    assert not coded(findings(run_cli, "eagle3", GPT_OSS, head(tmp_path, V3_EAGLE_CONFIG), version, "EAGLE3"), "SRG807")


def test_specforge_gpt_oss_head_as_published_is_no_srg807_on_0_5_16(run_cli):
    """Control: ids [1, 17, 33] are layer outputs (SpecForge's convention), which 0.5.16's +1 serves right."""
    assert not coded(findings(run_cli, "eagle3", GPT_OSS, GPT_OSS_HEAD, "0.5.16", "EAGLE3"), "SRG807")


def test_norm_before_fc_alone_on_0_5_16_is_a_warning(run_cli, tmp_path):
    draft = head(tmp_path, {"eagle_aux_hidden_state_layer_ids": [1, 17, 33], "norm_before_fc": True})
    diags = coded(findings(run_cli, "eagle3", GPT_OSS, draft, "0.5.16", "EAGLE3"), "SRG807")
    assert [d["severity"] for d in diags] == ["warning"], diags


def test_srg807_is_sglangs_only(run_cli, tmp_path):
    rc, out, err = run_cli("validate", "eagle3", "--target", GPT_OSS, "--draft", head(tmp_path, V3_EAGLE_CONFIG),
                           "--engine", "vllm", "--engine-version", "0.34.0", "--json")
    assert out.strip(), err
    assert not coded(json.loads(out)["diagnostics"], "SRG807")


# ------------------------------------------------------------------ SRG808: sglang#30456 (NemotronH MTP)

@pytest.mark.parametrize("version", ["0.5.16", "0.5.23"])
def test_nemotron_h_mtp_on_releases_with_the_fix_is_silent(run_cli, version):
    assert not coded(findings(run_cli, "mtp", NEMOTRON_MTP, NEMOTRON_MTP, version, "NEXTN"), "SRG808")


def test_nemotron_h_mtp_on_a_release_without_the_fix_is_an_error_naming_sglang_30456(run_cli, monkeypatch):
    """No wheel read lacks the fix (it predates 0.5.16): a release whose data says so, as a pre-fix wheel reads."""
    from surgery.checks import catalogue4_sglang

    real = catalogue4_sglang._fixes
    monkeypatch.setattr(catalogue4_sglang, "_fixes", lambda rel, rule: {"keeps_shared": None}
                        if rule == "nemotron_h_mtp_shared" else real(rel, rule))
    diags = coded(findings(run_cli, "mtp", NEMOTRON_MTP, NEMOTRON_MTP, "0.5.23", "NEXTN"), "SRG808")
    assert len(diags) == 1 and diags[0]["severity"] == "error" and "sglang#30456" in diags[0]["message"], diags


def test_nemotron_h_puzzle_mtp_on_a_release_without_the_fix_is_an_error_too(run_cli, monkeypatch):
    """Found by the outside check (bench/catalogue4_outside.py): SGLang's model_config.py rewrites a
    NemotronHPuzzleForCausalLM draft to NemotronHForCausalLMMTP as it does NemotronHForCausalLM's (every wheel read),
    so it loads through the same filter; the rule named NemotronHForCausalLM only."""
    from surgery.checks import catalogue4_sglang

    puzzle = CONFIGS / "nemotron_h" / "Nemotron-H-Puzzle-MTP.json"
    assert not coded(findings(run_cli, "mtp", puzzle, puzzle, "0.5.23", "NEXTN"), "SRG808")  # the wheel: fixed
    real = catalogue4_sglang._fixes
    monkeypatch.setattr(catalogue4_sglang, "_fixes", lambda rel, rule: {"keeps_shared": None}
                        if rule == "nemotron_h_mtp_shared" else real(rel, rule))
    diags = coded(findings(run_cli, "mtp", puzzle, puzzle, "0.5.23", "NEXTN"), "SRG808")
    assert len(diags) == 1 and diags[0]["severity"] == "error" and "sglang#30456" in diags[0]["message"], diags


# ---------------------------------------------------------------------------- the release data itself

def test_release_data_holds_each_fix_where_each_wheel_has_it():
    from surgery.engine.releases import known, release

    rows = {v: release("sglang", v)[0].facts["start"]["catalogue4"] for v in known("sglang")}
    assert rows["0.5.16"]["eagle_config_boundaries"] == {"final_boundary": None, "norm_before_fc": None}
    for version, row in rows.items():
        assert row["nemotron_h_mtp_shared"]["keeps_shared"].startswith("sglang/srt/models/nemotron_h.py:"), version
        if version != "0.5.16":
            assert row["eagle_config_boundaries"]["final_boundary"].startswith("sglang/srt/models/gpt_oss.py:")
            assert row["eagle_config_boundaries"]["norm_before_fc"].startswith("sglang/srt/models/llama_eagle3.py:")


def test_every_sglang_catalogue4_code_is_catalogued_for_sglang_only():
    from surgery.checks.catalogue3 import catalogue4_data
    from surgery.text.diagnostics import catalogue

    for name in ("sglang_eagle_config_boundaries", "sglang_nemotron_h_mtp_shared"):
        row = catalogue4_data()["checks"][name]
        entry = catalogue()[row["code"]]
        assert entry.get("engines") == ["sglang"] and entry.get("explain") and row["reports"], name


@pytest.mark.parametrize("version,refused", [("0.5.16", True), ("0.5.17", False), ("0.5.23", False)])
def test_the_final_boundary_id_is_capturable_where_gpt_oss_keeps_boundaries(run_cli, tmp_path, version, refused):
    """SRG362 reads the class's own capture: from 0.5.17 gpt_oss.py keeps ids whose largest is L as boundaries
    and captures L after the last layer (the recipe's layer set [24, 30, 36] of a 36-layer target); 0.5.16 adds
    1 and never captures L."""
    diags = findings(run_cli, "eagle3", GPT_OSS, head(tmp_path, V3_EAGLE_CONFIG), version, "EAGLE3")
    assert bool([d for d in coded(diags, "SRG362") if d["severity"] == "error"]) is refused, coded(diags, "SRG362")
