"""``surgery.hf.speculative_decoding``: greedy draft-then-verify as a transformers decoding method.

    out = target.generate(input_ids, assistant_model=draft, custom_generate=surgery.hf.speculative_decoding,
                          max_new_tokens=64, do_sample=False, num_assistant_tokens=3)

transformers 5.x accepts a callable ``custom_generate`` and calls it where it would call its own
decoding method, after preparing the generation config, logits processors and stopping criteria
(generation/utils.py, ``generate`` step 9). Output equals plain greedy ``generate`` token for token:
the target verifies every drafted token; the draft (and its KV map) only decides how many target
forwards are saved.

The draft reads the target's K/V exactly as in transformers' own MTP generation: the target's
forward returns ``shared_kv_states`` (``return_shared_kv_states=True``) and the assistant reads
``shared_kv_states[self_attn.layer_type]``. A map wired by ``surgery.apply(...)`` is part of that
contract (surgery/live/kvrouting.py), so explicit, non-default maps are honoured here too.

Speed (what the loop does per round of k drafted tokens): k draft forwards and one target forward
over k+1 tokens, no host synchronisation until the round's acceptance is known, then ONE transfer
(``tolist`` of the target's k+1 greedy tokens and the accepted count). Tokens stay on the device
between draft steps; stopping criteria transformers built for EOS and max length are evaluated on
that host list, not on device tensors. On CUDA the k draft steps are one CUDA graph over fixed K/V
buffers fed only the newly committed positions (surgery/hf/draftgraph.py; ``draft_mode``), and the
target's verify step is one CUDA graph per k over a static KV cache that a rejection rewinds by
position, no copy (surgery/hf/verifygraph.py; ``verify_mode``). What each part ran, or why it fell
back, is in ``last_stats`` (``draft_path``, ``verify_path``). What the loop takes from transformers'
internals, and the refusal where a release moved them (SRG436), is surgery/hf/compat.py.
"""
from __future__ import annotations

import sys
import warnings
import weakref
from dataclasses import dataclass, field

import torch

from ..text.diagnostics import SurgeryError, diag
from ..guard.counts import Counts
from . import compat, draftgraph, fastdraft, verifygraph
from ..live.kvrouting import publisher_key
from ..live.paths import get_path, layers_path


@dataclass
class RoundStats:
    """What the last call did (``speculative_decoding.last_stats``): drafted / accepted tokens and
    target forwards, for benchmarks and the CLI's decoding check; per-draft counts for the guard."""

    drafted: int = 0
    accepted: int = 0
    target_forwards: int = 0
    draft_forwards: int = 0
    rounds: int = 0
    tokens: list[int] = field(default_factory=list)
    draft_path: str | None = None  # HOISTED, or why the assistant's own forward ran each step
    verify_path: str | None = None  # how the target's verify forward ran (surgery/hf/verifygraph.py), or why not
    # one (drafted, accepted) pair per round, in order: the per-draft counts the acceptance guard reads
    # (surgery/guard/run.py), as vLLM's SpecDecodingStats.observe_draft takes them
    per_draft: list[tuple[int, int]] = field(default_factory=list)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    def counts(self):
        """Per-position counts of the call (surgery.guard.counts.Counts: drafts, drafted and accepted at each
        position), vLLM's "Per-position acceptance rate" from ``counts().per_position()``."""
        out = Counts()
        for drafted, accepted in self.per_draft:
            out.observe(drafted, accepted)
        return out


HOISTED = "hoisted (surgery/hf/fastdraft.py, checked against draft(...))"
_DRAFT_PATHS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _choose_draft_path(draft, first_inputs, kv, position) -> str:
    """HOISTED when fastdraft's step reproduces ``draft(...)`` on this draft (checked once per draft
    object, on the first real input), else "transformers forward: <why>" (and a warning: slower,
    never wrong)."""
    path = _DRAFT_PATHS.get(draft)
    if path is None:
        reason = fastdraft.self_check(draft, first_inputs, kv, position)
        path = HOISTED if reason is None else f"transformers forward: {reason}"
        if reason is not None:
            warnings.warn(f"surgery.hf.speculative_decoding: draft steps run through the assistant's own forward "
                          f"(slower): {reason}", stacklevel=4)
        _DRAFT_PATHS[draft] = path
    return path


