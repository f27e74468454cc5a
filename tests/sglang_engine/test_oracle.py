"""Oracle: surgery's model of SGLang's own wiring (surgery/sglang/rules.py, the engine card) equals
what SGLang's code computes. Each test runs SGLang's function, cut unchanged from the pinned
wheel's source (tests/sglang_source.py), on stand-in objects, beside our rule on the same inputs.
And the wiring after the recipe, applied by the SGLang performers, equals the wiring SGLang's own
`init_lm_head` leaves, by object identity, where the two must agree."""
from __future__ import annotations

import sys
import types
from typing import List, Optional

import pytest

torch = pytest.importorskip("torch")

import sglang_source as sgl  # noqa: E402

from surgery.sglang import rules  # noqa: E402

IDS = [None, [0, 7, 8], [1, 3, 4], [2, 4, 5], [1, 15, 28], [3]]


def _capture_target(num_layers: int):
    return types.SimpleNamespace(pp_group=types.SimpleNamespace(is_last_rank=True),
                                 config=types.SimpleNamespace(num_hidden_layers=num_layers),
                                 model=types.SimpleNamespace(layers_to_capture=[]))


@pytest.mark.parametrize("relpath, qualname, model_type", [
    ("models/llama.py", "LlamaForCausalLM.set_eagle3_layers_to_capture", "llama"),
    ("models/deepseek_v2.py", "DeepseekV2ForCausalLM.set_eagle3_layers_to_capture", "deepseek_v3"),
])
@pytest.mark.parametrize("num_layers", [8, 32])
@pytest.mark.parametrize("ids", IDS)
def test_layers_to_capture_is_sglangs(relpath, qualname, model_type, num_layers, ids):
    fn = sgl.function(relpath, qualname, {"Optional": Optional, "List": List})
    target = _capture_target(num_layers)
    fn(target, None if ids is None else list(ids))
    assert target.capture_aux_hidden_states is True
    assert target.model.layers_to_capture == rules.layers_to_capture(model_type, num_layers, ids)


def test_the_two_id_rules_differ_where_sglang_25454_says():
    """Llama adds 1 always, DeepSeek only when the first id is 1: the card's `aux_shift` is not
    one rule, and the oracle above would catch a merged one."""
    assert rules.layers_to_capture("llama", 32, [2, 16, 29]) == [3, 17, 30]
    assert rules.layers_to_capture("deepseek_v3", 32, [2, 16, 29]) == [2, 16, 29]


def test_hot_token_id_is_d2t_plus_arange():
    stmt = sgl.find_in_function("models/llama_eagle3.py", "LlamaForCausalLMEagle3.load_weights",
                                "self.hot_token_id = loaded_weight")
    d2t = torch.tensor([0, 3, 3, 10, 250, -1])
    ns = {"self": types.SimpleNamespace(), "loaded_weight": d2t, "torch": torch}
    exec(stmt, ns)  # noqa: S102 - SGLang's own statement
    assert ns["self"].hot_token_id.tolist() == rules.hot_token_id(d2t.tolist())


@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("draft_vocab_size", [None, 128])
def test_load_lm_head_from_target_is_sglangs(tie, draft_vocab_size):
    code = sgl.statements("models/llama_eagle3.py", "LlamaForCausalLMEagle3.__init__",
                          "self.load_lm_head_from_target = False", "if self.config.tie_word_embeddings")
    config = types.SimpleNamespace(tie_word_embeddings=tie, draft_vocab_size=draft_vocab_size, vocab_size=264,
                                   hidden_size=64)
    me = types.SimpleNamespace(config=config, model=types.SimpleNamespace(embed_tokens="embed"))
    ns = {"self": me, "config": config, "quant_config": None, "prefix": "", "add_prefix": lambda a, b: a,
          "ParallelLMHead": lambda *a, **k: "own head"}
    exec(code, ns)  # noqa: S102
    cfg = {"tie_word_embeddings": tie, "draft_vocab_size": draft_vocab_size}
    assert me.load_lm_head_from_target is rules.load_lm_head_from_target(cfg)


@pytest.mark.parametrize("draft_config, expected", [
    ({"eagle_aux_hidden_state_layer_ids": [0, 7, 8]}, None),  # top level: vLLM's key, unread by SGLang
    ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]}}, [1, 3, 4]),
    ({"eagle_config": {"use_aux_hidden_state": True}}, None),
    ({}, None),
])
def test_aux_ids_come_from_the_nested_eagle_config_only(draft_config, expected):
    # at any depth: 0.5.16 / 0.5.17 nest it in the "draft model path given" branch, 0.5.21 returns early
    code = sgl.find_in_function("model_executor/model_runner_components/spec_aux_hidden_state.py",
                                "_resolve_eagle_aux_hidden_state", "if spec_algorithm.is_eagle3()")
    hf_config = types.SimpleNamespace(**draft_config)
    config = types.SimpleNamespace()
    ns = {"spec_algorithm": types.SimpleNamespace(is_eagle3=lambda: True), "config": config,
          "draft_model_config": types.SimpleNamespace(hf_config=hf_config)}
    exec(code, ns)  # noqa: S102
    assert config.eagle_aux_hidden_state_layer_ids == expected == rules.aux_ids_read(draft_config)


