"""The shipped recipe library (issue 5): every recipe against its real configs (expected plan), against a
mismatched pair (expected codes), and oracles against vLLM's own loading code for EAGLE-3 auxiliary
layers, EAGLE embedding / lm_head sharing and DeepSeek MTP layer indexing."""
from __future__ import annotations

import copy
import json
import types
from pathlib import Path

import pytest

from surgery import Runtime, SurgeryError, facts_from_config, load_recipe, resolve
from surgery.facts import read_config
from surgery.plan import render_table
from surgery.resources import load_schema, shipped_recipes

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "tests" / "data" / "configs"
LLAMA8B, LLAMA1B = "Llama-3.1-8B-Instruct.json", "Llama-3.2-1B-Instruct.json"
EAGLE3, EAGLE1 = "EAGLE3-LLaMA3.1-Instruct-8B.json", "EAGLE-LLaMA3.1-Instruct-8B.json"
DSV3, DSV32 = "DeepSeek-V3.json", "DeepSeek-V3.2-Exp.json"
QWEN3_NEXT, MIMO, GLM = "Qwen3-Next-80B-A3B-Instruct.json", "MiMo-7B-RL.json", "GLM-4.5-Air.json"
E2B, E2B_ASSISTANT = "gemma-4-E2B-it.json", "gemma-4-E2B-it-assistant.json"

LIBRARY = {"gemma4-mtp", "eagle3", "eagle", "deepseek-mtp", "mtp", "draft-model"}


def cfg(name: str) -> dict:
    return read_config(CONFIGS / name)[0]


def plan_for(recipe: str, target, draft, **runtime):
    t = cfg(target) if isinstance(target, str) else target
    d = cfg(draft) if isinstance(draft, str) else draft
    return resolve(load_recipe(recipe), facts_from_config(d, "draft.json"), facts_from_config(t, "target.json"),
                   Runtime(**runtime))


def errors(plan) -> set[str]:
    return {d.code for d in plan.errors}


def warnings(plan) -> set[str]:
    return {d.code for d in plan.diagnostics if d.severity == "warning"}


def op_ids(plan) -> list[str]:
    return [o.id for o in plan.operations]


# ------------------------------------------------------------------------------ the library
def test_surgery_recipes_lists_the_library(run_cli):
    code, out, _ = run_cli("recipes", "--json")
    assert code == 0
    assert {r["name"] for r in json.loads(out)["recipes"]} >= LIBRARY
    assert {p.stem for p in shipped_recipes()} >= LIBRARY


@pytest.mark.parametrize("path", shipped_recipes(), ids=lambda p: p.name)
def test_every_recipe_has_a_header_citing_vllm(path):
    head = path.read_text(encoding="utf-8").split("\nrecipe:")[0]
    assert "vllm/" in head, path
    assert "Pitfalls guarded against" in head or "Pitfalls it guards against" in head, path


def _walk_properties(node, path=""):
    if isinstance(node, dict):
        for key, sub in node.get("properties", {}).items():
            yield f"{path}.{key}", sub
        for key, sub in node.items():
            if isinstance(sub, dict):
                yield from _walk_properties(sub, f"{path}/{key}")


def test_every_schema_property_has_description_and_examples():
    schema = load_schema("recipe.schema.json")

    def documented(sub):
        if "$ref" in sub and ("description" not in sub or "examples" not in sub):
            sub = {**schema["$defs"][sub["$ref"].rsplit("/", 1)[1]], **sub}
        return "description" in sub and "examples" in sub

    missing = [p for p, sub in _walk_properties(schema) if not documented(sub)]
    assert missing == []


def test_plan_schema_knows_every_op_kind():
    kinds = set(load_schema("plan.schema.json")["properties"]["operations"]["items"]["properties"]["op"]["enum"])
    assert {"capture_hidden_states", "share_buffer", "share_module", "keep", "share_kv", "copy_attrs"} <= kinds


