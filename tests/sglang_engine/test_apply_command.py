"""`surgery apply RECIPE --engine sglang` where SGLang cannot run speculative decoding (this CPU):
SRG360 naming the blocker and pointing at docs/sglang.md, never a traceback; and the plan-level
ablation row where SGLang's wiring and vLLM's differ (surgery/sglang/compare.py)."""
from __future__ import annotations

import json

import pytest

from surgery.engines import ENGINES, card
from surgery.pairs import builtin_pair


def test_sglang_is_an_engine_from_its_card(run_cli):
    """The card makes the engine: listed in ENGINES, accepted by --engine, planned with its refusals."""
    assert "sglang" in ENGINES and card("sglang")["release"] == "0.5.21"
    pair = builtin_pair("eagle")
    code, out, _ = run_cli("plan", "eagle", "--engine", "sglang", "--target", pair.target, "--draft", pair.draft)
    assert code == 0 and "engine=sglang" in out


@pytest.mark.parametrize("recipe", ["eagle3", "mtp"])
def test_apply_engine_sglang_is_a_coded_error_naming_the_blocker(run_cli, recipe):
    code, out, err = run_cli("apply", recipe, "--engine", "sglang", "--json")
    assert code == 1 and "Traceback" not in out + err
    diags = json.loads(out)["diagnostics"]
    assert [d["code"] for d in diags] == ["SRG360"]
    message = diags[0]["message"]
    assert "copy_all_layer_kv_cache_cpu" in message and "verify_tree_greedy_cpu" in message
    assert "docs/sglang.md" in diags[0]["hint"]


def test_the_blocker_follows_the_cards_measured_devices():
    from surgery.sglang.apply_command import blocker

    assert "sgl-kernel's CPU build" in blocker("cpu")
    assert "has not been run" in blocker("cuda") and "sgl-kernel" not in blocker("cuda")


def test_ablation_row_sglang_replaces_the_head_vllm_keeps():
    """EAGLE family, a draft that brings its own, different embedding and head (plan level: no
    engine ran): SGLang's init_lm_head replaces both, vLLM keeps both, the recipe keeps both."""
    from surgery.sglang.compare import wiring_rows

    pair = builtin_pair("eagle")
    result = wiring_rows("eagle", pair.draft, pair.target, variant="own_different")
    assert result["level"].startswith("plan") and result["sglang_call"] == "set_embed_and_head"
    rows = {r["role"]: r for r in result["roles"]}
    for role in ("input_embeddings", "lm_head"):
        assert (rows[role]["sglang_stock"], rows[role]["vllm_stock"], rows[role]["recipe"]) == ("target", "own", "own")
        assert rows[role]["sglang_differs_from_vllm"]
    as_is = {r["role"]: r for r in wiring_rows("eagle", pair.draft, pair.target)["roles"]}
    assert not any(r["sglang_differs_from_vllm"] for r in as_is.values())  # the built-in head brings neither


def test_eagle3_builtin_pair_on_sglang_reads_other_aux_layers():
    """The built-in EAGLE-3 head writes its ids at the top level ([0, 7, 8]): SGLang reads only the
    nested eagle_config, so it captures its default [2, 4, 5]; of the planned ids it can capture 7."""
    from surgery.sglang.compare import wiring_rows

    pair = builtin_pair("eagle3")
    capture = wiring_rows("eagle3", pair.draft, pair.target)["capture"]
    assert capture == {"recipe": [0, 7, 8], "sglang_stock": [2, 4, 5], "sglang_reads": None,
                       "capturable_by_sglang": [7]}


@pytest.mark.parametrize("recipe", ["eagle", "eagle3", "mtp", "deepseek-mtp", "draft-model"])
@pytest.mark.parametrize("variant", ["as_is", "own_different"])
def test_the_recipes_decision_is_vllms_own_and_sglang_differs_only_where_said(recipe, variant):
    """The shipped recipes reproduce vLLM's wiring (their oracle tests): so per role the recipe's
    decision equals the comparison's vLLM column, and SGLang's column differs exactly for an EAGLE
    head or an EAGLE-3 embedding that the draft brings, different from the target's."""
    from surgery.sglang.compare import wiring_rows

    pair = builtin_pair(recipe)
    result = wiring_rows(recipe, pair.draft, pair.target, variant=variant)
    for row in result["roles"]:
        assert row["recipe"] == row["vllm_stock"], row
        brings_different = row["draft_brings_own"] and not row["identical_to_target"]
        expected = brings_different and (result["algorithm"] == "EAGLE"
                                         or (result["algorithm"] == "EAGLE3" and row["role"] == "input_embeddings"))
        assert row["sglang_differs_from_vllm"] is expected, (result["algorithm"], row)


def test_validate_says_before_any_load_which_aux_ids_sglang_cannot_capture(run_cli):
    """The built-in EAGLE-3 head's ids [0, 7, 8] on an 8-layer target: fine for vLLM, SRG362 for
    SGLang at plan time, at the recipe's `layers:` (file:line:col)."""
    pair = builtin_pair("eagle3")
    code, out, err = run_cli("validate", "eagle3", "--engine", "sglang", "--target", pair.target, "--draft", pair.draft)
    assert code == 1 and "SRG362" in out + err and "[0, 8]" in out + err and "eagle3.yaml:" in out + err
    code, _, _ = run_cli("validate", "eagle3", "--engine", "vllm", "--target", pair.target, "--draft", pair.draft)
    assert code == 0
