"""How a Gemma 4 assistant reads the target's K/V in HF transformers.

In transformers 5.x every assistant attention is a KV-shared ``Gemma4TextAttention``: instead of
computing K/V it looks up ``shared_kv_states[self.layer_type]``, and the target's attentions with
``store_full_length_kv`` publish theirs under their own ``layer_type``. The mask and rotary embedding
of a layer are chosen from ``config.layer_types[i]`` instead, so ``self_attn.layer_type`` is *only*
the lookup key. The share_kv performer (surgery/ops/share_kv/hf.py) leaves transformers' default map
alone and, for any other target layer j, makes layer j publish under ``kv_key(j)`` and points the
draft layer at that key: the wired pair runs under transformers' own contract, in its ``generate``
and in ours (surgery/hf/generate.py).

:func:`build_shared_kv_states` builds the same dict from a full-length ``DynamicCache`` (built
WITHOUT a config: every layer keeps full-length K/V, masks still follow the config); tests use it
as an independent reference.
"""

from __future__ import annotations
from ..pipeline import last_unshared_of_type
from ..text.diagnostics import SurgeryError, diag
from .hf import cache_kwarg

KV_KEY_PREFIX = "surgery.kv."


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
    return last_unshared_of_type(list(cfg.layer_types), first_kv_shared_layer(cfg))


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


# -- the applier's share_kv, under transformers' own contract ----------------------------------
#
# transformers' contract (modeling_gemma4.py, Gemma4TextAttention.forward): a target attention with
# ``store_full_length_kv`` writes its K/V to ``shared_kv_states[self.layer_type]``; a KV-shared
# attention (every assistant layer) reads ``shared_kv_states[self.layer_type]``; masks and rotary
# embeddings follow ``config.layer_types[i]``, so ``self_attn.layer_type`` is only the key. The
# target returns the dict with ``return_shared_kv_states=True`` and transformers' MTP generation
# passes it to the assistant unchanged. Wiring therefore works in transformers' own ``generate``
# when the target PUBLISHES under the key the draft READS:
#   * map equal to transformers' default (the last unshared layer of the type): nothing to do;
#   * another target layer j: target layer j also publishes, under ``kv_key(j)`` (its
#     ``layer_type`` rebound, ``store_full_length_kv`` set: its own computation is unchanged, it only
#     adds an entry referencing its cache K/V) and the draft layer reads ``kv_key(j)``.


def publisher_key(t_attn) -> str | None:
    """The key under which a live target attention publishes its K/V, None if it publishes none."""
    if getattr(t_attn, "is_kv_shared_layer", False) or not getattr(t_attn, "store_full_length_kv", False):
        return None
    return t_attn.layer_type


def _probe_ids(target, n: int = 3):
    import torch

    vocab = text_config(target.config).vocab_size
    return (torch.arange(1, n + 1) % vocab).unsqueeze(0).to(target.device)


def published_kv(target, n_tokens: int = 3):
    """(shared_kv_states, cache) of one real target forward over a short probe, run the way
    transformers' MTP generation runs it (``return_shared_kv_states=True``), with a config-less
    ``DynamicCache`` so every unshared layer's K/V can be compared with what was published. The cache
    goes in under this release's keyword (:func:`surgery.live.hf.cache_kwarg`)."""
    import torch
    from transformers import DynamicCache

    cache = DynamicCache()
    with torch.no_grad():
        out = target(input_ids=_probe_ids(target, n_tokens), use_cache=True, return_shared_kv_states=True,
                     logits_to_keep=1, **{cache_kwarg(target): cache})
    states = getattr(out, "shared_kv_states", None)
    if states is None:

        raise SurgeryError(diag("SRG433", f"{type(target).__name__} returned no shared_kv_states: this transformers "
                                "version does not publish the target's K/V the way Gemma 4 assisted generation needs"))
    return states, cache


def reads_target_layer(draft_attn, target, j: int) -> tuple[bool, str]:
    """Does ``draft_attn`` read target layer ``j``'s K/V under transformers' contract? Proved on a
    real target forward (not through our routing code): the entry the target publishes under the
    draft attention's lookup key must be target layer j's own cached tensors."""
    states, cache = published_kv(target)
    key = draft_attn.layer_type
    got = states.get(key)
    if got is None:
        return False, f"the draft reads key {key!r}, which the target publishes nothing under (keys: {sorted(states)})"
    want = cache.layers[j]
    if got[0] is want.keys and got[1] is want.values:
        return True, f"key {key!r} holds target layer {j}'s cache tensors"
    others = [i for i, layer in enumerate(cache.layers) if i != j and getattr(layer, "keys", None) is got[0]]
    return False, (f"key {key!r} holds target layer {others[0]}'s K/V, not layer {j}'s" if others
                   else f"key {key!r} does not hold target layer {j}'s K/V")
