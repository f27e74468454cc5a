"""`surgery apply RECIPE --engine sglang` where SGLang cannot run speculative decoding (this CPU):
SRG360 naming the blocker and pointing at docs/sglang.md, never a traceback; and the plan-level
ablation row where SGLang's wiring and vLLM's differ (surgery/sglang/compare.py)."""
from __future__ import annotations

import json

import pytest

from surgery.engine.cards import ENGINES, card
from surgery.pairs import builtin_pair


def test_sglang_is_an_engine_from_its_card(run_cli):
    """The card makes the engine: listed in ENGINES, accepted by --engine, planned with its refusals."""
    assert "sglang" in ENGINES and card("sglang").release == "0.5.21"
    pair = builtin_pair("eagle")
    code, out, err = run_cli("plan", "eagle", "--engine", "sglang", "--target", pair.target, "--draft", pair.draft)
    assert "engine=sglang" in out
    # the built-in EAGLE-1 head is written as LlamaForCausalLM: stock SGLang builds it as a plain Llama (SRG778,
    # a named silent failure; `surgery apply --engine sglang` serves a copy with SGLang's EAGLE class)
    assert code == 1 and "SRG778" in err


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
    from surgery.commands.sglang_apply import blocker

    assert "sgl-kernel's CPU build" in blocker("cpu")
    assert "sgl-kernel" not in blocker("cuda")


def test_the_device_decides_whether_the_engine_runs():
    """CPU (measured failing in the card): SRG360's blocker whatever is installed; CUDA: the engine
    runs when SGLang is installed, else the reason names the card's CUDA releases."""
    from surgery.commands.sglang_apply import device_blocker

    assert "sgl-kernel's CPU build" in device_blocker("cpu", True)
    assert device_blocker("cuda", True) is None
    assert "not installed" in device_blocker("cuda", False) and "0.5.17" in device_blocker("cuda", False)
    releases = card("sglang").releases
    assert releases[card("sglang").release].device == "cpu"
    assert {r for r, v in releases.items() if v.device == "cuda"} == {"0.5.16", "0.5.17"}


def test_an_eagle1_head_sglang_would_load_as_a_plain_llama_is_served_with_its_eagle_class(tmp_path):
    """SGLang does not rename a LlamaForCausalLM EAGLE-1 head (it would drop its fc): a copy with
    SGLang's class is served, the change said; EAGLE-3 and MTP drafts are served as they are."""
    from surgery.sglang.engine import served_draft

    pair = builtin_pair("eagle")
    served, note = served_draft(pair.draft, "EAGLE", tmp_path / "d")
    assert json.loads((served / "config.json").read_text())["architectures"] == ["LlamaForCausalLMEagle"]
    assert note["architectures"] == ["LlamaForCausalLM", "LlamaForCausalLMEagle"]
    assert (served / "model.safetensors").resolve() == (pair.draft / "model.safetensors").resolve()
    for recipe, algorithm in (("eagle3", "EAGLE3"), ("mtp", "NEXTN")):
        p = builtin_pair(recipe)
        assert served_draft(p.draft, algorithm, tmp_path / recipe) == (p.draft, None)
    # the recipe resolves on the served copy for SGLang (SGLang's class read as the head vLLM serves)
    from surgery import Runtime, load_recipe, read_facts, resolve

    plan = resolve(load_recipe("eagle"), read_facts(served), read_facts(pair.target), Runtime(engine="sglang"))
    assert plan.ok and "SRG206" in [d.code for d in plan.diagnostics]
    assert not resolve(load_recipe("eagle"), read_facts(served), read_facts(pair.target), Runtime(engine="vllm")).ok


def test_the_entry_point_folder_registers_the_plugin(tmp_path):
    """A checkout has no installed distribution: the folder engine.py puts on the child's PYTHONPATH
    is one importlib.metadata finds, in SGLang's plugin group."""
    from importlib.metadata import distributions

    from surgery.sglang.engine import PLUGIN_GROUP, PLUGIN_VALUE, entry_point_dir

    folder = entry_point_dir(tmp_path)
    eps = [ep for d in distributions(path=[str(folder)]) for ep in d.entry_points if ep.group == PLUGIN_GROUP]
    assert [ep.value for ep in eps] == [PLUGIN_VALUE]


