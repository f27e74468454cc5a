"""Greedy speculative decoding with a Gemma 4 MTP assistant, on plain HF models.

Our own loop (transformers' assisted generation is broken for this pair in 5.19), built only on
model forwards, ``DynamicCache`` and ``DynamicCache.crop`` so it runs on 5.17 and 5.19 alike.

MTP convention (as in transformers' ``SinglePositionMultiTokenCandidateGenerator`` after prefill):
with committed context x[0..L-1] (all in the target's cache) and the target's own next token
``b`` (the "bonus", not yet run through the target), draft step 1 gets
``[embed(b) ; h_{L-1}]`` (target input embedding of b, target's last hidden state at L-1) at
position ``L`` and reads the target's K/V of x[0..L-1]. Later steps feed back the draft's own
argmax token and its own projected hidden state at the same position: the draft writes no KV.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from .kvrouting import build_shared_kv_states


@dataclass
class SpecResult:
    tokens: list[int]
    drafted: int = 0
    accepted: int = 0
    target_forwards: int = 0
    draft_forwards: int = 0
    wall_s: float = 0.0

    @property
    def acceptance_rate(self) -> float:
        """Accepted / drafted tokens (0.0 when nothing was drafted)."""
        return self.accepted / self.drafted if self.drafted else 0.0


def _as_batch(input_ids, device) -> torch.Tensor:
    ids = torch.as_tensor(input_ids, dtype=torch.long, device=device)
    if ids.dim() == 1:
        ids = ids.unsqueeze(0)
    if ids.shape[0] != 1:
        raise ValueError(f"batch size 1 only, got input_ids of shape {tuple(ids.shape)}")
    if ids.shape[1] == 0:
        raise ValueError("empty prompt")
    return ids


def _new_cache():
    """A cache keeping full-length K/V for every layer (no config → no sliding truncation), so
    the draft can read any target layer and ``crop`` can roll back past the window."""
    from transformers import DynamicCache

    return DynamicCache()


def _target_step(target, ids: torch.Tensor, cache, want_hidden: bool = False):
    return target(
        input_ids=ids,
        past_key_values=cache,
        use_cache=True,
        output_hidden_states=want_hidden,
    )


@torch.no_grad()
def greedy_generate(target, input_ids, max_new_tokens: int) -> list[int]:
    """Plain greedy decoding with a KV cache, one target forward per token (the baseline)."""
    device = target.device
    ids = _as_batch(input_ids, device)
    tokens: list[int] = []
    if max_new_tokens <= 0:
        return tokens
    out = target(input_ids=ids, use_cache=True, logits_to_keep=1)
    cache = out.past_key_values
    while True:
        tok = int(out.logits[0, -1].argmax())
        tokens.append(tok)
        if len(tokens) >= max_new_tokens:
            return tokens
        step = torch.tensor([[tok]], device=device)
        out = target(input_ids=step, past_key_values=cache, use_cache=True, logits_to_keep=1)


def check_draft_input_embedding(draft) -> None:
    """Fail loudly when the draft still has its placeholder input embedding.

    The assistant's own ``embed_tokens`` is ``hidden_size`` wide (it doubles as the tied lm_head);
    ``pre_projection`` expects ``2 * backbone_hidden_size`` = [target embedding ; target hidden].
    Until the target's embedding module is wired in, the concatenation has the wrong width.
    """
    emb = draft.get_input_embeddings()
    want = draft.config.backbone_hidden_size
    got = getattr(emb, "embedding_dim", None)
    if got != want:
        raise ValueError(
            f"draft input embedding has width {got}, expected the target's ({want}): the draft still "
            "has its placeholder embedding. Share the target's input embedding module with the draft "
            "(draft.set_input_embeddings(target.get_input_embeddings())) before drafting."
        )


@torch.no_grad()
def draft_tokens(draft, shared_kv_states: dict, token: int, hidden: torch.Tensor, position: int, k: int) -> list[int]:
    """Run the MTP loop for ``k`` steps from (token, target hidden) at a constant position."""
    embed = draft.get_input_embeddings()
    device = hidden.device
    position_ids = torch.tensor([[position]], device=device)
    tok = torch.tensor([[token]], device=device)
    out_tokens = []
    for _ in range(k):
        inputs_embeds = torch.cat([embed(tok), hidden], dim=-1)
        out = draft(inputs_embeds=inputs_embeds, position_ids=position_ids, shared_kv_states=shared_kv_states)
        tok = out.logits[:, -1:].argmax(dim=-1)
        hidden = out.last_hidden_state[:, -1:]  # already post_projection'd to backbone width
        out_tokens.append(int(tok))
    return out_tokens


@torch.no_grad()
def speculative_generate(target, draft, input_ids, max_new_tokens: int, num_draft_tokens: int) -> SpecResult:
    """Greedy draft-then-verify. The output equals :func:`greedy_generate` token for token
    whatever the draft does (a bad draft or KV map only lowers ``acceptance_rate``)."""
    if num_draft_tokens < 1:
        raise ValueError("num_draft_tokens must be >= 1")
    check_draft_input_embedding(draft)
    start = time.perf_counter()
    device = target.device
    ids = _as_batch(input_ids, device)
    res = SpecResult(tokens=[])
    if max_new_tokens <= 0:
        return res

    cache = _new_cache()
    out = _target_step(target, ids, cache, want_hidden=True)
    res.target_forwards += 1
    committed = ids.shape[1]  # positions whose K/V is in the cache
    bonus = int(out.logits[0, -1].argmax())
    hidden = out.hidden_states[-1][:, -1:]  # post-norm last hidden state (what MTP consumes)

    res.tokens.append(bonus)
    while (remaining := max_new_tokens - len(res.tokens)) > 0:
        k = min(num_draft_tokens, remaining)  # never draft past max_new_tokens
        kv = build_shared_kv_states(cache, target.config, draft, length=committed)
        drafts = draft_tokens(draft, kv, bonus, hidden, committed, k)
        res.drafted += k
        res.draft_forwards += k

        verify_ids = torch.tensor([[bonus, *drafts]], device=device)
        out = _target_step(target, verify_ids, cache, want_hidden=True)
        res.target_forwards += 1
        greedy = out.logits[0].argmax(dim=-1).tolist()  # target's choice after bonus, d1, ..., dk
        m = 0
        while m < k and drafts[m] == greedy[m]:
            m += 1
        res.accepted += m
        res.tokens.extend(drafts[:m])
        if len(res.tokens) >= max_new_tokens:
            break

        # Keep K/V of bonus + accepted drafts; drop the rejected tail (never call crop(0):
        # older transformers read a non-negative argument as an absolute length).
        rejected = k - m
        if rejected:
            cache.crop(-rejected)
        committed += 1 + m
        bonus = greedy[m]
        hidden = out.hidden_states[-1][:, m : m + 1]
        res.tokens.append(bonus)

    res.wall_s = time.perf_counter() - start
    return res
