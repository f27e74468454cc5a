"""One MTP draft step of a Gemma 4 assistant with the per-round work hoisted out of the step.

Why: at batch 1 every forward is dominated by fixed per-call work, not by the layers. The
assistant's ``forward`` rebuilds, on every draft step, things that are constant within a round
(the draft position is constant: the shared K/V, hence the masks and rotary embeddings, do not
change), and its centroid head (``use_ordered_embeddings``) ends in a ``.item()`` host sync. Here:

* per round (:func:`prepare_round`): the masks (the assistant's own ``create_attention_masks``)
  and the rotary embeddings (its own ``rotary_emb``), once;
* per step (:func:`step`): ``pre_projection`` → the decoder layers → ``norm`` → ``post_projection``
  → argmax of the head. For the centroid head the argmax is taken over the selected candidates (no
  sync), ties resolved to the smallest vocabulary id exactly as ``argmax`` over the scattered
  full-vocabulary logits does.

These are transformers' own modules called in the order ``Gemma4AssistantForCausalLM.forward`` /
``Gemma4TextModel.forward`` call them. Because that order is transformers' code, not ours, the
first use on each draft object is checked against ``draft(...)`` itself (:func:`self_check`);
on any difference the loop uses ``draft(...)`` for that draft and says so in its statistics.
"""
from __future__ import annotations

import torch


def supported(draft) -> str | None:
    """None if the fast step applies to this draft, else why not."""
    inner = getattr(draft, "model", None)
    for attr in ("pre_projection", "post_projection", "lm_head", "create_attention_masks"):
        if not hasattr(draft, attr):
            return f"draft has no {attr}"
    if inner is None or not all(hasattr(inner, a) for a in ("layers", "norm", "rotary_emb", "config")):
        return "draft.model is not a Gemma 4 text model"
    if getattr(inner, "hidden_size_per_layer_input", 0):
        return "draft layers take per-layer inputs"
    return None


def prepare_round(draft, kv: dict, position: torch.Tensor, like: torch.Tensor):
    """(masks, rotary embeddings per layer type) for a round whose draft steps all sit at ``position``.
    ``like``: any [1, 1, 2 * backbone] input of the round (shape, dtype and device are what count)."""
    projected = draft.pre_projection(like)
    masks = draft.create_attention_masks(projected, None, kv)
    return masks, rotary(draft, position, projected)


def rotary(draft, position: torch.Tensor, like: torch.Tensor) -> dict:
    """The rotary embeddings (cos, sin) per layer type at ``position`` (the assistant's own
    ``rotary_emb``; ``like`` only gives dtype and device)."""
    inner = draft.model
    return {t: inner.rotary_emb(like, position, t) for t in set(inner.config.layer_types)}


def step(draft, inputs_embeds: torch.Tensor, kv: dict, position: torch.Tensor, masks, rope):
    """(token [1, 1], projected hidden [1, 1, backbone]) of one draft step, no host sync."""
    inner = draft.model
    types = inner.config.layer_types
    h = draft.pre_projection(inputs_embeds)
    for i, layer in enumerate(inner.layers[: inner.config.num_hidden_layers]):
        h = layer(h, None, shared_kv_states=kv, position_embeddings=rope[types[i]], attention_mask=masks[types[i]],
                  position_ids=position)
        if isinstance(h, tuple):
            h = h[0]
    h = inner.norm(h)
    return _argmax_token(draft, h), draft.post_projection(h)


def _argmax_token(draft, h: torch.Tensor) -> torch.Tensor:
    masked = getattr(draft, "masked_embedding", None) if getattr(draft.config, "use_ordered_embeddings", False) else None
    if masked is None:
        return draft.lm_head(h).argmax(dim=-1)
    # Gemma4AssistantMaskedEmbedder.forward up to the scatter: logits of the selected candidates only
    centroid_logits = masked.centroids(h)
    _, top = torch.topk(centroid_logits, k=masked.centroid_intermediate_top_k, dim=-1)
    per_cluster = masked.token_ordering.long().view(masked.num_centroids, masked.vocab_size_per_centroid)
    canonical = per_cluster[top].reshape(1, 1, -1)  # [1, 1, top_k * K] vocabulary ids
    weights = draft.lm_head.weight[canonical.reshape(-1)].view(1, 1, -1, masked.hidden_size)
    logits = (h.unsqueeze(-2) @ weights.transpose(-1, -2)).squeeze(-2)  # [1, 1, top_k * K]
    best = logits.max(dim=-1, keepdim=True).values
    ties = torch.where(logits == best, canonical, torch.full_like(canonical, masked.vocab_size))
    return ties.min(dim=-1).values  # [1, 1]: the smallest id among the maxima, as argmax would pick


def reference_step(draft, inputs_embeds, kv, position):
    """The same step through the assistant's own ``forward`` (transformers' code path)."""
    out = draft(inputs_embeds=inputs_embeds, position_ids=position, shared_kv_states=kv)
    return out.logits[:, -1:].argmax(dim=-1), out.last_hidden_state[:, -1:]


def self_check(draft, inputs_embeds, kv, position) -> str | None:
    """None if :func:`step` reproduces ``draft(...)`` on this input (same token, same hidden state
    to rounding), else what differed."""
    reason = supported(draft)
    if reason is not None:
        return reason
    try:
        masks, rope = prepare_round(draft, kv, position, inputs_embeds)
        tok, h = step(draft, inputs_embeds, kv, position, masks, rope)
    except Exception as exc:  # noqa: BLE001 - another transformers version: use its forward instead
        return f"{type(exc).__name__}: {exc}"
    ref_tok, ref_h = reference_step(draft, inputs_embeds, kv, position)
    if not torch.equal(tok, ref_tok):
        return f"token {tok.flatten().tolist()} != draft(...)'s {ref_tok.flatten().tolist()}"
    tol = 1e-5 if h.dtype == torch.float32 else 1e-2
    if not torch.allclose(h.float(), ref_h.float(), rtol=tol, atol=tol):
        return f"hidden state differs from draft(...)'s by {(h.float() - ref_h.float()).abs().max().item():.3g}"
    return None