# ------------------------------------------------------------------------------ eagle3
def test_eagle3_llama31_real_pair():
    plan = plan_for("eagle3", LLAMA8B, EAGLE3)
    assert plan.ok, [d.render() for d in plan.errors]
    assert plan.layer_set("aux_layers") == [2, 16, 29]  # (2, 32 // 2, 32 - 3)
    (cap,) = plan.ops("capture_hidden_states")
    assert cap.layers == (2, 16, 29)
    # embedding shared (decided at load: unless the head brings distinct weights); reduced head kept
    assert op_ids(plan) == ["capture_hidden_states:aux_layers", "share_module:input_embeddings", "keep:lm_head"]
    (emb,) = plan.ops("share_module")
    assert emb.if_draft_has_own == "share_if_identical"
    (keep,) = plan.ops("keep")
    assert keep.must_exist is True
    # every sharing decision is in the plan: the lm_head share not taken, with the numbers
    lm = [s for s in plan.skipped if s.role == "lm_head"]
    assert len(lm) == 1 and "32000" in lm[0].reason and "128256" in lm[0].reason
    assert "SRG330" in warnings(plan)  # max_position_embeddings 2048 vs 131072
    assert "capture_hidden_states (aux_layers): target layers 2, 16, 29" in render_table(plan)


