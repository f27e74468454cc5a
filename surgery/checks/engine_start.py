"""Limits vLLM enforces when it starts, checked from the two config.json files and the serving flags
(codes SRG340-SRG343; the rules are data: surgery/data/engine_rules.yaml `start_limits`, the
--kv-cache-dtype list surgery/data/vllm_engine_options.yaml `cache_dtypes`).

Why here: these are the refusals a user meets only after the download the tool exists to avoid
(issue 42, class 5). Each one names the limit the way vLLM names it, so the message found here is the
one `vllm serve` would print. tests/vllm/test_engine_start_oracle.py builds vLLM's own engine config
(EngineArgs.create_engine_config) for each case and holds these checks to it.

- SRG340: tp does not divide the attention heads, the target's or the draft's (vLLM checks the draft
  with its own parallel config, at the target's tp);
- SRG341: tp and the KV heads do not divide each other (QKVParallelLinear, in the worker);
- SRG342: --max-model-len above the target's derived length;
- SRG343: --kv-cache-dtype (or --draft-kv-cache-dtype) not one of vLLM's CacheDType values;
- SRG344: --pp > 1 on a target whose vLLM class is no SupportsPP.
"""
from __future__ import annotations

import os
from functools import lru_cache
from typing import Any

from ..diagnostics import WARNING, Diagnostic, Location, diag
from ..options import CheckOptions
from .inherit import derived_max_len, engine_rules, merge_overrides, rope_of, text_part
from ..resources import load_data


def limits() -> dict:
    return engine_rules()["start_limits"]


@lru_cache(maxsize=1)
def cache_dtypes() -> tuple[str, ...]:
    return tuple(load_data("data/vllm_engine_options.yaml")["cache_dtypes"]["values"])


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def attention_heads(f) -> int | None:
    """hf_text_config.num_attention_heads (model_arch_config_convertor.get_total_num_attention_heads)."""
    return _int(f.scalars.get("num_attention_heads"))


def kv_heads(f) -> int | None:
    """vLLM's get_total_num_kv_heads: the first KV-head key on the text config, else the attention heads."""
    text = text_part(f.raw)
    for key in limits()["kv_heads"]["kv_heads_keys"]:
        if _int(text.get(key)) is not None:
            return text[key]
    return _int(f.scalars.get("num_kv_heads")) or attention_heads(f)


def is_mla(f) -> bool:
    """model_arch_config_convertor.is_deepseek_mla: an MLA model type with kv_lora_rank (DeepSeek-V4's
    compressed layout: head_dim) set; MLA has no per-head K/V projection to split."""
    text = text_part(f.raw)
    types = set(limits()["kv_heads"]["mla_model_types"])
    if not ({f.model_type, f.text_model_type, text.get("model_type")} & types):
        return False
    if "compress_ratios" in text:
        return text.get("head_dim") is not None
    return text.get("kv_lora_rank") is not None


def _sides(draft, target, tp: int, draft_tp: int):
    """(side, facts, tp) for each model vLLM checks; an MTP draft read from the target's own config is the
    same numbers, checked once."""
    out = [("target", target, tp)]
    if not (draft.source == target.source or draft.raw == target.raw) or draft_tp != tp:
        out.append(("draft", draft, draft_tp))
    return out


def heads_check(draft, target, tp: int, draft_tp: int) -> list[Diagnostic]:
    rule = limits()["attention_heads"]
    out = []
    for side, f, size in _sides(draft, target, tp, draft_tp):
        heads = attention_heads(f)
        if heads is None or heads % size == 0:
            continue
        says = rule["vllm_says"].format(heads=heads, tp=size)
        who = "the draft (vLLM checks it at the draft's tp, the target's unless draft_tensor_parallel_size is 1)" \
            if side == "draft" else "the target"
        out.append(diag(rule["code"], f"{who}: {f.text_model_type or f.model_type} has {heads} attention heads, "
                        f"tp {size} does not divide them; vLLM refuses at start: \"{says}\" ({rule['source']})",
                        f.key_location("num_attention_heads"), _tp_hint(draft, target, tp)))
    return out


def kv_heads_check(draft, target, tp: int, draft_tp: int) -> list[Diagnostic]:
    rule = limits()["kv_heads"]
    out = []
    for side, f, size in _sides(draft, target, tp, draft_tp):
        kv = kv_heads(f)
        if kv is None or is_mla(f):
            continue
        num, den = (size, kv) if size >= kv else (kv, size)
        if num % den == 0:
            continue
        says = rule["vllm_says"].format(numerator=num, denominator=den)
        out.append(diag(rule["code"], f"the {side}: {f.text_model_type or f.model_type} has {kv} KV heads and tp is "
                        f"{size}: {'tp is not a multiple of them' if size >= kv else 'tp does not divide them'}; "
                        f"vLLM's worker stops while building the model: \"{says}\" ({rule['source']})",
                        f.key_location("num_key_value_heads"), _tp_hint(draft, target, tp)))
    return out


