"""SRG676-678: draft-config keys that one vLLM release reads and another does not
(surgery/checks/config_spelling.py, data surgery/data/vllm_config_spelling.yaml). The 0.32.0 facts are
checked against the installed vLLM's own functions; the shipped pairs trigger on 0.26.0, not on 0.32.0,
and the configs with the hinted keys added are silent on 0.26.0."""
from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from testpaths import ROOT  # noqa: E402

from surgery.checks.config_spelling import (fc_layer_count, installed_vllm_version, release_rules,  # noqa: E402
                                            spelling_findings)

PAIRS = ROOT / "surgery" / "data" / "pairs"
PEAGLE = json.loads((PAIRS / "peagle" / "draft" / "config.json").read_text())
DSPARK = json.loads((PAIRS / "dspark" / "draft" / "config.json").read_text())
DFLASH = json.loads((PAIRS / "dflash" / "draft" / "config.json").read_text())


def _codes(cfg, version, parallel=True, method=None):
    return sorted(d.code for d in spelling_findings(cfg, cfg["architectures"], "config.json", version, parallel,
                                                    method=method))


@pytest.mark.parametrize("name,cfg,method,old", [("peagle", PEAGLE, "eagle3", ["SRG676"]),
                                                 ("dspark", DSPARK, "dspark", ["SRG677"]),
                                                 ("dflash", DFLASH, "dflash", [])])
def test_shipped_pairs_on_026_and_032(name, cfg, method, old):
    for version in ("0.25.0", "0.25.1", "0.26.0"):
        assert _codes(cfg, version, method=method) == old, version
    assert _codes(cfg, "0.32.0", method=method) == []
    assert _codes(cfg, "0.32.0+cpu", method=method) == []


def test_dspark_mask_token_read_by_the_v2_runner():
    """Issue 65: 0.25 / 0.26 always serve dspark on the V2 runner, whose get_parallel_drafting_token_id reads a
    top-level mask_token_id; the legacy runner's reader (P-EAGLE's, SRG676) does not apply to it."""
    assert "SRG676" not in _codes(DSPARK, "0.26.0", method="dspark")
    assert "SRG676" in _codes(DSPARK, "0.26.0", method="eagle3")  # a parallel EAGLE-3 head: the legacy runner


def test_fixed_configs_silent_on_026():
    peagle = {**PEAGLE, "pard_token": 3}
    dspark = {**DSPARK, "pard_token": 3, "dflash_config": {"target_layer_ids": [0, 6, 7]}}
    assert _codes(peagle, "0.26.0") == [] and _codes(dspark, "0.26.0") == []
    assert _codes(peagle, "0.32.0") == [] and _codes(dspark, "0.32.0") == []


def test_hint_names_the_key_and_value():
    (d,) = spelling_findings(PEAGLE, PEAGLE["architectures"], "c.json", "0.26.0", True)
    assert '"pard_token": 3' in d.hint and "speculators" in d.hint and d.location.key_path == "mask_token_id"
    fc = [x for x in spelling_findings(DSPARK, DSPARK["architectures"], "c.json", "0.26.0", True) if x.code == "SRG677"]
    assert '"dflash_config": {"target_layer_ids": [0, 6, 7]}' in fc[0].hint


def test_coincidental_count_loads_on_026():
    """2 ids with 2 layers: 0.26 sizes fc right and captures the named layers (eagle3_utils reads
    top-level target_layer_ids in 0.26 too): nothing to report."""
    cfg = {**DSPARK, "target_layer_ids": [0, 7], "pard_token": 3}
    assert _codes(cfg, "0.26.0") == []


def test_unknown_or_missing_version_is_info_not_silence():
    for version in ("0.29.0", None):
        (d,) = spelling_findings(DSPARK, DSPARK["architectures"], "c.json", version, True)
        assert d.code == "SRG678" and d.severity == "info"
    plain = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2}
    assert spelling_findings(plain, plain["architectures"], "c.json", "0.29.0", False) == []


def test_cli_engine_version(capsys):
    from surgery.cli import main

    args = ["validate", "peagle", "--target", str(PAIRS / "llama-target"), "--draft", str(PAIRS / "peagle" / "draft"),
            "--json"]
    assert main(args + ["--engine-version", "0.26.0"]) != 0
    assert "SRG676" in capsys.readouterr().out
    main(args + ["--engine-version", "0.32.0"])
    assert "SRG676" not in capsys.readouterr().out


# ---------------------------------------------------------------- oracle: the installed vLLM 0.32
vllm = pytest.importorskip("vllm")


def test_installed_release_is_known():
    assert release_rules(installed_vllm_version()) is not None


def _hf(cfg):
    from transformers import PretrainedConfig

    return PretrainedConfig(**copy.deepcopy(cfg))


@pytest.mark.parametrize("cfg", [PEAGLE, DSPARK, DFLASH, {**PEAGLE, "mask_token_id": None, "pard_token": 5}])
def test_installed_mask_token_reader_accepts_what_the_rule_says(cfg):
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

    fake = SimpleNamespace(draft_model_config=SimpleNamespace(hf_config=_hf(cfg)), pass_hidden_states_to_model=False)
    ok = not _codes(cfg, installed_vllm_version())
    try:
        SpecDecodeBaseProposer._init_parallel_drafting_params(fake)
        accepted = True
    except ValueError:
        accepted = False
    assert accepted == ok


def test_installed_mask_token_reader_order():
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

    reads = release_rules(installed_vllm_version())["mask_token"]["reads"]
    for key in reads:
        head, _, tail = key.partition(".")
        cfg = {head: {tail: 7}} if tail else {key: 7}
        fake = SimpleNamespace(draft_model_config=SimpleNamespace(hf_config=_hf(cfg)), pass_hidden_states_to_model=False)
        SpecDecodeBaseProposer._init_parallel_drafting_params(fake)
        assert fake.parallel_drafting_token_id == 7, key
    with pytest.raises(ValueError):
        SpecDecodeBaseProposer._init_parallel_drafting_params(
            SimpleNamespace(draft_model_config=SimpleNamespace(hf_config=_hf({"other": 1})),
                            pass_hidden_states_to_model=False))


@pytest.mark.parametrize("cfg", [DSPARK, DFLASH, {**DSPARK, "target_layer_ids": [1, 2, 3, 4]},
                                 {k: v for k, v in DSPARK.items() if k != "target_layer_ids"}])
def test_installed_fc_width_matches_the_rule(cfg):
    from vllm.model_executor.models.qwen3_dflash import _get_dflash_fc_input_size

    spec = SimpleNamespace(draft_model_config=SimpleNamespace(hf_config=_hf(cfg)))
    width = _get_dflash_fc_input_size(SimpleNamespace(speculative_config=spec))
    count, _ = fc_layer_count(release_rules(installed_vllm_version())["fc_width"], cfg)
    assert width == cfg["hidden_size"] * count


def test_installed_version_equals_importlib_metadata():
    """The dist-info scan (no importlib.metadata import at start-up) answers what importlib.metadata does."""
    import importlib.metadata as metadata

    from surgery.checks.config_spelling import spelling_rules

    expected = None
    for name in spelling_rules()["distributions"]:
        try:
            expected = metadata.version(name)
            break
        except metadata.PackageNotFoundError:
            continue
    assert installed_vllm_version() == expected