def test_eagle3_aux_layers_from_draft_config_and_checks():
    d = cfg(EAGLE3)
    d["eagle_aux_hidden_state_layer_ids"] = [1, 23, 44]
    plan = plan_for("eagle3", LLAMA8B, d)
    assert plan.layer_set("aux_layers") == [1, 23, 44]
    assert "SRG317" in errors(plan)  # 44 > 32 layers
    d["eagle_aux_hidden_state_layer_ids"] = [4, 4, 20]
    plan = plan_for("eagle3", LLAMA8B, d)
    assert "SRG318" in warnings(plan) and "SRG335" in errors(plan)  # 2 states reach an fc built for 3
    d.pop("eagle_aux_hidden_state_layer_ids")
    d["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [3, 10, 30]}
    assert plan_for("eagle3", LLAMA8B, d).layer_set("aux_layers") == [3, 10, 30]


def test_eagle3_full_vocab_head_shares_lm_head_and_pp2_keeps_own_embedding():
    d = cfg(EAGLE3)
    d.pop("draft_vocab_size")
    plan = plan_for("eagle3", LLAMA8B, d)
    assert plan.ok and [o.role for o in plan.ops("share_module")] == ["input_embeddings", "lm_head"]
    assert not plan.ops("keep")
    plan = plan_for("eagle3", LLAMA8B, d, pp_size=2)
    assert plan.ok  # the head must bring its own embedding: a load-time check, a warning here
    assert [(o.role, o.must_exist) for o in plan.ops("keep")] == [("input_embeddings", True)]
    assert "SRG312" in warnings(plan)


def test_eagle3_mismatched_pair():
    # an EAGLE-3 head for another target: hidden 2048 (Llama 3.2 1B), different vocabulary
    plan = plan_for("eagle3", LLAMA1B, EAGLE3)
    assert "SRG314" in errors(plan)
    d = cfg(EAGLE3)
    d["vocab_size"] = 151936
    d["draft_vocab_size"] = 200000
    assert "SRG313" in errors(plan_for("eagle3", LLAMA8B, d))
    plan = plan_for("eagle3", LLAMA8B, EAGLE3, attention_backend="HPC_ATTN", tp_size=4, draft_tp_size=2)
    assert {"SRG319"} <= errors(plan)
    d = cfg(EAGLE3)
    d["head_dim"] = 100
    assert "SRG332" in errors(plan_for("eagle3", LLAMA8B, d, attention_backend="FLASHINFER"))
    assert "SRG332" not in errors(plan_for("eagle3", LLAMA8B, EAGLE3, attention_backend="FLASHINFER"))


# ------------------------------------------------------------------------------ eagle (EAGLE-1)
def test_eagle1_real_pair():
    plan = plan_for("eagle", LLAMA8B, EAGLE1)
    assert plan.ok, [d.render() for d in plan.errors]
    assert [(o.role, o.if_draft_has_own) for o in plan.ops("share_module")] == [
        ("input_embeddings", "share_if_identical"), ("lm_head", "share_if_identical")]
    assert not warnings(plan)


def test_eagle1_mismatched_pair():
    # an EAGLE-3 reduced-vocabulary head cannot be served as EAGLE-1
    assert "SRG313" in errors(plan_for("eagle", LLAMA8B, EAGLE3))
    assert {"SRG314"} <= errors(plan_for("eagle", LLAMA1B, EAGLE1))


# ------------------------------------------------------------------------------ deepseek-mtp
def test_deepseek_v3_mtp_real_config():
    plan = plan_for("deepseek-mtp", DSV3, DSV3)
    assert plan.ok, [d.render() for d in plan.errors]
    assert plan.layer_set("mtp_layers") == [61]
    assert op_ids(plan) == ["share_module:input_embeddings", "share_module:lm_head", "share_module:mtp_shared_head:61"]
    (skip,) = plan.skipped
    assert skip.op == "share_buffer" and skip.attr == "topk_indices_buffer" and skip.severity == "info"


def test_deepseek_v32_aliases_topk_buffer_and_pp_condition():
    plan = plan_for("deepseek-mtp", DSV32, DSV32)
    assert plan.ok and [(o.attr, o.scope) for o in plan.ops("share_buffer")] == [("topk_indices_buffer", "all_modules")]
    d = cfg(DSV3)
    d["num_nextn_predict_layers"] = 3
    assert plan_for("deepseek-mtp", d, d).layer_set("mtp_layers") == [61, 62, 63]
    # pp 2: vLLM loads the MTP layer's embedding separately from the checkpoint (model.layers.61.embed_tokens /
    # model.embed_tokens, deepseek_mtp.py load_weights): no share, no error (issue 42, class 9)
    plan = plan_for("deepseek-mtp", DSV3, DSV3, pp_size=2)
    assert plan.ok and "SRG311" not in errors(plan)
    assert [(s.role, s.code, s.severity) for s in plan.skipped if s.role == "input_embeddings"] == \
        [("input_embeddings", "SRG320", "info")]


def test_deepseek_mtp_mismatched_pair():
    d = cfg(DSV3)
    d["num_nextn_predict_layers"] = 0
    assert "SRG336" in errors(plan_for("deepseek-mtp", d, d))
    d = cfg(DSV3)
    d["vocab_size"], d["hidden_size"] = 102400, 5120
    assert {"SRG313", "SRG314"} <= errors(plan_for("deepseek-mtp", DSV3, d))
    assert "SRG204" in errors(plan_for("deepseek-mtp", LLAMA8B, LLAMA8B))


# ------------------------------------------------------------------------------ mtp (Qwen3-Next, MiMo, GLM)
@pytest.mark.parametrize("config, layers, shared_head", [
    (QWEN3_NEXT, [0], False), (MIMO, [0], False), (GLM, [46], True)])
def test_mtp_families_real_configs(config, layers, shared_head):
    plan = plan_for("mtp", config, config)
    assert plan.ok, [d.render() for d in plan.errors]
    assert plan.layer_set("mtp_layers") + plan.layer_set("mtp_layers_from_zero") == layers
    roles = [o.role for o in plan.ops("share_module")]
    assert roles == ["input_embeddings", "lm_head"] + (["mtp_shared_head"] if shared_head else [])
    assert [o.layer for o in plan.ops("share_module") if o.role == "mtp_shared_head"] == (layers if shared_head else [])
    # the other family's layout is reported as not applying, with the reason
    assert any(d.code == "SRG320" and "layer set" in d.message for d in plan.diagnostics)


def test_mtp_qwen3_next_default_mtp_count_is_reported():
    plan = plan_for("mtp", QWEN3_NEXT, QWEN3_NEXT)
    assert any(u["key"] == "num_nextn_predict_layers" and u["value"] == 1 for u in plan.defaults_used["draft"])


def test_mtp_mismatched_pair():
    assert "SRG204" in errors(plan_for("mtp", DSV3, DSV3))
    d = cfg(GLM)
    d["num_nextn_predict_layers"] = 0
    assert "SRG336" in errors(plan_for("mtp", GLM, d))
    assert {"SRG313", "SRG301"} <= errors(plan_for("mtp", GLM, MIMO))
    assert {"SRG313", "SRG314", "SRG301"} <= errors(plan_for("mtp", GLM, QWEN3_NEXT))
    assert "SRG311" not in errors(plan_for("mtp", MIMO, MIMO, pp_size=4))  # embedding loaded separately (issue 42)


# ------------------------------------------------------------------------------ draft-model
def test_draft_model_llama_pair():
    plan = plan_for("draft-model", LLAMA8B, LLAMA1B, tp_size=2)
    assert plan.ok, [d.render() for d in plan.errors]
    assert not plan.ops("share_module")
    assert [(o.role, o.tied_to) for o in plan.ops("keep")] == [("input_embeddings", None), ("lm_head", "draft_embeddings")]
    assert plan.layer_maps == {}


def test_draft_model_mismatched_pair():
    qwen = cfg(LLAMA1B)
    qwen.update(vocab_size=151936, bos_token_id=151643, eos_token_id=151645)
    plan = plan_for("draft-model", LLAMA8B, qwen)
    assert {"SRG313", "SRG331"} <= errors(plan)
    same_size = cfg(LLAMA1B)
    same_size["eos_token_id"] = 128002  # same vocabulary size, an eos id the target never stops on
    assert errors(plan_for("draft-model", LLAMA8B, same_size)) == {"SRG331"}
    # issue 42: an int eos that is one of the target's eos list is the same tokenizer (was a false SRG331)
    same_size["eos_token_id"] = 128001
    assert errors(plan_for("draft-model", LLAMA8B, same_size)) == set()
    same_size["eos_token_id"] = [128009, 128008, 128001]  # the same list in another order
    assert errors(plan_for("draft-model", LLAMA8B, same_size)) == set()
    target = cfg(LLAMA8B)
    target["eos_token_id"] = 128009  # the int on the target's side, the list on the draft's
    same_size["eos_token_id"] = [128001, 128008, 128009]
    assert errors(plan_for("draft-model", target, same_size)) == set()
    assert "SRG319" in errors(plan_for("draft-model", LLAMA8B, LLAMA1B, tp_size=4, draft_tp_size=2))
    # vLLM's DraftModelProposer wants equal tp; the speculative config alone would accept 1
    assert "SRG319" in errors(plan_for("draft-model", LLAMA8B, LLAMA1B, tp_size=4, draft_tp_size=1))
    assert "SRG319" not in errors(plan_for("draft-model", LLAMA8B, LLAMA1B, tp_size=4, draft_tp_size=1, engine="hf"))
    assert "SRG310" in errors(plan_for("draft-model", LLAMA8B, LLAMA1B, tp_size=3))
    short = cfg(LLAMA1B)
    short["max_position_embeddings"] = 8192
    assert "SRG330" in warnings(plan_for("draft-model", LLAMA8B, short))


# ------------------------------------------------------------------------------ gemma4-mtp extensions
def _unified_pair():
    t, d = cfg(E2B), cfg(E2B_ASSISTANT)
    t["model_type"], t["text_config"]["model_type"] = "gemma4_unified", "gemma4_unified_text"
    d["model_type"] = "gemma4_unified_assistant"
    d["text_config"].pop("model_type", None)
    d["text_config"].pop("num_kv_shared_layers", None)  # Gemma4UnifiedAssistantConfig: every layer shared
    return t, d


def test_gemma4_unified_assistant():
    t, d = _unified_pair()
    plan = plan_for("gemma4-mtp", t, d, device="cuda")
    assert plan.ok and plan.pairs("kv_source") == [(0, 13), (1, 13), (2, 13), (3, 14)]
    assert plan.draft["num_kv_shared_layers"] == 4


def test_gemma4_ordered_embeddings_checks():
    plan = plan_for("gemma4-mtp", E2B, E2B_ASSISTANT)  # device unknown: a note naming --device (issue 42 class 9)
    assert plan.ok and "SRG334" not in warnings(plan)
    (note,) = [d for d in plan.diagnostics if d.code == "SRG334"]
    assert note.severity == "info" and "pass --device" in note.message
    assert "SRG334" in errors(plan_for("gemma4-mtp", E2B, E2B_ASSISTANT, device="cpu"))  # vLLM fails at load
    assert "SRG334" not in warnings(plan_for("gemma4-mtp", E2B, E2B_ASSISTANT, device="cuda"))
    assert not [d for d in plan_for("gemma4-mtp", E2B, E2B_ASSISTANT, device="cuda").diagnostics if d.code == "SRG334"]
    assert "SRG334" not in warnings(plan_for("gemma4-mtp", E2B, E2B_ASSISTANT, engine="hf"))
    d = cfg(E2B_ASSISTANT)
    d["num_centroids"] = 3000
    assert "SRG333" in errors(plan_for("gemma4-mtp", E2B, d, device="cuda"))
    d["use_ordered_embeddings"] = False
    assert "SRG333" not in errors(plan_for("gemma4-mtp", E2B, d, device="cuda"))


# ------------------------------------------------------------------------------ CLI + plan schema
@pytest.mark.parametrize("recipe, target, draft", [
    ("eagle3", LLAMA8B, EAGLE3), ("eagle", LLAMA8B, EAGLE1), ("deepseek-mtp", DSV32, DSV32),
    ("mtp", GLM, GLM), ("draft-model", LLAMA8B, LLAMA1B)])
def test_cli_plan_json_matches_plan_schema(run_cli, recipe, target, draft):
    code, out, _ = run_cli("plan", recipe, "--target", CONFIGS / target, "--draft", CONFIGS / draft, "--json")
    assert code == 0, out
    data = json.loads(out)
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(data, load_schema("plan.schema.json"))
    code, out, _ = run_cli("plan", recipe, "--target", CONFIGS / target, "--draft", CONFIGS / draft)
    assert code == 0 and "operations" in out


# ------------------------------------------------------------------------------ oracles against vLLM

def _vllm():
    pytest.importorskip("torch")
    return pytest.importorskip("vllm")


@pytest.mark.parametrize("num_layers", [4, 5, 16, 32, 61, 80, 126])
def test_oracle_eagle3_default_aux_layers(num_layers):
    """vLLM's own `SupportsEagle3.get_eagle3_default_aux_hidden_state_layers`, called on a stand-in
    whose `model.layers` has the target's layer count, and `_set_aux_hidden_state_layers`' sort/dedup."""
    _vllm()
    from vllm.model_executor.models.interfaces import EagleModelMixin, SupportsEagle3

    stand_in = types.SimpleNamespace(model=types.SimpleNamespace(layers=[None] * num_layers))
    theirs = SupportsEagle3.get_eagle3_default_aux_hidden_state_layers(stand_in)
    holder = EagleModelMixin()
    holder._set_aux_hidden_state_layers(theirs)
    t = cfg(LLAMA8B)
    t["num_hidden_layers"] = num_layers
    plan = plan_for("eagle3", t, EAGLE3)
    assert plan.layer_set("aux_layers") == list(holder.aux_hidden_state_layers)


def test_oracle_eagle3_aux_layers_from_config():
    """vLLM's legacy runner `GPUModelRunner._get_eagle3_aux_layers_from_config` (called unbound on a
    stand-in) on the draft hf_config: top-level key, `eagle_config`, none. The v2 runner's
    `get_eagle3_aux_layers_from_config` agrees on the top-level key but reads `eagle_config.layer_ids`
    instead of `eagle_config.eagle_aux_hidden_state_layer_ids`: the engines disagree (asserted below)."""
    _vllm()
    from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import get_eagle3_aux_layers_from_config
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    for extra in ({"eagle_aux_hidden_state_layer_ids": [1, 15, 28]},
                  {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [5, 9, 30]}}, {}):
        d = {**cfg(EAGLE3), **extra}
        spec = types.SimpleNamespace(draft_model_config=types.SimpleNamespace(hf_config=types.SimpleNamespace(**extra)))
        legacy = GPUModelRunner._get_eagle3_aux_layers_from_config(types.SimpleNamespace(speculative_config=spec))
        v2 = get_eagle3_aux_layers_from_config(spec)
        ours = plan_for("eagle3", LLAMA8B, d).layer_set("aux_layers")
        assert ours == (sorted(legacy) if legacy else [2, 16, 29])
        if "eagle_config" in extra:
            assert v2 is None  # the v2 runner ignores this key and falls back to the default layers
        else:
            assert v2 == legacy