def test_acceptance_is_summed_from_sglangs_meta_info_counters():
    from surgery.sglang.engine import decode_summary

    metas = [{"spec_verify_ct": 10, "spec_num_correct_drafts": 12, "spec_num_proposed_drafts": 30, "completion_tokens": 22},
             {"completion_tokens": 5}]  # no verify ran for this one: SGLang leaves the spec keys out
    d = decode_summary([[1, 2], [3]], [[1, 2], [4]], metas, 4)
    assert (d["identical"], d["mismatched_prompts"], d["drafted"], d["accepted"]) == (False, [1], 30, 12)
    assert d["acceptance_rate"] == 0.4 and d["accept_length"] == 2.7 and d["counters_present"]


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


@pytest.mark.parametrize("release, capturable", [("0.5.21", [7]), ("0.5.23", [0, 7])])
def test_eagle3_builtin_pair_on_sglang_reads_other_aux_layers(release, capturable):
    """The built-in EAGLE-3 head writes its ids at the top level ([0, 7, 8]): SGLang reads only the
    nested eagle_config, so it captures its default [2, 4, 5]; of the planned ids 0.5.21 can capture 7,
    0.5.23 0 and 7."""
    from surgery.sglang.compare import wiring_rows

    pair = builtin_pair("eagle3")
    capture = wiring_rows("eagle3", pair.draft, pair.target, engine_version=release)["capture"]
    assert capture == {"recipe": [0, 7, 8], "sglang_stock": [2, 4, 5], "sglang_reads": None,
                       "capturable_by_sglang": capturable}


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


@pytest.mark.parametrize("release, refused", [("0.5.16", "[0, 8]"), ("0.5.17", "[0, 8]"), ("0.5.21", "[0, 8]"),
                                              ("0.5.22", "[8]"), ("0.5.23", "[8]")])
def test_validate_says_before_any_load_which_aux_ids_sglang_cannot_capture(run_cli, release, refused):
    """The built-in EAGLE-3 head's ids [0, 7, 8] on an 8-layer target: fine for vLLM, SRG362 for
    SGLang at plan time, at the recipe's `layers:` (file:line:col), for the ids the release cannot
    capture: up to 0.5.21 id 0 too (issue 58: 0.5.23 captures the embedding output), id L in all."""
    pair = builtin_pair("eagle3")
    code, out, err = run_cli("validate", "eagle3", "--engine", "sglang", "--engine-version", release,
                             "--target", pair.target, "--draft", pair.draft)
    # the shipped recipe by name and line (issue 42: no install path)
    assert code == 1 and "SRG362" in err and f"ids {refused} " in err and "recipe eagle3:" in err
    assert f"sglang {release} cannot" in err and "SRG370" not in err
    code, _, _ = run_cli("validate", "eagle3", "--engine", "vllm", "--target", pair.target, "--draft", pair.draft)
    assert code == 0