def _tp_hint(draft, target, tp: int) -> str:
    """The tensor-parallel sizes (up to 16) both models accept, so the hint names a size that works."""
    ok = []
    for size in range(1, 17):
        fine = True
        for _, f, _ in _sides(draft, target, size, size):
            heads, kv = attention_heads(f), kv_heads(f)
            if heads is not None and heads % size:
                fine = False
            if kv is not None and not is_mla(f) and (size % kv if size >= kv else kv % size):
                fine = False
        if fine:
            ok.append(size)
    shown = ", ".join(map(str, ok)) or "none up to 16"
    return f"tensor-parallel sizes both models accept: {shown}"


def max_len_check(target, max_model_len: int | None, hf_overrides: dict | None) -> list[Diagnostic]:
    if max_model_len is None:
        return []
    rule = limits()["max_model_len"]
    cfg = merge_overrides(target.raw, hf_overrides)
    derived = derived_max_len(cfg)
    if derived is None or max_model_len <= derived:
        return []
    text = text_part(cfg)
    model_max_length = _int(text.get("model_max_length")) or _int(cfg.get("model_max_length"))
    if model_max_length is not None and max_model_len <= model_max_length:
        return []
    override = engine_rules()["context"].get("max_len_override_key")
    keys = [k for k in engine_rules()["context"]["max_len_keys"] if _int(text.get(k)) is not None]
    key = override if _int(text.get(override or "")) else \
        min(keys, key=lambda k: text[k]) if keys else "max_position_embeddings"
    says = rule["vllm_says"].format(asked=max_model_len, key=key, derived=float(derived), mml=model_max_length)
    rope = rope_of(cfg)
    scaled = f" (rope {rope.get('rope_type') or rope.get('type')})" if rope and (rope.get("rope_type") or rope.get("type")) else ""
    env = rule["allow_env"]
    forced = os.environ.get(env, "").strip().lower() in ("1", "true")
    return [diag(rule["code"], f"--max-model-len {max_model_len} is above the target's derived length {derived} "
                 f"({key}={text.get(key)}{scaled}): vLLM "
                 + ("starts only because " + env + " is set, and positions past it give NaN with RoPE" if forced
                    else "refuses at start") + f": \"{says}\" ({rule['source']})",
                 target.key_location(key), severity=WARNING if forced else None)]


def pipeline_check(target, pp: int) -> list[Diagnostic]:
    """SRG344: a target whose vLLM class is no SupportsPP under --pp > 1 (the draft always runs at pp 1)."""
    rule = limits()["pipeline"]
    archs = list(target.architectures)
    if pp <= 1 or not archs or archs[0] not in rule["architectures_without_pp"]:
        return []
    return [diag(rule["code"], f"the target's {archs[0]} is no SupportsPP class in vLLM: with pp {pp} vLLM refuses at "
                 f"start: \"{rule['vllm_says']}\" ({rule['source']})",
                 Location(target.source, key_path="architectures"))]


def cache_dtype_check(kv_cache_dtype: str | None, draft_kv_cache_dtype: str | None) -> list[Diagnostic]:
    rule = limits()["cache_dtype"]
    known = cache_dtypes()
    out = []
    for flag, value in (("--kv-cache-dtype", kv_cache_dtype), ("--draft-kv-cache-dtype", draft_kv_cache_dtype)):
        if value is None or value in known:
            continue
        import difflib  # a typo gets the nearest name

        near = next(iter(difflib.get_close_matches(str(value), known, n=1, cutoff=0.6)), None)
        out.append(diag(rule["code"], f"{flag} {value!r} is not one of vLLM's CacheDType values; vLLM refuses it at "
                        f"start (CacheConfig validation, {rule['source']})", Location(key_path=flag),
                        (f"did you mean {near}? " if near else "") + f"vLLM accepts: {', '.join(known)}"))
    return out


def engine_start_check(plan, draft, target, *, max_model_len: int | None = None, hf_overrides: dict | None = None,
                       draft_kv_cache_dtype: str | None = None) -> list[Diagnostic]:
    """Every start limit for a vLLM plan; nothing for another engine (its limits are not these)."""
    rt = plan.runtime
    if rt.engine != "vllm":
        return []
    tp, draft_tp = rt.tp_size, rt.lookup("draft_tp_size")
    return (cache_dtype_check(rt.kv_cache_dtype, draft_kv_cache_dtype)
            + heads_check(draft, target, tp, draft_tp)
            + kv_heads_check(draft, target, tp, draft_tp)
            + pipeline_check(target, rt.pp_size)
            + max_len_check(target, max_model_len, hf_overrides))


def cli_engine_start_check(options: CheckOptions, plan, draft, target) -> list[Diagnostic]:
    return engine_start_check(plan, draft, target, max_model_len=options.max_model_len,
                              hf_overrides=options.hf_overrides, draft_kv_cache_dtype=options.draft_kv_cache_dtype)