class _Mod:
    """Stand-in module: `weight` is a real tensor so vLLM's own torch.equal checks run."""

    def __init__(self, weight):
        self.weight = weight


def _eagle_stand_ins(draft_has_own: bool, identical: bool, draft_vocab: int, target_vocab: int = 32):
    """(draft, target language model) stand-ins with real weight tensors; same seed, same values."""
    import torch

    torch.manual_seed(0)
    t_emb, t_head = torch.randn(target_vocab, 8), torch.randn(target_vocab, 8)
    d_emb = t_emb.clone() if identical else torch.randn(target_vocab, 8)
    d_head = t_head.clone() if identical and draft_vocab == target_vocab else torch.randn(draft_vocab, 8)
    target_lm = types.SimpleNamespace(model=types.SimpleNamespace(embed_tokens=_Mod(t_emb)), lm_head=_Mod(t_head))
    draft_inner = types.SimpleNamespace(embed_tokens=_Mod(d_emb), layers=[])
    draft = types.SimpleNamespace(model=draft_inner, lm_head=_Mod(d_head), has_own_embed_tokens=draft_has_own,
                                  has_own_lm_head=draft_has_own)
    return draft, target_lm


def _proposer_decisions(draft_has_own: bool, identical: bool, draft_vocab: int, target_vocab: int = 32):
    """Run vLLM's legacy `_maybe_share_embeddings` / `_maybe_share_lm_head` unbound on a stand-in."""
    import vllm.v1.spec_decode.llm_base_proposer as lbp

    draft, target_lm = _eagle_stand_ins(draft_has_own, identical, draft_vocab, target_vocab)
    proposer = types.SimpleNamespace(model=draft, vllm_config=types.SimpleNamespace(speculative_config=None),
                                     use_local_argmax_reduction=False)
    pp = types.SimpleNamespace(world_size=1)
    orig = lbp.get_pp_group
    lbp.get_pp_group = lambda: pp
    try:
        lbp.SpecDecodeBaseProposer._maybe_share_embeddings(proposer, target_lm)
        lbp.SpecDecodeBaseProposer._maybe_share_lm_head(proposer, target_lm)
    finally:
        lbp.get_pp_group = orig
    return draft.model.embed_tokens is target_lm.model.embed_tokens, draft.lm_head is target_lm.lm_head


