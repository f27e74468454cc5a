"""Oracle: our config facts (`surgery.facts.facts_from_config`, no transformers) vs what transformers'
own config classes and attention modules compute from the same config dict.

Checked per layer: layer_type, head_dim, num_kv_heads, sliding_window, kv_shared, against
`config.layer_types`, `config.per_layer_config[i].head_dim / .num_key_value_heads`, and the
instantiated attention module (`layer_type`, `head_dim`, `sliding_window`, `is_kv_shared_layer`,
`k_proj.out_features // head_dim`). Scalars against the config object's attributes.
"""
from __future__ import annotations

import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import oracle_helpers as h  # noqa: E402
from oracle_helpers import FULL, SLIDING  # noqa: E402
from surgery.facts import facts_from_config  # noqa: E402

transformers.logging.set_verbosity_error()

SETTINGS = settings(max_examples=120, derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
MISSING = object()


def _maybe(strategy):
    return st.one_of(st.just(MISSING), strategy)


def _put(cfg: dict, key: str, value) -> None:
    if value is not MISSING:
        cfg[key] = value


# ------------------------------------------------------------------------------ Gemma 4 text
@st.composite
def gemma4_text_configs(draw, with_layer_types=None, with_pattern=False):
    cfg: dict = {"model_type": "gemma4_text"}
    n = draw(_maybe(st.integers(1, 24)))
    _put(cfg, "num_hidden_layers", n)
    n_layers = 30 if n is MISSING else n
    heads = draw(_maybe(st.sampled_from([1, 2, 4, 8])))
    _put(cfg, "num_attention_heads", heads)
    n_heads = 8 if heads is MISSING else heads
    _put(cfg, "num_key_value_heads", draw(_maybe(st.integers(1, n_heads))))
    _put(cfg, "hidden_size", draw(_maybe(st.sampled_from([16, 32, 64]))))
    _put(cfg, "vocab_size", draw(_maybe(st.sampled_from([32, 1000]))))
    _put(cfg, "head_dim", draw(_maybe(st.sampled_from([4, 8, 16, 256]))))
    _put(cfg, "global_head_dim", draw(_maybe(st.sampled_from([8, 16, 32, 512]))))
    _put(cfg, "sliding_window", draw(_maybe(st.integers(1, 1024))))
    _put(cfg, "attention_k_eq_v", draw(_maybe(st.booleans())))
    _put(cfg, "num_global_key_value_heads", draw(_maybe(st.one_of(st.none(), st.integers(1, 4)))))
    _put(cfg, "num_kv_shared_layers", draw(_maybe(st.integers(0, n_layers))))
    _put(cfg, "max_position_embeddings", draw(_maybe(st.sampled_from([512, 131072]))))
    _put(cfg, "tie_word_embeddings", draw(_maybe(st.booleans())))
    _put(cfg, "hidden_size_per_layer_input", draw(_maybe(st.sampled_from([0, 256]))))
    if with_layer_types is None:
        with_layer_types = draw(st.booleans())
    if with_layer_types:
        cfg["layer_types"] = draw(st.lists(st.sampled_from([SLIDING, FULL]), min_size=n_layers, max_size=n_layers))
    if with_pattern:
        cfg["sliding_window_pattern"] = draw(st.integers(1, 8))
    return cfg


def _hf_text(cfg: dict):
    return transformers.Gemma4TextConfig(**{k: v for k, v in cfg.items() if k != "model_type"})


def _global(hf, key: str):
    """The config-level value of a per-layer attribute (transformers refuses plain access to those
    on a heterogeneous config); our scalar facts hold these global values."""
    return hf._getattr_without_heterogeneous_validation(key)


def _check_layers(facts, text_config, modules) -> None:
    assert facts.num_layers == text_config.num_hidden_layers == len(modules)
    for layer, attn in zip(facts.layers, modules):
        i = layer.index
        per = text_config.per_layer_config[i]
        theirs = {"layer_type": text_config.layer_types[i], "head_dim": per.head_dim,
                  "num_kv_heads": per.num_key_value_heads, "sliding_window": attn.sliding_window,
                  "kv_shared": attn.is_kv_shared_layer}
        ours = {k: layer.get(k) for k in theirs}
        assert ours == theirs, f"layer {i}"
        assert attn.layer_type == layer.layer_type and attn.head_dim == layer.head_dim
        if not attn.is_kv_shared_layer:  # shared layers have no k/v projections
            assert attn.k_proj.out_features == layer.num_kv_heads * layer.head_dim, f"layer {i}"


@SETTINGS
@given(gemma4_text_configs())
@example({"model_type": "gemma4_text"})  # every field missing
@example({"model_type": "gemma4_text", "num_hidden_layers": 4, "attention_k_eq_v": True,
          "num_global_key_value_heads": 2, "num_kv_shared_layers": 2})
@example({"model_type": "gemma4_text", "num_hidden_layers": 3, "layer_types": [SLIDING] * 3})  # last forced full
def test_gemma4_text_layers(cfg):
    hf = _hf_text(cfg)
    _check_layers(facts_from_config(cfg), hf, h.hf_attention_modules(hf))


@SETTINGS
@given(gemma4_text_configs())
def test_gemma4_text_scalars(cfg):
    f = facts_from_config(cfg)
    hf = _hf_text(cfg)
    theirs = {"num_hidden_layers": hf.num_hidden_layers, "hidden_size": hf.hidden_size,
              "vocab_size": hf.vocab_size, "num_attention_heads": hf.num_attention_heads,
              "num_kv_heads": _global(hf, "num_key_value_heads"), "head_dim": _global(hf, "head_dim"),
              "sliding_window": hf.sliding_window, "num_kv_shared_layers": hf.num_kv_shared_layers,
              "max_position_embeddings": hf.max_position_embeddings,
              "tie_word_embeddings": hf.tie_word_embeddings,
              "has_sliding_layers": SLIDING in hf.layer_types, "layer_type_set": sorted(set(hf.layer_types))}
    assert {k: f[k] for k in theirs} == theirs
    full = [i for i, t in enumerate(hf.layer_types) if t == FULL]
    if full:  # transformers keeps global_head_dim only inside per_layer_config
        assert f["global_head_dim"] == hf.per_layer_config[full[0]].head_dim


@SETTINGS
@given(gemma4_text_configs())
@example({"model_type": "gemma4_text", "num_hidden_layers": 2})
def test_gemma4_text_hidden_size_per_layer_input(cfg):
    """A fact recipes may name (`draft.hidden_size_per_layer_input`); the defaults table says 256."""
    assert facts_from_config(cfg)["hidden_size_per_layer_input"] == _hf_text(cfg).hidden_size_per_layer_input


@SETTINGS
@given(gemma4_text_configs(with_layer_types=False, with_pattern=True))
@example({"model_type": "gemma4_text", "num_hidden_layers": 8, "sliding_window_pattern": 4})
def test_gemma4_sliding_window_pattern(cfg):
    """Gemma4TextConfig has no `sliding_window_pattern`: without `layer_types` it always derives them
    with period 6 (a `sliding_window_pattern` key is kept as an unused attribute). vLLM reads the
    transformers config, so the engines see transformers' layer types."""
    f = facts_from_config(cfg)
    hf = _hf_text(cfg)
    assert [layer.layer_type for layer in f.layers] == hf.layer_types


# ------------------------------------------------------------------------------ Gemma 4 assistant
@st.composite
def assistant_configs(draw, text_model_type=True):
    text = draw(gemma4_text_configs())
    text["hidden_size_per_layer_input"] = 0  # Gemma4AssistantConfig rejects anything else
    text["vocab_size_per_layer_input"] = 0
    if not text_model_type:
        text.pop("model_type")  # transformers defaults it to gemma4_text
    cfg = {"model_type": "gemma4_assistant", "text_config": text}
    _put(cfg, "backbone_hidden_size", draw(_maybe(st.sampled_from([16, 1536]))))
    _put(cfg, "use_ordered_embeddings", draw(_maybe(st.booleans())))
    _put(cfg, "tie_word_embeddings", draw(_maybe(st.booleans())))
    return cfg


def _hf_assistant(cfg):
    try:
        return transformers.Gemma4AssistantConfig(**{k: v for k, v in cfg.items() if k != "model_type"})
    except Exception as exc:  # transformers refuses it (e.g. a layer that computes its own KV)
        return exc


@SETTINGS
@given(assistant_configs())
@example({"model_type": "gemma4_assistant", "text_config": {"model_type": "gemma4_text", "num_hidden_layers": 4,
          "hidden_size_per_layer_input": 0, "vocab_size_per_layer_input": 0}})
def test_gemma4_assistant(cfg):
    _check_assistant(cfg)


def _check_assistant(cfg):
    f = facts_from_config(cfg)
    hf = _hf_assistant(cfg)
    if isinstance(hf, Exception):
        # transformers only refuses an assistant whose layers are not all KV-shared; our facts accept
        # it and the shipped recipe's requirement reports it (SRG308)
        assert "must be shared" in str(hf), hf
        assert f["num_kv_shared_layers"] != f["num_hidden_layers"]
        return
    text = hf.text_config
    assert f["num_kv_shared_layers"] == text.num_kv_shared_layers == text.num_hidden_layers
    assert f["backbone_hidden_size"] == hf.backbone_hidden_size
    assert bool(f["use_ordered_embeddings"]) == hf.use_ordered_embeddings
    _check_layers(f, text, h.hf_attention_modules(text))


@SETTINGS
@given(assistant_configs(text_model_type=False))
@example({"model_type": "gemma4_assistant", "text_config": {"num_hidden_layers": 3, "layer_types": [SLIDING] * 3,
          "hidden_size_per_layer_input": 0, "vocab_size_per_layer_input": 0}})
def test_gemma4_assistant_text_config_without_model_type(cfg):
    """Gemma4AssistantConfig builds `text_config` with CONFIG_MAPPING[text.get("model_type", "gemma4_text")],
    i.e. a text_config without `model_type` is a Gemma 4 text config with all its defaults."""
    _check_assistant(cfg)


def test_assistant_not_all_shared_is_srg308():
    """The case transformers refuses: our plan must not be ok (SRG308 from the shipped recipe)."""
    draft = h.assistant_config([SLIDING, FULL])
    draft["text_config"]["num_kv_shared_layers"] = 1
    assert isinstance(_hf_assistant(draft), Exception)
    target = h.target_text_config([SLIDING, SLIDING, FULL, SLIDING, FULL], 0)
    plan = h.our_plan(draft, target)
    assert "SRG308" in {d.code for d in plan.errors}


def test_real_configs():
    draft, target = h.e2b_configs()
    fd, ft = facts_from_config(draft), facts_from_config(target)
    hd = h.hf_draft_config(draft)
    ht = h.hf_target_config(target)
    _check_layers(fd, hd.text_config, h.hf_attention_modules(hd.text_config))
    _check_layers(ft, ht.text_config, h.hf_attention_modules(ht.text_config))
    assert ft["num_kv_shared_layers"] == ht.text_config.num_kv_shared_layers == 20
    assert fd["num_kv_shared_layers"] == 4


# ------------------------------------------------------------------------------ Llama
@st.composite
def llama_configs(draw):
    cfg: dict = {"model_type": "llama"}
    heads = draw(_maybe(st.sampled_from([1, 2, 4, 8, 32])))
    _put(cfg, "num_attention_heads", heads)
    n_heads = 32 if heads is MISSING else heads
    _put(cfg, "hidden_size", draw(_maybe(st.sampled_from([32, 64, 96, 256]))))
    _put(cfg, "num_key_value_heads", draw(_maybe(st.sampled_from([k for k in (1, 2, 4, 8, 32) if n_heads % k == 0]))))
    _put(cfg, "head_dim", draw(_maybe(st.sampled_from([4, 8, 64]))))
    _put(cfg, "num_hidden_layers", draw(_maybe(st.integers(1, 12))))
    _put(cfg, "vocab_size", draw(_maybe(st.sampled_from([32, 128256]))))
    _put(cfg, "max_position_embeddings", draw(_maybe(st.sampled_from([512, 8192]))))
    _put(cfg, "tie_word_embeddings", draw(_maybe(st.booleans())))
    return cfg


@SETTINGS
@given(llama_configs())
@example({"model_type": "llama"})
@example({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4})
def test_llama(cfg):
    import torch
    from transformers.models.llama.modeling_llama import LlamaAttention

    f = facts_from_config(cfg)
    hf = transformers.LlamaConfig(**{k: v for k, v in cfg.items() if k != "model_type"})
    theirs = {"num_hidden_layers": hf.num_hidden_layers, "hidden_size": hf.hidden_size, "vocab_size": hf.vocab_size,
              "num_attention_heads": hf.num_attention_heads, "num_kv_heads": hf.num_key_value_heads,
              "head_dim": hf.head_dim, "max_position_embeddings": hf.max_position_embeddings,
              "tie_word_embeddings": hf.tie_word_embeddings, "num_kv_shared_layers": 0,
              "layer_type_set": sorted(set(getattr(hf, "layer_types", None) or [FULL]))}
    assert {k: f[k] for k in theirs} == theirs
    with torch.device("meta"):
        attn = LlamaAttention(hf, 0)
    for layer in f.layers:
        assert (layer.layer_type, layer.head_dim, layer.num_kv_heads, layer.kv_shared, layer.sliding_window) == \
            (FULL, attn.head_dim, attn.k_proj.out_features // attn.head_dim, False, None)