def _from_generate_call(model, name: str):
    """``assistant_model`` / ``streamer`` of the ``generate`` call that invoked us.

    transformers 5.19 does not pass them to a callable ``custom_generate``: its
    ``_extract_generation_mode_kwargs`` replaces the mode arguments (assistant_model, streamer) by
    the callable's own extra keyword arguments. They are still locals of ``generate``, a few frames
    up; we take them from the ``generate`` frame whose ``self`` is this very model."""
    frame = sys._getframe(2)
    for _ in range(12):
        if frame is None:
            return None
        if frame.f_code.co_name == "generate" and frame.f_locals.get("self") is model:
            return frame.f_locals.get(name)
        frame = frame.f_back
    return None


def _refuse(code: str, message: str) -> SurgeryError:
    return SurgeryError(diag(code, message))


def _check_settings(input_ids, generation_config, model_kwargs) -> None:
    if input_ids.dim() != 2 or input_ids.shape[0] != 1:
        raise _refuse("SRG430", f"batch size 1 only, got input_ids of shape {tuple(input_ids.shape)}")
    mask = model_kwargs.get("attention_mask")
    if mask is not None and not bool((mask == 1).all()):
        raise _refuse("SRG430", "the attention mask has padding; give the unpadded prompt")
    gc = generation_config
    if gc is not None:
        wrong = []
        if getattr(gc, "do_sample", False):
            wrong.append("do_sample=True")
        if (getattr(gc, "num_beams", 1) or 1) > 1:
            wrong.append(f"num_beams={gc.num_beams}")
        for flag in ("output_scores", "output_logits", "output_attentions", "output_hidden_states"):
            if getattr(gc, flag, False):
                wrong.append(f"{flag}=True")
        if wrong:
            raise _refuse("SRG431", "speculative_decoding is greedy and returns sequences only; not supported: "
                          + ", ".join(wrong))
    past = model_kwargs.get("past_key_values", model_kwargs.get("cache"))
    if past is not None and hasattr(past, "get_seq_length") and past.get_seq_length() > 0:
        raise _refuse("SRG431", "a pre-filled past_key_values cannot be continued; pass the whole prompt")


def check_wired(target, draft) -> None:
    """Refuse a draft that cannot run against this target: placeholder embedding (SRG432), or a
    draft layer reading a key the target does not publish (SRG434: it would crash mid-generation
    with a KeyError, or, worse, read a key someone else filled)."""
    if draft is None:
        raise _refuse("SRG432", "no assistant_model was given")
    emb = draft.get_input_embeddings()
    want = getattr(draft.config, "backbone_hidden_size", None)
    if want is not None and getattr(emb, "embedding_dim", None) != want:
        raise _refuse("SRG432", f"draft input embedding has width {getattr(emb, 'embedding_dim', None)}, expected the "
                      f"target's ({want}): the draft still has its placeholder embedding (apply the recipe first)")

    target_layers = get_path(target, layers_path("hf", target, "target"))  # also multimodal targets
    published = {publisher_key(layer.self_attn) for layer in target_layers} - {None}
    for i, layer in enumerate(get_path(draft, layers_path("hf", draft, "draft"))):
        key = layer.self_attn.layer_type
        if getattr(layer.self_attn, "is_kv_shared_layer", False) and key not in published:
            raise _refuse("SRG434", f"draft layer {i} reads shared_kv_states[{key!r}], which the target does not "
                          f"publish (it publishes {sorted(published)}); re-apply the recipe to this pair")


def _num_draft_tokens(num_draft_tokens, generation_config, draft) -> int:
    """The argument, else the call's ``num_assistant_tokens`` (generate(..., num_assistant_tokens=k)
    or the target's generation config), else the assistant's (what transformers' MTP path reads)."""
    k = num_draft_tokens
    if k is None and generation_config is not None:
        k = getattr(generation_config, "num_assistant_tokens", None)
    if k is None:
        k = getattr(getattr(draft, "generation_config", None), "num_assistant_tokens", None)
    if k is None or int(k) < 1:
        raise _refuse("SRG431", f"the number of draft tokens must be >= 1, got {k}")
    return int(k)