def _our_decisions(plan, draft_has_own: bool, identical: bool, draft_vocab: int, target_vocab: int = 32):
    """Our vLLM adapter applying the plan's share_module / keep steps to the same stand-ins."""
    from dataclasses import replace

    from surgery.applier import apply_plan
    from surgery.live.vllm import VLLMContext

    draft, target_lm = _eagle_stand_ins(draft_has_own, identical, draft_vocab, target_vocab)
    ops = tuple(o for o in plan.operations if o.op in ("share_module", "keep"))
    apply_plan(replace(plan, operations=ops), draft, target_lm, VLLMContext())
    return draft.model.embed_tokens is target_lm.model.embed_tokens, draft.lm_head is target_lm.lm_head


@pytest.mark.parametrize("has_own, identical", [(False, False), (True, True), (True, False)])
def test_oracle_eagle_sharing_decisions_full_vocab(has_own, identical):
    """Full-vocabulary head: vLLM shares when the head has none or identical weights; our adapter,
    applying the plan's `share_if_identical` steps to the same live stand-ins, decides the same."""
    _vllm()
    theirs = _proposer_decisions(has_own, identical, draft_vocab=32)
    assert theirs == (not has_own or identical,) * 2
    d = cfg(EAGLE3)
    d.pop("draft_vocab_size")
    plan = plan_for("eagle3", LLAMA8B, d)
    assert _our_decisions(plan, has_own, identical, draft_vocab=32) == theirs


