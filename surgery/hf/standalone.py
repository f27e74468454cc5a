"""Standalone draft models (recipe ``draft-model``) in HF transformers.

A standalone draft is a full causal LM with its own embedding, layers, KV cache and lm_head,
sharing the target's vocabulary (e.g. Llama 3.2 1B for Llama 3.1 8B). transformers runs such a
pair with its standard assisted generation (``target.generate(ids, assistant_model=draft)``,
``AssistedCandidateGenerator``); ``surgery apply draft-model`` loads the pair generically, applies
and verifies the recipe (its checks: vocabulary, tokenizer ids, the draft's own embedding and head),
then proves it by running that very path against plain greedy ``generate``.
"""
from __future__ import annotations

import contextlib
import time
from pathlib import Path

from ..text.diagnostics import SurgeryError, diag
from ..tinymodels.bytevocab import VOCAB_SIZE, encode

# Draft model types that are NOT standalone: they read the target's K/V or hidden states and run in
# our MTP loop (surgery/hf/generate.py) instead of transformers' standard assisted generation.
MTP_DRAFT_TYPES = ("gemma4_assistant",)


def is_standalone(draft_facts) -> bool:
    """True when the draft is a complete causal LM of its own (no MTP / KV-sharing assistant)."""
    return draft_facts.model_type not in MTP_DRAFT_TYPES


def load_standalone_pair(target_dir, draft_dir, device="cpu", dtype=None):
    """(target, draft) with ``AutoModelForCausalLM``: safetensors only, no remote code, eval mode."""
    import torch
    from transformers import AutoModelForCausalLM

    from ..live.hf import record_missing_keys

    kwargs = dict(use_safetensors=True, trust_remote_code=False, dtype=dtype or torch.float32, output_loading_info=True)
    models = []
    for folder in (target_dir, draft_dir):
        model, info = AutoModelForCausalLM.from_pretrained(str(folder), **kwargs)
        # what the checkpoint did not bring (read by `must_exist` and `if_draft_has_own`)
        record_missing_keys(model, info.get("missing_keys", ()))
        models.append(model.to(device).eval())
    return models[0], models[1]


def prompts_for(target_dir, texts, vocab_size: int) -> tuple[list[list[int]], str]:
    """Token ids of ``texts``: with the target folder's tokenizer when it has one, else the built-in
    byte-level ids (valid for any vocabulary of at least 264 ids; said in the report)."""
    folder = Path(target_dir)
    if any((folder / f).is_file() for f in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")):
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False)
        return [tok(t).input_ids for t in texts], f"tokenizer of {folder}"

    if vocab_size < VOCAB_SIZE:
        raise SurgeryError(diag("SRG011", f"{folder} has no tokenizer and a vocabulary of {vocab_size} ids: the built-in "
                                f"byte-level prompts need {VOCAB_SIZE}", hint="add the tokenizer files to the target folder"))
    return [encode(t) for t in texts], "built-in byte-level ids (no tokenizer in the target folder)"


def check_same_vocabulary(target, draft) -> None:
    """SRG435 unless the draft's output layer spans the target's vocabulary (live modules)."""
    t_vocab = target.get_output_embeddings().weight.shape[0]
    d_vocab = draft.get_output_embeddings().weight.shape[0]
    if t_vocab != d_vocab:
        raise SurgeryError(diag("SRG435", f"the draft's lm_head has {d_vocab} rows, the target's {t_vocab}"))


@contextlib.contextmanager
def _counting(module, counter: list[int]):
    handle = module.register_forward_pre_hook(lambda *_: counter.__setitem__(0, counter[0] + 1))
    try:
        yield
    finally:
        handle.remove()


@contextlib.contextmanager
def _per_draft(target, sink: list):
    """Per-draft counts of transformers' assisted generation on ``target``: (drafted, accepted) per round.

    Where transformers counts them (generation/utils.py ``_assisted_decoding``, 5.x): each round ends
    with ``candidate_generator.update_candidate_strategy(input_ids, new_logits, n_matches)``, where
    ``n_matches`` is the accepted drafts (after the length / EOS cut) and ``new_logits`` holds the
    round's candidate_length + 1 positions. The candidate generator is built per ``generate`` call by
    ``target._get_candidate_generator``; it is wrapped on this model object only, for this block."""
    orig = target._get_candidate_generator

    def build(*args, **kwargs):
        generator = orig(*args, **kwargs)
        update = generator.update_candidate_strategy

        def update_candidate_strategy(input_ids, scores, num_matches):
            sink.append((int(scores.shape[1]) - 1, int(num_matches)))
            return update(input_ids, scores, num_matches)

        generator.update_candidate_strategy = update_candidate_strategy
        return generator

    target._get_candidate_generator = build
    try:
        yield
    finally:
        del target._get_candidate_generator


def assisted_check(target, draft, prompts: list[list[int]], max_new_tokens: int, num_draft_tokens: int) -> dict:
    """transformers' standard assisted generation vs plain greedy ``generate`` on every prompt.

    Counted with forward hooks: every draft forward proposes one token (drafted); every target
    forward of the assisted loop verifies a candidate run and yields accepted + 1 tokens, so
    ``accepted = tokens - target forwards`` (a lower bound when the last round is cut by the length
    limit). Per-draft counts (``per_draft``) come from transformers' own round bookkeeping
    (:func:`_per_draft`). Returns the same keys as the MTP decoding check."""
    import torch

    from .compat import check_assisted

    check_same_vocabulary(target, draft)
    check_assisted(target)  # SRG436 where the release moved the candidate generator the counts are read from
    gc = draft.generation_config
    gc.num_assistant_tokens, gc.num_assistant_tokens_schedule = num_draft_tokens, "constant"
    identical, mismatches, per_draft = True, [], []
    tokens = drafted = target_fwd = greedy_fwd = 0
    spec_s = greedy_s = 0.0
    for i, ids in enumerate(prompts):
        x = torch.tensor([ids], device=target.device)
        t_count, g_count, d_count = [0], [0], [0]
        with _counting(target, g_count):
            t0 = time.perf_counter()
            ref = target.generate(x, max_new_tokens=max_new_tokens, do_sample=False)
            greedy_s += time.perf_counter() - t0
        rounds: list = []
        with _counting(target, t_count), _counting(draft, d_count), _per_draft(target, rounds):
            t0 = time.perf_counter()
            out = target.generate(x, assistant_model=draft, max_new_tokens=max_new_tokens, do_sample=False)
            spec_s += time.perf_counter() - t0
        if not torch.equal(out, ref):
            identical = False
            mismatches.append(i)
        tokens += out.shape[1] - x.shape[1]
        per_draft.append(rounds)
        drafted += d_count[0]
        target_fwd += t_count[0]
        greedy_fwd += g_count[0]
    accepted = max(0, tokens - target_fwd)
    return {
        "method": "transformers assisted generation (AssistedCandidateGenerator)", "identical": identical,
        "prompts": len(prompts), "tokens": tokens, "drafted": drafted, "accepted": accepted,
        "acceptance_rate": accepted / drafted if drafted else 0.0, "num_draft_tokens": num_draft_tokens,
        "target_forwards": target_fwd, "greedy_target_forwards": greedy_fwd,
        "target_forwards_saved": greedy_fwd - target_fwd, "wall_s": round(spec_s, 4),
        "greedy_wall_s": round(greedy_s, 4), "mismatched_prompts": mismatches, "per_draft": per_draft,
    }