class _Stops:
    """Stopping criteria as host-side checks. transformers' MaxLengthCriteria and EosTokenCriteria
    are read once (their limits) and applied to the round's new tokens on the host; any other
    criterion is called per new token on the sequence, exactly as the greedy loop would."""

    def __init__(self, stopping_criteria, generation_config, prompt_len: int):
        from transformers.generation.stopping_criteria import EosTokenCriteria, MaxLengthCriteria

        self.max_length = getattr(generation_config, "max_length", None)
        max_new = getattr(generation_config, "max_new_tokens", None)
        if max_new is not None:  # takes precedence over max_length, as in generate()
            self.max_length = prompt_len + max_new
        self.eos: set[int] = set()
        self.other = []
        for c in stopping_criteria or []:
            if isinstance(c, MaxLengthCriteria):
                self.max_length = c.max_length if self.max_length is None else min(self.max_length, c.max_length)
            elif isinstance(c, EosTokenCriteria):
                self.eos.update(int(t) for t in torch.as_tensor(c.eos_token_id).flatten().tolist())
            else:
                self.other.append(c)
        if self.max_length is None:
            raise _refuse("SRG431", "no max_length / max_new_tokens: generation would never stop")
        self.prompt_len = prompt_len

    def budget(self, generated: int) -> int:
        return self.max_length - self.prompt_len - generated

    def cut(self, new: list[int], generated: int, sequence_fn) -> tuple[list[int], bool]:
        """The prefix of ``new`` greedy would have produced before stopping, and whether it stops."""
        room = self.budget(generated)
        stop = False
        if len(new) >= room:
            new, stop = new[:room], True
        for i, tok in enumerate(new):
            if tok in self.eos:
                return new[: i + 1], True
            if self.other:
                seq = sequence_fn(new[: i + 1])
                if any(bool(c(seq, None).all()) for c in self.other):
                    return new[: i + 1], True
        return new, stop


DRAFT_MODES = ("auto", "graph", "static", "hoisted")


class _Drafter:
    """Who drafts a call's rounds, decided on its first round and kept: the static-buffer runner of
    surgery/hf/draftgraph.py (one CUDA graph per round on the GPU, eager on the CPU), else the
    hoisted per-step path (fastdraft.step), else the assistant's own forward. ``mode``: "auto"
    (graph on CUDA, hoisted on the CPU), "graph", "static" (buffers, no graph: what the CPU tests
    exercise of the graph's body) or "hoisted" (the per-step path of issue 47)."""

    def __init__(self, draft, embed, k: int, max_length: int, stats: RoundStats, mode: str | None):
        mode = mode or "auto"
        if mode not in DRAFT_MODES:
            raise _refuse("SRG431", f"draft_mode must be one of {', '.join(DRAFT_MODES)}, got {mode!r}")
        self.draft, self.embed, self.k, self.max_length, self.stats, self.mode = draft, embed, k, max_length, stats, mode
        self.runner = None
        self.hoisted = None

    def _decide(self, published, committed, position, bonus, hidden):
        first = torch.cat([self.embed(bonus), hidden], dim=-1)
        kv = {key: (v[0][:, :, :committed], v[1][:, :, :committed]) for key, v in published.items()}
        path = _choose_draft_path(self.draft, first, kv, position)
        self.hoisted = path == HOISTED
        mode = self.mode
        if mode == "auto":  # the CPU is not launch-bound the same way: the measured per-step path stays
            mode = "graph" if first.device.type == "cuda" else "hoisted"
        if self.hoisted and mode != "hoisted":
            graph = mode == "graph"
            self.runner, why = draftgraph.runner_for(self.draft, self.embed, published, self.k, self.max_length,
                                                     first, bonus, hidden, committed, graph=graph)
            if self.runner is not None:
                self.runner.reset()
                path = why
            else:
                path = f"{HOISTED}; {why}"
        self.stats.draft_path = path

    def round(self, published: dict, committed: int, position, bonus, hidden, k_round: int):
        """The round's k_round drafted tokens [1, k_round], on the device with no host sync: step 1
        from [embed(bonus) ; the target's hidden state], later steps from the draft's own token and
        hidden state, all at `position`, reading the target's K/V of the `committed` positions."""
        if self.stats.draft_path is None:
            self._decide(published, committed, position, bonus, hidden)
        if self.runner is not None:
            self.runner.sync(published, committed)  # copies only the newly committed positions
            return self.runner.run(bonus, hidden, committed)[:, :k_round]
        kv = {key: (v[0][:, :, :committed], v[1][:, :, :committed]) for key, v in published.items()}
        tok, h, drafted = bonus, hidden, []
        first = torch.cat([self.embed(tok), h], dim=-1)
        if self.hoisted:
            masks, rope = fastdraft.prepare_round(self.draft, kv, position, first)
        for i in range(k_round):  # no host sync in here
            inputs = first if i == 0 else torch.cat([self.embed(tok), h], dim=-1)
            if self.hoisted:
                tok, h = fastdraft.step(self.draft, inputs, kv, position, masks, rope)
            else:
                tok, h = fastdraft.reference_step(self.draft, inputs, kv, position)
            drafted.append(tok)
        return torch.cat(drafted, dim=1)


