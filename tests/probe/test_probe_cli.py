"""`surgery probe` input errors: coded, before any model is loaded."""
from __future__ import annotations

from pathlib import Path

from .heads import LLAMA, PAIRS, TINY


def test_hf_engine_refuses_a_non_gemma_draft(run_cli):
    code, out, err = run_cli("probe", "eagle3", "--engine", "hf", "--target", LLAMA, "--draft", PAIRS / "eagle3/draft",
                             "--json")
    assert code == 2 and "SRG494" in out


def test_hf_engine_has_no_builtin_eagle3_pair(run_cli):
    code, out, _ = run_cli("probe", "eagle3", "--engine", "hf", "--json")
    assert code == 2 and "SRG494" in out


def test_one_prompt_is_not_enough(run_cli, tmp_path):
    f = tmp_path / "p.txt"
    f.write_text("only one prompt\n\n")
    code, out, _ = run_cli("probe", "gemma4-mtp", "--target", TINY / "target", "--draft", TINY / "draft",
                           "--prompts", f, "--json")
    assert code == 2 and "SRG490" in out


def test_unreadable_prompts_file(run_cli, tmp_path):
    f = tmp_path / "p.bin"
    f.write_bytes(b"\xff\xfe\x00bad")
    code, out, _ = run_cli("probe", "gemma4-mtp", "--target", TINY / "target", "--draft", TINY / "draft",
                           "--prompts", f, "--json")
    assert code == 2 and "SRG490" in out


def test_target_without_draft_is_a_usage_error(run_cli):
    code, out, _ = run_cli("probe", "gemma4-mtp", "--target", Path(TINY / "target"), "--json")
    assert code == 2 and "SRG011" in out


def test_the_engine_defaults_from_the_recipe():
    """issue 66: `--engine` defaulted to hf for recipes only vLLM serves (dflash, dspark, peagle) and for every
    non-Gemma pair; the HF loader builds Gemma 4 assistant pairs only."""
    from surgery.commands.probe import default_engine
    from surgery.recipe import load_recipe

    for name in ("dflash", "dspark", "peagle", "eagle3", "eagle", "mtp"):
        assert default_engine(load_recipe(name), None) == "vllm", name
    assert default_engine(load_recipe("gemma4-mtp"), None) == "hf"
    assert default_engine(load_recipe("gemma4-mtp"), TINY / "draft") == "hf"
    assert default_engine(load_recipe("eagle3"), PAIRS / "eagle3/draft") == "vllm"