def test_oracle_eagle_reduced_vocab_head():
    """Reduced draft_vocab_size: vLLM keeps a head it has (shapes differ, torch.equal is False) - our
    plan keeps it too and requires it to exist; a head-less reduced draft is where vLLM would share the
    target's full head (the pitfall), which our plan refuses by `keep ... must_exist`."""
    _vllm()
    _, head_shared = _proposer_decisions(True, False, draft_vocab=16)
    assert head_shared is False
    _, head_shared_without_own = _proposer_decisions(False, False, draft_vocab=16)
    assert head_shared_without_own is True  # vLLM's behaviour: overwritten
    plan = plan_for("eagle3", LLAMA8B, EAGLE3)
    assert not [o for o in plan.ops("share_module") if o.role == "lm_head"]
    assert [(o.role, o.must_exist) for o in plan.ops("keep")] == [("lm_head", True)]
    # our adapter on the same stand-ins: a head it brings is kept, like vLLM; a head-less one is refused
    assert _our_decisions(plan, True, False, draft_vocab=16)[1] is False
    with pytest.raises(SurgeryError) as exc:
        _our_decisions(plan, False, False, draft_vocab=16)
    assert [d.code for d in exc.value.diagnostics] == ["SRG407"]


@pytest.mark.parametrize("config, n", [(DSV3, 1), (DSV3, 3), (DSV32, 1), (GLM, 1), (MIMO, 1)])
def test_oracle_mtp_layer_indexing(config, n):
    """vLLM rewrites the config (`SpeculativeConfig.hf_config_override`) and its MTP predictor numbers
    the layers from `config.num_hidden_layers` (deepseek_mtp / glm4_moe_mtp / mimo_mtp:
    `mtp_start_layer_idx`, `range(start, start + num_nextn_predict_layers)`)."""
    _vllm()
    import transformers  # noqa: F401
    from vllm.config.speculative import SpeculativeConfig

    raw = {k: v for k, v in cfg(config).items() if not k.startswith("_")}
    raw["num_nextn_predict_layers"] = n

    class HFConfig(types.SimpleNamespace):  # light stand-in for a transformers config object
        def update(self, values):
            self.__dict__.update(values)

    out = SpeculativeConfig.hf_config_override(HFConfig(**raw))
    assert out.model_type in ("deepseek_mtp", "glm4_moe_mtp", "mimo_mtp")
    assert out.n_predict == n
    theirs = list(range(out.num_hidden_layers, out.num_hidden_layers + out.n_predict))
    recipe = "deepseek-mtp" if config in (DSV3, DSV32) else "mtp"
    plan = plan_for(recipe, raw, raw)
    assert plan.layer_set("mtp_layers") + plan.layer_set("mtp_layers_from_zero") == theirs