def test_id_0_alone_is_valid_on_0523_and_srg362_on_0521(run_cli, tmp_path):
    """A head on ids [0, 4, 7]: nothing past the last layer, so 0.5.23 captures every id; 0.5.21 refuses 0."""
    import json
    import shutil

    pair = builtin_pair("eagle3")
    draft = tmp_path / "draft"
    shutil.copytree(pair.draft, draft)
    cfg = json.loads((draft / "config.json").read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = [0, 4, 7]
    (draft / "config.json").write_text(json.dumps(cfg))
    args = ("validate", "eagle3", "--engine", "sglang", "--target", pair.target, "--draft", draft)
    code, out, err = run_cli(*args, "--engine-version", "0.5.23")
    assert code == 0 and "SRG362" not in err, out + err
    code, out, err = run_cli(*args, "--engine-version", "0.5.21")
    assert code == 1 and "SRG362" in err and "ids [0] " in err


@pytest.mark.parametrize("release, said, refused", [
    ("0.5.24", "judged with 0.5.23's (0..L-1)", "[8]"),  # newer than the card: nearest older, said
    ("0.5.10", "not checked", None),  # older than every release read: not checked, said
])
def test_a_release_without_capture_data_is_a_coded_line(run_cli, release, said, refused):
    pair = builtin_pair("eagle3")
    code, out, err = run_cli("validate", "eagle3", "--engine", "sglang", "--engine-version", release,
                             "--target", pair.target, "--draft", pair.draft)
    assert "warning SRG370" in err and said in err, err
    assert (f"ids {refused} " in err and code == 1) if refused else ("SRG362" not in err and code == 0)


def test_no_release_given_is_judged_for_the_newest_and_said(run_cli, monkeypatch):
    from surgery.engine import capture

    monkeypatch.setattr(capture, "installed_version", lambda engine: None)
    pair = builtin_pair("eagle3")
    code, out, err = run_cli("validate", "eagle3", "--engine", "sglang", "--target", pair.target, "--draft",
                             pair.draft, "--verbose")
    newest = max(capture.spans("sglang"), key=lambda v: tuple(map(int, v.split("."))))
    assert "SRG371" in err and f"judged for {newest}" in err and "0.5.21: 1..L-1" in err
    assert code == 1 and f"sglang {newest} (no release given) cannot capture" in err


def test_sglangs_builtin_eagle3_pair_is_a_head_on_ids_sglang_captures(run_cli):
    """`surgery apply eagle3 --engine sglang` without folders runs the index's SGLang variant: a head
    of the same recipe trained on ids [1, 4, 7], all capturable there, none SGLang's own default
    [2, 4, 5] (so the recipe's capture list is what serves it); the vLLM pair keeps [0, 7, 8]."""
    import json

    from surgery.commands.sglang_apply import pair_for
    from surgery.sglang.compare import wiring_rows

    target, draft, texts, variant = pair_for("eagle3")
    default = builtin_pair("eagle3")
    assert target == default.target and draft != default.draft and texts == default.prompts
    assert variant["engine"] == "sglang" and "SRG362" in variant["because"]
    ids = json.loads((draft / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"]
    capture = wiring_rows("eagle3", draft, target)["capture"]
    assert capture["recipe"] == ids == capture["capturable_by_sglang"] == [1, 4, 7]
    assert capture["sglang_stock"] == [2, 4, 5]
    code, out, err = run_cli("validate", "eagle3", "--engine", "sglang", "--target", target, "--draft", draft)
    assert code == 0, out + err
    # a recipe without an SGLang variant gets its one pair; folders given are used as they are
    mtp = builtin_pair("mtp")
    assert pair_for("mtp")[:2] == (mtp.target, mtp.draft) and pair_for("mtp")[3] is None
    assert pair_for("eagle3", default.target, default.draft)[1] == default.draft


def test_a_divergence_counts_as_a_tie_only_where_the_targets_two_best_are_bit_equal():
    """Where the speculative output leaves greedy, the greedy reference's top two decide: bit-equal
    logprobs that are exactly the two tokens seen -> exact tie (SRG365, identical up to ties);
    anything else -> not a tie (SRG366): a close call, a third token, no logprobs, a missing output."""
    from surgery.sglang.engine import decode_summary

    ref, top = [[5, 6, 7], [5, 6, 7]], [[[[5, -0.1], [9, -2.0]], [[6, -0.7], [8, -0.7]], [[7, -0.2], [1, -3.0]]]] * 2
    tie = decode_summary(ref, [[5, 8, 1], [5, 6, 7]], [{}, {}], 4, reference_top=top)
    assert not tie["identical"] and tie["identical_up_to_ties"]
    assert [(v["prompt"], v["position"], v["exact_tie"], v["margin"]) for v in tie["divergences"]] == [(0, 1, True, 0.0)]
    close = [[[[5, -0.1], [9, -2.0]], [[6, -0.7], [8, -0.7000001]], [[7, -0.2], [1, -3.0]]]] * 2
    assert not decode_summary(ref, [[5, 8, 1], ref[1]], [{}, {}], 4, reference_top=close)["identical_up_to_ties"]
    third = decode_summary(ref, [[5, 3, 1], ref[1]], [{}, {}], 4, reference_top=top)  # 3 is not one of the tied two
    assert not third["identical_up_to_ties"] and third["divergences"][0]["exact_tie"] is False
    assert not decode_summary(ref, [[5, 8, 1], ref[1]], [{}, {}], 4)["identical_up_to_ties"]  # no logprobs
    assert not decode_summary(ref, [[5, 6, 7]], [{}], 4, reference_top=top)["identical_up_to_ties"]  # one missing
    assert decode_summary(ref, ref, [{}, {}], 4)["identical_up_to_ties"]


def test_the_h200_rows_left_greedy_only_at_exact_ties():
    """The recorded H200 run (bench/results/gpu_sglang_2026-12-04d_rows.json: SGLang 0.5.17, bf16):
    recomputed from the engines' own outputs and the greedy engine's top-2 logprobs, every row differs
    from greedy only where the target's two best tokens score the same; the wiring changed acceptance,
    never a token the target would not have chosen."""
    from pathlib import Path

    from surgery.sglang.engine import NUM_DRAFT_TOKENS, decode_summary, exact_tie

    data = json.loads((Path(__file__).resolve().parents[2] / "bench/results/gpu_sglang_2026-12-04d_rows.json").read_text())
    seen = 0
    for fam in ("eagle3", "eagle"):
        greedy = data[fam]["greedy"]
        for label, row in data[fam]["rows"].items():
            if "outputs" not in row:
                continue
            d = decode_summary(greedy["outputs"], row["outputs"], row["meta"], NUM_DRAFT_TOKENS, reference_top=greedy["top"])
            assert d["identical_up_to_ties"] and d["divergences"], label
            assert d["accepted"] == row["decode"]["accepted"], label
            seen += 1
    assert seen == 5
    # `surgery apply mtp --engine sglang --json` of that run (written before ties were told apart: its
    # divergences carry the greedy engine's top two, the rule is applied to them here)
    mtp = data["apply-mtp"]["json"]
    assert mtp["verified"] and mtp["decode"]["divergences"]
    assert all(exact_tie(v["greedy_token"], v["speculative_token"], v["greedy_top2"]) for v in mtp["decode"]["divergences"])


def test_sglang_runs_the_cards_first_cuda_dtype_and_refuses_float32_before_any_engine():
    from surgery.text.diagnostics import SurgeryError
    from surgery.commands.sglang_apply import dtype_for

    dtypes = card("sglang").limits.cuda_dtypes
    assert dtype_for(None) == dtypes[0] == "bfloat16" and dtype_for("fp16") == "float16"
    with pytest.raises(SurgeryError) as exc:
        dtype_for("float32")
    assert exc.value.diagnostics[0].code == "SRG367"


def test_engine_vllm_says_it_runs_float32_instead_of_ignoring_dtype(run_cli):
    code, out, err = run_cli("apply", "eagle3", "--engine", "vllm", "--dtype", "bfloat16", "--json")
    assert code == 2 and "Traceback" not in out + err  # a usage error, before any engine
    assert [d["code"] for d in json.loads(out)["diagnostics"]] == ["SRG011"] and "float32" in out


def test_the_h200_apply_report_renders_as_the_user_reads_it():
    """`surgery apply eagle3 --engine sglang` without --json, on the recorded H200 result (the JSON the
    command wrote there): OK, the pair variant and why, the hook's lines, each tie as an SRG365 line."""
    from pathlib import Path

    from surgery.commands.sglang_apply import render

    result = json.loads((Path(__file__).resolve().parents[2]
                         / "bench/results/gpu_sglang_2026-12-04e_apply_eagle3.json").read_text())
    text = render(result)
    assert text.startswith("recipe eagle3 in SGLang 0.5.17 (EAGLE3): OK")
    assert "built-in pair for SGLang" in text and "the planned [1, 4, 7] put back" in text
    assert "identical to target-only greedy (bfloat16): up to ties within the measured noise (prompts [5])" in text
    assert "SRG365 prompt 5 leaves greedy at token 10" in text and "accept length 3.28" in text


def test_the_plan_says_where_sglang_would_replace_what_the_recipe_keeps():
    """SRG368 (info), at the step's `if_draft_has_own`: for EAGLE / NEXTN SGLang's draft worker points
    the draft's embedding and head at the target's whatever it brought (the card's oracle-tested
    `head_always_replaced_for`), and the eagle recipe keeps a draft's own, different one (vLLM's
    wiring). Not for vLLM, not for a recipe that always shares (mtp), not for EAGLE-3 (SGLang decides
    its head from the config there)."""
    from surgery import Runtime, load_recipe, read_facts, resolve
    from surgery.engine.cards import card

    assert {"EAGLE", "NEXTN"} <= set(card("sglang").wiring.head_always_replaced_for)
    pair = builtin_pair("eagle")

    def notes(recipe, p, engine):
        plan = resolve(load_recipe(recipe), read_facts(p.draft), read_facts(p.target), Runtime(engine=engine))
        assert plan.ok
        return [d for d in plan.diagnostics if d.code == "SRG368"]

    found = notes("eagle", pair, "sglang")
    assert sorted(d.message.split("draft's ")[1].split(" ")[0] for d in found) == ["input_embeddings", "lm_head"]
    assert all(d.severity == "info" and "eagle.yaml" in str(d.location.file) and d.location.line for d in found)
    assert not notes("eagle", pair, "vllm")
    assert not notes("mtp", builtin_pair("mtp"), "sglang")
    assert not notes("eagle3", builtin_pair("eagle3", engine="sglang"), "sglang")


def test_a_run_is_verified_only_with_an_applied_verified_draft_and_no_problem_event():
    from surgery.sglang.report import verified

    ok = {"event": "applied", "verified": True}
    assert verified([{"event": "installed"}, ok]) == (True, [])
    assert verified([{"event": "installed"}])[0] is False  # nothing applied: the hook never ran
    assert verified([ok, {"event": "applied", "verified": False}])[0] is False
    for bad in ({"event": "gap"}, {"event": "failed"}, {"event": "capture", "held": False}):
        assert verified([ok, bad]) == (False, [bad])
    assert verified([ok, {"event": "capture", "held": True}]) == (True, [])


def test_sglang_scored_prefill_positions_give_the_tie_tolerance():
    """The greedy child scores prompt + output again in one prefill forward: meta_info input_top_logprobs
    (entry 0 None, entry k ranking input token k) from len(prompt) on lines up with the output positions,
    and the margin change between the two shapes is the tolerance SRG365 / SRG366 are judged by."""
    from surgery.greedyties import margin_noise
    from surgery.sglang.engine import decode_summary, scored_positions

    prompt, ref = [1, 2], [[5, 6]]
    input_top = [None, [(-0.1, 2, None)], [(-0.5, 5, None), (-2.0, 9, None)], [(-0.7, 6, None), (-0.703, 8, None)]]
    scored = [scored_positions(input_top, len(prompt))]
    assert scored == [[[[5, -0.5], [9, -2.0]], [[6, -0.7], [8, -0.703]]]]
    decode_top = [[[[5, -0.5], [9, -2.0]], [[6, -0.7], [8, -0.701]]]]  # one-token decoding: margin 0.001
    noise = margin_noise(decode_top, scored, shape="prefill", dtype="bfloat16")
    assert abs(noise["noise"] - 0.002) < 1e-9 and noise["at"] == [0, 1]
    d = decode_summary(ref, [[5, 8]], [{}], 4, reference_top=decode_top, noise=noise)
    assert d["identical_up_to_ties"] and d["divergences"][0]["tie"] and not d["divergences"][0]["exact_tie"]
    assert not decode_summary(ref, [[5, 8]], [{}], 4, reference_top=decode_top)["identical_up_to_ties"]