@torch.no_grad()
def _decode(model, draft, input_ids, k: int, stops: "_Stops", processors, streamer, stats: RoundStats,
            accept_all: bool = False, draft_mode: str | None = None, verify_mode: str | None = None):
    """The loop. ``accept_all`` (benchmarks only: bench/gpu/hf_generate_gpu.py's round-cost model)
    accepts every draft whatever the target says: the output is then NOT greedy's, but each round
    does exactly the work of a fully accepted round. Returns (tokens, verifier, valid): the verify
    path's cache holds the K/V of the first ``valid`` positions (``verifier.export``)."""
    prompt_len = input_ids.shape[1]
    tokens: list[int] = []

    def sequence(extra: list[int]) -> torch.Tensor:
        return torch.tensor([input_ids[0].tolist() + tokens + extra], device=input_ids.device)

    def emit(new: list[int]) -> bool:
        new, stop = stops.cut(new, len(tokens), sequence)
        tokens.extend(new)
        if streamer is not None and new:
            streamer.put(torch.tensor(new))
        return stop

    embed = draft.get_input_embeddings()
    drafter = _Drafter(draft, embed, k, stops.max_length, stats, draft_mode)
    verifier, stats.verify_path = verifygraph.verifier_for(model, k, stops.max_length, input_ids.device, verify_mode)
    logits, hidden, published = verifier.prefill(input_ids)
    stats.target_forwards += 1
    if processors is not None:
        logits = processors(input_ids, logits)
    bonus = logits.argmax(-1, keepdim=True)  # [1, 1] on the device
    if published is None:
        raise _refuse("SRG433", f"{type(model).__name__} returned no shared_kv_states (return_shared_kv_states=True): "
                      f"transformers {compat.release()} lacks the Gemma 4 KV-sharing contract")
    committed = valid = prompt_len  # positions whose K/V is in the cache
    done = emit([int(bonus)]) if stops.budget(0) > 0 else True
    position = torch.empty((1, 1), dtype=torch.long, device=input_ids.device)
    pad = torch.zeros((1, k), dtype=torch.long, device=input_ids.device)

    while not done:
        k_round = min(k, stops.budget(len(tokens)))  # never draft past the length limit
        position.fill_(committed)
        drafts = drafter.round(published, committed, position, bonus, hidden, k_round)
        step = torch.cat([bonus, drafts], dim=1)
        if k_round < k and isinstance(verifier, verifygraph.StaticVerify):
            # the last round, cut by the length limit: the k + 1-token step (its graph) on padding; what the
            # padding writes past the kept positions is masked and overwritten like a rejected draft's K/V
            step = torch.cat([step, pad[:, : k - k_round]], dim=1)
        logits, hid, published = verifier.verify(step, committed, k)
        logits = logits[: k_round + 1]
        if processors is not None:  # the greedy loop processes each step's logits with its prefix
            prefix = sequence([])
            cand = torch.cat([prefix, drafts], dim=1)
            logits = torch.cat([processors(cand[:, : prefix.shape[1] + i], logits[i : i + 1])
                                for i in range(k_round + 1)])
        greedy = logits.argmax(dim=-1)  # the target's choice after bonus, d1, ..., dk
        matched = (drafts[0] == greedy[:k_round]).cumprod(0).sum()
        if accept_all:
            host = torch.cat([greedy, matched.view(1), drafts[0]]).tolist()
            m, host = k_round, host[k_round + 2 :] + host[k_round : k_round + 1]
        else:
            host = torch.cat([greedy, matched.view(1)]).tolist()  # the round's one host sync
            m = host[-1]
        stats.rounds += 1
        stats.per_draft.append((k_round, m))
        stats.drafted += k_round
        stats.accepted += m
        stats.draft_forwards += k_round
        stats.target_forwards += 1
        valid = committed + 1 + m
        done = emit(host[: m + 1])  # accepted drafts (== greedy) and the target's next token
        if done:
            break
        verifier.rewind(k_round - m)  # drop (DynamicCache) or mask (static) the rejected drafts' K/V
        committed += 1 + m
        bonus = greedy[m : m + 1].view(1, 1)
        hidden = hid[:, m : m + 1]

    stats.tokens = list(tokens)
    return tokens, verifier, valid


