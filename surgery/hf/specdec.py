"""Greedy speculative decoding with a Gemma 4 MTP assistant, on plain HF models: list-in/list-out
helpers around the one loop in surgery/hf/generate.py, and the plain greedy baseline.

The loop is built only on model forwards and transformers' cache classes (``DynamicCache`` and its
``crop``; on CUDA a static cache of our own over ``StaticLayer``), so it runs on 5.17 to 5.25 alike
(transformers' own assisted generation is broken for this pair in 5.19); what it takes from
transformers' internals is surgery/hf/compat.py.

MTP convention (as in transformers' ``SinglePositionMultiTokenCandidateGenerator`` after prefill):
with committed context x[0..L-1] (all in the target's cache) and the target's own next token
``b`` (the "bonus", not yet run through the target), draft step 1 gets
``[embed(b) ; h_{L-1}]`` (target input embedding of b, target's last hidden state at L-1) at
position ``L`` and reads the target's K/V of x[0..L-1]. Later steps feed back the draft's own
argmax token and its own projected hidden state at the same position: the draft writes no KV.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch



@dataclass
class SpecResult:
    tokens: list[int]
    drafted: int = 0
    accepted: int = 0
    target_forwards: int = 0
    draft_forwards: int = 0
    wall_s: float = 0.0
    per_draft: list = field(default_factory=list)  # (drafted, accepted) per round: the guard's input

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


@torch.no_grad()
def greedy_generate(target, input_ids, max_new_tokens: int) -> list[int]:
    """Plain greedy decoding with a KV cache, one target forward per token (the baseline)."""
    device = target.device
    ids = _as_batch(input_ids, device)
    tokens: list[int] = []
    if max_new_tokens <= 0:
        return tokens
    from . import compat

    out = target(input_ids=ids, use_cache=True, logits_to_keep=1)
    cache = {compat.cache_kwarg(target): compat.output_cache(out)}
    while True:
        tok = int(out.logits[0, -1].argmax())
        tokens.append(tok)
        if len(tokens) >= max_new_tokens:
            return tokens
        step = torch.tensor([[tok]], device=device)
        out = target(input_ids=step, use_cache=True, logits_to_keep=1, **cache)


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
def speculative_generate(target, draft, input_ids, max_new_tokens: int, num_draft_tokens: int,
                         verify_mode: str | None = None) -> SpecResult:
    """Greedy draft-then-verify; the output equals :func:`greedy_generate` token for token whatever
    the draft does (a bad draft or KV map only lowers ``acceptance_rate``). The loop itself is
    :func:`surgery.hf.generate.speculative_decoding` (the transformers decoding method); this wrapper
    takes plain token lists and reports the round statistics. EOS does not stop it (like
    :func:`greedy_generate`): exactly ``max_new_tokens`` tokens. ``verify_mode``: as for
    ``speculative_decoding`` (bench/hf_round_profile.py compares them)."""
    from transformers import GenerationConfig

    from .generate import speculative_decoding

    if num_draft_tokens < 1:
        raise ValueError("num_draft_tokens must be >= 1")
    check_draft_input_embedding(draft)
    ids = _as_batch(input_ids, target.device)
    if max_new_tokens <= 0:
        return SpecResult(tokens=[])
    start = time.perf_counter()
    config = GenerationConfig(max_length=ids.shape[1] + max_new_tokens, do_sample=False)
    speculative_decoding(target, ids, generation_config=config, assistant_model=draft,
                         num_draft_tokens=num_draft_tokens, verify_mode=verify_mode)
    stats = speculative_decoding.last_stats
    return SpecResult(tokens=stats.tokens, drafted=stats.drafted, accepted=stats.accepted,
                      target_forwards=stats.target_forwards, draft_forwards=stats.draft_forwards,
                      wall_s=time.perf_counter() - start, per_draft=list(stats.per_draft))


def decode_check(target, draft, prompts: list[list[int]], max_new_tokens: int, num_draft_tokens: int) -> dict:
    """Speculative vs plain greedy on every prompt; the totals the report shows, and the per-draft
    counts of each prompt (``per_draft``: [[drafted, accepted], ...] per prompt) the guard judges."""
    identical = True
    per_draft: list[list[tuple[int, int]]] = []
    drafted = accepted = target_fwd = greedy_fwd = tokens = 0
    spec_s = greedy_s = 0.0
    mismatches = []
    for i, ids in enumerate(prompts):
        t0 = time.perf_counter()
        ref = greedy_generate(target, ids, max_new_tokens)
        greedy_s += time.perf_counter() - t0
        res = speculative_generate(target, draft, ids, max_new_tokens, num_draft_tokens)
        spec_s += res.wall_s
        if list(res.tokens) != list(ref):
            identical = False
            mismatches.append(i)
        drafted += res.drafted
        accepted += res.accepted
        per_draft.append(list(res.per_draft))
        target_fwd += res.target_forwards
        greedy_fwd += len(ref)
        tokens += len(res.tokens)
    return {
        "identical": identical, "prompts": len(prompts), "tokens": tokens, "drafted": drafted, "accepted": accepted,
        "acceptance_rate": (accepted / drafted) if drafted else 0.0, "num_draft_tokens": num_draft_tokens,
        "target_forwards": target_fwd, "greedy_target_forwards": greedy_fwd,
        "target_forwards_saved": greedy_fwd - target_fwd, "wall_s": round(spec_s, 4),
        "greedy_wall_s": round(greedy_s, 4), "mismatched_prompts": mismatches, "per_draft": per_draft,
    }
