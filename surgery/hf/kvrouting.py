"""How a Gemma 4 assistant reads the target's K/V in HF transformers.

In transformers 5.x every assistant attention is a KV-shared ``Gemma4TextAttention``: instead of
computing K/V it looks up ``shared_kv_states[self.layer_type]``. The mask and rotary embedding of
that layer are chosen from ``config.layer_types[i]`` instead, so ``self_attn.layer_type`` is *only*
the lookup key. We exploit that: the applier points draft layer i at target layer j by setting
``draft.model.layers[i].self_attn.layer_type = kv_key(j)``, and :func:`build_shared_kv_states`
puts target layer j's K/V under that key.

The target must run with a ``DynamicCache()`` built WITHOUT a config: every layer then keeps
full-length K/V (no sliding-window truncation; masks still follow the config), so any non-shared
target layer can be read, at any length.
"""

from __future__ import annotations

KV_KEY_PREFIX = "surgery.kv."
LAYER_TYPES = ("full_attention", "sliding_attention")


def kv_key(j: int) -> str:
    """The ``shared_kv_states`` key under which target layer ``j``'s (K, V) is published."""
    return f"{KV_KEY_PREFIX}{int(j)}"


def parse_kv_key(key: str) -> int | None:
    """Target layer index of a :func:`kv_key`, or None for a plain layer-type key."""
    if not isinstance(key, str) or not key.startswith(KV_KEY_PREFIX):
        return None
    return int(key[len(KV_KEY_PREFIX) :])


def text_config(config):
    """The text (decoder) config of a gemma4 / gemma4_text / gemma4_assistant config."""
    get = getattr(config, "get_text_config", None)
    return get() if get is not None else config


def first_kv_shared_layer(config) -> int:
    cfg = text_config(config)
    return cfg.num_hidden_layers - (getattr(cfg, "num_kv_shared_layers", 0) or 0)


def default_kv_sources(target_config) -> dict[str, int]:
    """Per layer type, the last non-KV-shared target layer of that type.

    This is what transformers' target itself publishes under the type keys (the layer with
    ``store_full_length_kv``) and what vLLM wires assistant layers to.
    """
    cfg = text_config(target_config)
    unshared = cfg.layer_types[: first_kv_shared_layer(cfg)]
    return {t: max(i for i, lt in enumerate(unshared) if lt == t) for t in set(unshared)}


def draft_attentions(draft_model):
    """The draft's attention modules, in layer order."""
    return [layer.self_attn for layer in draft_model.model.layers]


def cache_kv(target_cache, j: int, length: int | None = None):
    """(K, V) of target layer ``j`` from a DynamicCache, optionally cut to the first ``length``
    positions. transformers >= 4.56 stores them as ``cache.layers[j].keys/.values``."""
    if j >= len(target_cache.layers) or target_cache.layers[j].keys is None:
        raise KeyError(
            f"target layer {j} has no K/V in the cache (only layers 0..{len(target_cache.layers) - 1} "
            "were written; KV-shared target layers have no K/V of their own)"
        )
    layer = target_cache.layers[j]
    keys, values = layer.keys, layer.values
    if length is not None:
        keys, values = keys[:, :, :length], values[:, :, :length]
    return keys, values


def build_shared_kv_states(target_cache, target_config, draft_model, length: int | None = None) -> dict:
    """The ``shared_kv_states`` dict the draft needs, from the target's full-length cache.

    Contains one entry per routed key ``kv_key(j)`` found on the draft's attentions, plus the two
    type keys ``"full_attention"`` / ``"sliding_attention"`` holding the target's defaults: the
    assistant's ``create_attention_masks`` reads those two for the mask shapes, and an unwired
    draft attention reads them by type. ``length`` cuts every entry to the committed positions.
    """
    cfg = text_config(target_config)
    first_shared = first_kv_shared_layer(cfg)
    states = {t: cache_kv(target_cache, j, length) for t, j in default_kv_sources(cfg).items()}
    for i, attn in enumerate(draft_attentions(draft_model)):
        j = parse_kv_key(attn.layer_type)
        if j is None or attn.layer_type in states:
            continue
        if not 0 <= j < first_shared:
            raise ValueError(
                f"draft layer {i} is routed to target layer {j}, which is not a non-KV-shared target "
                f"layer (valid: 0..{first_shared - 1})"
            )
        states[attn.layer_type] = cache_kv(target_cache, j, length)
    return states