def _mtp_stand_ins(buffers: bool):
    """A DeepSeek-V3.2-shaped MTP draft as vLLM builds it (`DeepSeekMTP.model.layers` is a
    ModuleDict keyed by the decoder index, each layer with `shared_head.head` and an indexer holding
    `topk_indices_buffer`) and a target language model; same seed, same values."""
    import torch

    torch.manual_seed(0)
    target = torch.nn.Module()
    target.model = torch.nn.Module()
    target.model.embed_tokens = torch.nn.Embedding(16, 4)
    target.lm_head = torch.nn.Linear(4, 16, bias=False)
    draft = torch.nn.Module()
    draft.model = torch.nn.Module()
    draft.model.embed_tokens = torch.nn.Embedding(16, 4)
    layer = torch.nn.Module()
    layer.shared_head = torch.nn.Module()
    layer.shared_head.head = torch.nn.Linear(4, 16, bias=False)
    layer.indexer = torch.nn.Module()
    draft.model.layers = torch.nn.ModuleDict({"61": layer})
    draft.lm_head = torch.nn.Linear(4, 16, bias=False)
    if buffers:
        target.model.topk_indices_buffer = torch.zeros(2, 8, dtype=torch.int32)
        layer.indexer.topk_indices_buffer = torch.ones(2, 8, dtype=torch.int32)
    return draft, target