@torch.no_grad()
def speculative_decoding(model, input_ids, logits_processor=None, stopping_criteria=None, generation_config=None,
                         synced_gpus: bool = False, streamer=None, assistant_model=None,
                         num_draft_tokens: int | None = None, draft_mode: str | None = None,
                         verify_mode: str | None = None, **model_kwargs):
    """Greedy speculative decoding with a (wired) Gemma 4 MTP assistant, as a transformers decoding
    method: ``target.generate(ids, assistant_model=draft, custom_generate=speculative_decoding, ...)``.

    Also callable directly: ``speculative_decoding(target, ids, assistant_model=draft,
    generation_config=GenerationConfig(max_new_tokens=...))``. Returns the
    sequences tensor (prompt + new tokens) like ``generate``; with ``return_dict_in_generate`` a
    ``GenerateDecoderOnlyOutput`` with ``sequences``. Statistics of the call are left in
    ``speculative_decoding.last_stats``. ``draft_mode`` (also as a ``generate`` keyword): how the
    draft steps run, "auto" (default: one CUDA graph per round on the GPU, the per-step path on the
    CPU), "graph", "static" or "hoisted" (surgery/hf/generate.py ``_Drafter``). ``verify_mode``
    (likewise): how the target's verify forward runs, "auto" (default: one CUDA graph per k over a
    static cache on the GPU, the DynamicCache on the CPU, where the static one measured no faster),
    "graph", "static" or "dynamic"
    (surgery/hf/verifygraph.py). Neither changes the output, only the speed; each part falls back
    on its own and says why (``last_stats.draft_path`` / ``verify_path``).
    """
    draft = assistant_model if assistant_model is not None else _from_generate_call(model, "assistant_model")
    if streamer is None:
        streamer = _from_generate_call(model, "streamer")
    input_ids = torch.as_tensor(input_ids, device=model.device)
    if input_ids.dim() == 1:
        input_ids = input_ids.unsqueeze(0)
    _check_settings(input_ids, generation_config, model_kwargs)
    if (verify_mode or "auto") not in verifygraph.MODES:
        raise _refuse("SRG431", f"verify_mode must be one of {', '.join(verifygraph.MODES)}, got {verify_mode!r}")
    compat.check_release(model, draft)
    check_wired(model, draft)
    k = _num_draft_tokens(num_draft_tokens, generation_config, draft)
    stops = _Stops(stopping_criteria, generation_config, input_ids.shape[1])
    processors = logits_processor if logits_processor else None
    stats = RoundStats()
    speculative_decoding.last_stats = stats

    tokens, verifier, valid = _decode(model, draft, input_ids, k, stops, processors, streamer, stats,
                                      draft_mode=draft_mode, verify_mode=verify_mode)
    if streamer is not None:
        streamer.end()
    sequences = torch.cat([input_ids, torch.tensor([tokens], dtype=input_ids.dtype, device=input_ids.device)], dim=1)
    if getattr(generation_config, "return_dict_in_generate", False):
        return compat.generate_output(sequences, verifier.export(valid))
    return sequences


speculative_decoding.last_stats = None