def _sglang_lora_module(monkeypatch):
    """init_lm_head imports `sglang.srt.lora.layers.unwrap_lora_layer` inside the function."""
    for name in ("sglang", "sglang.srt", "sglang.srt.lora"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    layers = types.ModuleType("sglang.srt.lora.layers")
    layers.unwrap_lora_layer = lambda m: m
    monkeypatch.setitem(sys.modules, "sglang.srt.lora.layers", layers)


class RecordingDraft:
    def __init__(self, load_from_target):
        self.load_lm_head_from_target, self.hot_token_id, self.calls = load_from_target, None, []

    def set_embed_and_head(self, embed, head):
        self.calls.append("set_embed_and_head")

    def set_embed(self, embed):
        self.calls.append("set_embed")


def _worker(algorithm, draft):
    return types.SimpleNamespace(
        _resolve_shared_embed_and_head=lambda: ("embed", "head"), hot_token_id=None,
        # 0.5.21 resolves through the worker, 0.5.16 / 0.5.17 call the target model's get_embed_and_head
        target_worker=types.SimpleNamespace(model_runner=types.SimpleNamespace(model=types.SimpleNamespace(
            lm_head="h", get_embed_and_head=lambda: ("embed", "head")))),
        draft_runner=types.SimpleNamespace(model=draft),
        speculative_algorithm=types.SimpleNamespace(is_eagle3=lambda: algorithm == "EAGLE3"))


@pytest.mark.parametrize("algorithm", ["EAGLE3", "EAGLE", "NEXTN"])
@pytest.mark.parametrize("load_from_target", [False, True])
def test_init_lm_head_calls_what_the_rules_say(monkeypatch, algorithm, load_from_target):
    """EAGLE3: head from the target only when `load_lm_head_from_target`; every other algorithm
    replaces embedding and head whatever the draft brought (the card's head_always_replaced_for)."""
    _sglang_lora_module(monkeypatch)
    init = sgl.function("speculative/eagle_worker_v2.py", "EagleDraftWorker.init_lm_head")
    draft = RecordingDraft(load_from_target)
    init(_worker(algorithm, draft))
    assert draft.calls == [rules.head_calls(algorithm, load_from_target)]


def test_standalone_init_lm_head_wires_nothing():
    init = sgl.function("speculative/standalone_worker_v2.py", "StandaloneDraftWorker.init_lm_head")
    draft = RecordingDraft(True)
    init(_worker("STANDALONE", draft))
    assert draft.calls == [] and rules.head_calls("STANDALONE", True) == "none"


def _platform_ns():
    return {"_is_xpu": False, "current_platform": types.SimpleNamespace(empty_cache=lambda: None,
                                                                         synchronize=lambda: None)}


@pytest.mark.parametrize("target_hidden_size, shared", [(64, True), (32, False)])
def test_set_embed_skips_a_draft_of_another_width(target_hidden_size, shared):
    set_embed = sgl.function("models/llama.py", "LlamaForCausalLM.set_embed", _platform_ns())
    draft = torch.nn.Module()
    draft.config = types.SimpleNamespace(target_hidden_size=target_hidden_size, hidden_size=64)
    draft.model = torch.nn.Module()
    draft.model.embed_tokens = torch.nn.Embedding(6, 64)
    target_weight = torch.nn.Parameter(torch.zeros(6, 64))
    set_embed(draft, target_weight)
    assert (draft.model.embed_tokens.weight is target_weight) is shared
    cfg = {"target_hidden_size": target_hidden_size, "hidden_size": 64, "draft_vocab_size": 128}
    assert rules.stock_wiring("EAGLE3", cfg, {"num_hidden_layers": 8})["input_embeddings"] == \
        ("target" if shared else "own")


# the capture loop / boundary oracle, per release: tests/sglang_engine/test_capture_oracle.py


def test_every_hook_point_of_the_card_is_in_the_pinned_release():
    """The draft-load points the hook wraps exist in the pinned SGLang: SRG361 cannot fire there."""
    from surgery.sglang.hooks import RUNNER_POINT, draft_load_points

    for module, cls, method in draft_load_points() + [RUNNER_POINT]:
        relpath = module.replace("sglang.srt.", "").replace(".", "/") + ".py"
        sgl.function(relpath, f"{cls}.{method}", {"Optional": Optional, "List": List})