def _mtp_shared(draft, target) -> dict:
    return {"lm_head": draft.lm_head is target.lm_head,
            "shared_head": draft.model.layers["61"].shared_head.head is target.lm_head,
            "embedding": draft.model.embed_tokens is target.model.embed_tokens,
            "buffers": [getattr(m, "topk_indices_buffer", None) is getattr(target.model, "topk_indices_buffer", 0)
                        for m in (draft.model, draft.model.layers["61"].indexer)]}


@pytest.mark.parametrize("v32", [True, False])
def test_oracle_mtp_sharing_matches_vllm(v32):
    """deepseek-mtp applied by our vLLM adapter to a stand-in MTP draft gives the same sharing as
    vLLM's own `_maybe_share_embeddings` + `_maybe_share_lm_head` (lm_head, every MTP layer's
    shared_head.head through the ModuleDict, the V3.2 top-k buffer on the inner model and the indexer)."""
    _vllm()
    import vllm.v1.spec_decode.llm_base_proposer as lbp
    from dataclasses import replace

    from surgery.applier import apply_plan
    from surgery.live.vllm import VLLMContext

    draft, target = _mtp_stand_ins(v32)
    proposer = types.SimpleNamespace(model=draft, vllm_config=types.SimpleNamespace(speculative_config=None),
                                     use_local_argmax_reduction=False)
    orig = lbp.get_pp_group
    lbp.get_pp_group = lambda: types.SimpleNamespace(world_size=1)
    try:
        lbp.SpecDecodeBaseProposer._maybe_share_embeddings(proposer, target)
        lbp.SpecDecodeBaseProposer._maybe_share_lm_head(proposer, target)
    finally:
        lbp.get_pp_group = orig
    theirs = _mtp_shared(draft, target)

    plan = plan_for("deepseek-mtp", DSV32 if v32 else DSV3, DSV32 if v32 else DSV3)
    assert plan.ok
    draft, target = _mtp_stand_ins(v32)
    apply_plan(replace(plan, operations=tuple(o for o in plan.operations if o.op != "keep")), draft, target,
               VLLMContext())
    assert _mtp_shared(draft, target) == theirs
    assert theirs["shared_head"] and theirs["lm_head"] and theirs["buffers"] == [v32, v32]
