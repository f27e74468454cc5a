"""Limits vLLM enforces when it starts, checked from the two config.json files and the serving flags
(codes SRG340-SRG345; the rules are data: surgery/data/engine_rules.yaml `start_limits`; the lists are
the judged release's own, surgery/data/releases/vllm.json).

Why here: these are the refusals a user meets only after the download the tool exists to avoid
(issue 42, class 5). Each one names the limit the way vLLM names it, so the message found here is the
one `vllm serve` would print. tests/release_oracle/ (vLLM 0.26.0, 0.32.0 and 0.34.0, each its own) builds vLLM's own engine config
(EngineArgs.create_engine_config) for each case and holds these checks to it.

- SRG340: tp does not divide the attention heads, the target's or the draft's (vLLM checks the draft
  with its own parallel config, at the target's tp);
- SRG341: tp and the KV heads do not divide each other (QKVParallelLinear, in the worker);
- SRG342: --max-model-len above the target's derived length;
- SRG343: --kv-cache-dtype (or --draft-kv-cache-dtype) not one of the judged release's CacheDType values;
- SRG344: --pp > 1 on a target whose class in the judged release is no SupportsPP, or (releases that give
  the draft the target's pp: 0.25-0.29) a draft class that is no SupportsPP;
- SRG345: --pp > 1 with a method whose drafter reads the target's aux hidden states, on a target whose
  decoder does not relay them between stages (releases that verify it at load: 0.30+).
- SRG754: tp divides the attention heads but not a Gated DeltaNet layer's conv width or value heads
  (Qwen3-Next, Qwen3.5 / 3.6; engine_rules.yaml `start_limits.linear_attention`, issue 65);
- SRG756: tp does not divide a vocabulary padded to 64 (the embedding and lm_head split it at build).

Every list these checks read is the judged release's own, read from its wheel (surgery/data/releases/
vllm.json `cache_dtypes`, `classes`; tools/releasefacts.py) and held to that release's own config layer by
tests/release_oracle/ (vLLM 0.26.0, 0.32.0 and 0.34.0, each in its own venv).
"""
from __future__ import annotations

import os
from typing import Any

from ..text.diagnostics import WARNING, Diagnostic, Location, diag
from ..options import CheckOptions
from .inherit import derived_max_len, engine_rules, merge_overrides, rope_of, text_part
from ..engine.coverage import rewrites  # the MTP rewrite table (which MTP class a target's layer becomes)
from ..engine.releases import Release, known, release, release_data
from ..engine.servedarch import served_architectures
from ..pipeline import pp_layer_range
from .config_spelling import serving


def limits() -> dict:
    return engine_rules()["start_limits"]


def judged(version: str | None) -> Release | None:
    """The release whose facts the start limits read (its SRG047 line, if any, is release_rules')."""
    return release("vllm", version)[0] if version else None


def cache_dtypes(rel: Release | None = None) -> tuple[str, ...]:
    """The judged release's CacheDType values (config/cache.py), read from its wheel."""
    facts = rel.facts if rel is not None else release_data("vllm")["releases"][known("vllm")[-1]]
    return tuple(facts.get("cache_dtypes") or ())


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


def _heads_failures(draft, target, tp: int, draft_tp: int) -> list[tuple[str, str, str, object]]:
    """(code, the side, what does not divide, facts) for every heads / KV-heads limit tp breaks."""
    out = []
    for side, f, size in _sides(draft, target, tp, draft_tp):
        heads = attention_heads(f)
        if heads is not None and heads % size:
            out.append(("SRG340", side, f"{heads} attention heads ({size} does not divide them)", f, size))
        kv = kv_heads(f)
        if kv is not None and not is_mla(f) and (size % kv if size >= kv else kv % size):
            what = "tp is not a multiple of them" if size >= kv else f"{size} does not divide them"
            out.append(("SRG341", side, f"{kv} KV heads ({what})", f, size))
    return out


def tp_check(draft, target, tp: int, draft_tp: int) -> list[Diagnostic]:
    """SRG340 / SRG341 as one line: every way this tp breaks the target's and the draft's heads, under the
    code of the limit vLLM meets first (the heads, in the config layer; the KV heads, in the worker)."""
    failures = _heads_failures(draft, target, tp, draft_tp)
    if not failures:
        return []
    code = "SRG340" if any(c == "SRG340" for c, *_ in failures) else "SRG341"
    first = next(x for x in failures if x[0] == code)
    rule = limits()["attention_heads" if code == "SRG340" else "kv_heads"]
    f, size = first[3], first[4]
    if code == "SRG340":
        says = rule["vllm_says"].format(heads=attention_heads(f), tp=size)
        when = "refuses at start"
    else:
        kv = kv_heads(f)
        num, den = (size, kv) if size >= kv else (kv, size)
        says = rule["vllm_says"].format(numerator=num, denominator=den)
        when = "stops while building the model"
    parts = "; ".join(f"the {side}'s {what}" + (f" at the draft's tp {sz}" if side == "draft" and sz != tp else "")
                      for _, side, what, _, sz in failures)
    key = "num_attention_heads" if code == "SRG340" else "num_key_value_heads"
    return [diag(code, f"--tp {tp}: {parts}; vLLM {when}: \"{says}\" ({rule['source']})",
                 f.key_location(key), _tp_hint(draft, target, tp))]


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


def vocab_check(draft, target, tp: int, draft_tp: int) -> list[Diagnostic]:
    """SRG756: tp does not divide a model's vocabulary padded to 64 (VocabParallelEmbedding / ParallelLMHead
    split it over tp at build); the target's, and the draft's own (its draft_vocab_size head too)."""
    rule = limits()["vocab"]
    pad = rule["padding"]
    for side, f, size in _sides(draft, target, tp, draft_tp):
        for key in ("vocab_size", "draft_vocab_size"):
            vocab = _int(f.scalars.get(key))
            if vocab is None or vocab <= 0 or size <= 1:
                continue
            padded = -(-vocab // pad) * pad
            if padded % size == 0:
                continue
            says = rule["vllm_says"].format(numerator=padded, denominator=size)
            ok = [t for t in range(1, 17) if padded % t == 0]
            return [diag(rule["code"], f"--tp {tp}: the {side}'s {key} {vocab} is padded to {padded} (a multiple of {pad}) "
                         f"and split over tp {size} by its embedding / lm_head, which {size} does not divide; vLLM stops "
                         f"while building the model: \"{says}\" ({rule['source']})", f.key_location(key),
                         f"tensor-parallel sizes that divide {padded}: {', '.join(map(str, ok))}")]
    return []


def gdn_widths(f) -> dict | None:
    """A Gated DeltaNet target's (conv width, value heads, the keys they come from), or None."""
    rule = limits().get("linear_attention") or {}
    text = text_part(f.raw or {})
    if not ({f.model_type, f.text_model_type, text.get("model_type")} & set(rule.get("model_types") or [])):
        return None
    keys = rule["keys"]
    vals = {name: _int(text.get(key)) for name, key in keys.items()}
    if any(v is None or v <= 0 for v in vals.values()):
        return None
    conv = 2 * vals["num_k_heads"] * vals["head_k_dim"] + vals["num_v_heads"] * vals["head_v_dim"]
    return {"conv": conv, "num_v_heads": vals["num_v_heads"], "keys": keys}


def _gdn_breaks(f, size: int) -> tuple[int, str] | None:
    """(what tp does not divide, its name) in gated_delta_net_state_shape's order: conv width, value heads."""
    w = gdn_widths(f)
    if w is None or size <= 1:
        return None
    k = w["keys"]
    if w["conv"] % size:
        return w["conv"], (f"conv width {w['conv']} (2 x {k['num_k_heads']} x {k['head_k_dim']} + "
                           f"{k['num_v_heads']} x {k['head_v_dim']})")
    if w["num_v_heads"] % size:
        return w["num_v_heads"], f"{w['num_v_heads']} value heads ({k['num_v_heads']})"
    return None


def gdn_check(rel: Release | None, target, tp: int) -> list[Diagnostic]:
    """SRG754: a tp that does not divide the target's Gated DeltaNet conv width or value heads (the draft of
    these families is a full-attention MTP layer)."""
    rule = limits().get("linear_attention") or {}
    where = rel.rule("gdn_state_shape_divides") if rel is not None else None
    broke = _gdn_breaks(target, tp) if where or rel is None else None
    if broke is None:
        return []
    value, what = broke
    says = rule["vllm_says"].format(numerator=value, denominator=tp)
    ok = [s for s in range(1, 17) if _gdn_breaks(target, s) is None and not any(
        x[0] for x in _heads_failures(target, target, s, s))]
    label = rel.label() if rel is not None else "vLLM"
    return [diag(rule["code"], f"--tp {tp}: the target's Gated DeltaNet layers split their {what} over tp, and {tp} "
                 f"does not divide it; {label} refuses at start (cache sizing) and at build: \"{says}\" "
                 f"({where or rule['source']})", target.key_location(rule["keys"]["num_k_heads"]),
                 f"tensor-parallel sizes the heads and the Gated DeltaNet widths accept: {', '.join(map(str, ok)) or 'none up to 16'}")]


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


def _classes(rel: Release | None) -> dict:
    return (rel.facts.get("classes") or {}) if rel is not None else {}


def pipeline_check(rel: Release | None, draft, target, pp: int, method: str | None) -> list[Diagnostic]:
    """SRG344: under --pp > 1, a target class the judged release does not run pipelined; in a release that
    gives the draft the target's pp (create_draft_parallel_config), a draft class it does not either."""
    rule = limits()["pipeline"]
    classes = _classes(rel)
    archs = list(target.architectures)
    if pp <= 1 or rel is None:
        return []
    label = rel.label()
    if archs and archs[0] in (classes.get("architectures_without_pp") or []):
        return [diag(rule["code"], f"the target's {archs[0]} is no SupportsPP class in {label}: with pp {pp} "
                     f"vLLM refuses at start: \"{rule['vllm_says']}\" ({rule['source']})",
                     Location(target.source, key_path="architectures"))]
    if classes.get("draft_pp") != "target":
        return []
    served = _served_draft_class(rel, draft, target, method)
    if served is None or served in (classes.get("draft_architectures_with_pp") or []):
        return []
    mtp = method in ("mtp", None) and "MTP" in served
    return [diag(rule["code"], f"the draft is served as {served}, which is no SupportsPP class in {label}; this "
                 f"release gives the draft the target's pipeline size ({pp}) and refuses at start: "
                 f"\"{rule['vllm_says']}\" (config/speculative.py create_draft_parallel_config; "
                 "SpeculativeConfig._verify_args)" + (f"; MTP under --pp, as reported in {rule['mtp_reports']}"
                                                      if mtp else ""),
                 Location(draft.source, key_path="architectures"),
                 "serve with --pp 1, or on vLLM 0.30 or later (the draft runs at pp 1 there)")]


def _served_draft_class(rel: Release, draft, target, method: str | None) -> str | None:
    """The draft class the release builds: for an MTP target's own MTP layer, the class of the MTP model
    type vLLM rewrites the target to (data/vllm_mtp_rewrites.yaml), among the classes the release's
    SpeculativeConfig.hf_config_override names (`glm4_moe_mtp` -> Glm4MoeMTPModel); else the draft
    config's architecture after vLLM's EAGLE renaming."""
    if method in ("mtp", None):
        same = draft.source == target.source or draft.raw == target.raw
        found = mtp_class(rel, target if same else draft)  # a separate MTP draft (Gemma 4's assistant) too
        if found or same:
            return found
    registry = rel.architectures()
    served = [a for a in served_architectures(method, list(draft.architectures or [])) if a in registry]
    return served[0] if served else None


def _norm(name: str) -> str:
    return name.replace("_", "").lower()


def mtp_class(rel: Release, facts) -> str | None:
    """The MTP class the release builds for a model's MTP layer: the MTP model type vLLM rewrites it to
    (data/vllm_mtp_rewrites.yaml), among the release's MTP architectures (`glm4_moe_lite_mtp` ->
    Glm4MoeLiteMTPModel). SRG344 here and SRG805 (catalogue4.py) read it."""
    archs, types = set(facts.architectures or ()), {facts.model_type, facts.text_model_type}
    draft_type = next((r["draft_model_type"] for r in rewrites().get("rewrites") or []
                       if r.get("architecture") in archs or r.get("model_type") in types), None)
    if not draft_type or draft_type == "?":
        return None
    names = [a for a in _classes(rel).get("mtp_architectures") or [] if _norm(a).startswith(_norm(draft_type))]
    return min(names, key=len) if names else None


def draft_layer_names_check(rel: Release | None, draft, target, pp: int, method: str | None) -> list[Diagnostic]:
    """SRG346: under --pp > 1 on a release that runs the draft at pipeline size 1 on the last stage, a draft
    class that numbers its layers from the target's layer count on that stage (engine_rules.yaml
    start_limits.draft_layer_names) names a layer the stage's target already has: vLLM refuses at model
    build with "Duplicate layer name"."""
    classes = _classes(rel)
    if pp <= 1 or rel is None or classes.get("draft_pp") == "target":
        return []
    served = _served_draft_class(rel, draft, target, method)
    total = target.num_layers
    if served not in (classes.get("draft_architectures_stage_numbered") or []) or not total or pp > total:
        return []
    start, end = pp_layer_range(total, pp - 1, pp)
    count = end - start
    own = range(count, count + max(int(draft.num_layers or 1), 1))
    taken = [i for i in own if start <= i < end]
    if not taken:
        return []
    rule = limits()["draft_layer_names"]
    name = f"model.layers.{taken[0]}.self_attn.attn"
    return [diag(rule["code"], f"the draft is served as {served}, which numbers its layers from the target's layer "
                 f"count on this pipeline stage ({count}, layers {start}-{end - 1} of the last of {pp} stages, where "
                 f"{rel.label()} builds the draft): its layer {taken[0] - count} is named like the target's layer "
                 f"{taken[0]} and vLLM refuses at model build: \"{rule['vllm_says'].format(prefix=name)}\" "
                 f"({rule['source']})", Location(draft.source, key_path="architectures"),
                 "serve with a pipeline size whose last stage does not start at or below its own layer count "
                 "(for this target: " + (", ".join(str(p) for p in _safe_pp(total, int(draft.num_layers or 1), pp))
                                         or "none up to 8") + "), or with --pp 1")]


def _safe_pp(total: int, draft_layers: int, asked: int) -> list[int]:
    """Pipeline sizes up to 8 (other than the one asked) whose last stage the head's layer names miss."""
    out = []
    for p in range(2, 9):
        if p == asked or p > total:
            continue
        start, end = pp_layer_range(total, p - 1, p)
        if not any(start <= i < end for i in range(end - start, end - start + draft_layers)):
            out.append(p)
    return out


def aux_relay_check(rel: Release | None, draft, target, pp: int, method: str | None) -> list[Diagnostic]:
    """SRG345: the V2 runner (the GPU default) verifies at load that a target relays aux hidden states
    between pipeline stages when the drafter reads them (eagle3_utils.verify_supports_aux_hidden_states_over_pp):
    only targets whose decoder sets `supports_aux_hidden_states_over_pp` do."""
    if pp <= 1 or rel is None or not rel.rule("aux_hidden_states_over_pp_verified"):
        return []
    classes = _classes(rel)
    if method not in (classes.get("aux_methods") or []):
        return []
    nested = (draft.raw or {}).get("eagle_config") if isinstance(draft.raw, dict) else None
    if method == "eagle3" and isinstance(nested, dict) and nested.get("use_aux_hidden_state") is False \
            and rel.rule("v2_reads_use_aux_hidden_state"):
        return []
    archs = list(target.architectures)
    relay = classes.get("aux_hidden_states_over_pp") or []
    if not archs or archs[0] in relay:
        return []
    where = rel.rule("aux_hidden_states_over_pp_verified")
    return [diag("SRG345", f"{method} at pp {pp}: the drafter reads the target's aux hidden states, and the target's "
                 f"{archs[0]} does not relay them between pipeline stages in {rel.label()}: it refuses at load: "
                 f"\"{archs[0]} does not support {method} with pipeline parallelism\" ({where})",
                 Location(target.source, key_path="architectures"),
                 f"serve with --pp 1 (or tp instead of pp); targets that relay them in this release: "
                 f"{', '.join(relay[:8])}{' ...' if len(relay) > 8 else ''}")]


def cache_dtype_check(rel: Release | None, kv_cache_dtype: str | None,
                      draft_kv_cache_dtype: str | None) -> list[Diagnostic]:
    rule = limits()["cache_dtype"]
    known = cache_dtypes(rel)
    out = []
    for flag, value in (("--kv-cache-dtype", kv_cache_dtype), ("--draft-kv-cache-dtype", draft_kv_cache_dtype)):
        if value is None or value in known:
            continue
        import difflib  # a typo gets the nearest name

        near = next(iter(difflib.get_close_matches(str(value), known, n=1, cutoff=0.6)), None)
        label = f"{rel.label()}'s" if rel is not None else "vLLM's"
        out.append(diag(rule["code"], f"{flag} {value!r} is not one of {label} CacheDType values; it refuses it at "
                        f"start (CacheConfig validation, {rule['source']})", Location(key_path=flag),
                        (f"did you mean {near}? " if near else "") + f"vLLM accepts: {', '.join(known)}"))
    return out


def model_dtype(target) -> str:
    """The dtype vLLM serves the target in with --dtype auto: the text config's torch_dtype (or dtype), a
    float32 or missing one served as bfloat16 (ModelConfig._get_and_verify_dtype on a bf16 GPU)."""
    text = text_part(target.raw or {})
    for cfg in (text, target.raw or {}):
        for key in ("torch_dtype", "dtype"):
            value = cfg.get(key)
            if isinstance(value, str):
                value = value.removeprefix("torch.")
                return "bfloat16" if value in ("float32", "float") else value
    return "bfloat16"


def float_kv_check(rel: Release | None, target, kv_cache_dtype: str | None) -> list[Diagnostic]:
    """SRG343: 0.33+ refuse an explicit float16 / bfloat16 KV cache that is not the model's dtype
    (config/vllm.py VllmConfig._reject_mismatched_float_kv_cache)."""
    where = rel.rule("float_kv_cache_matches_model_dtype") if rel is not None else None
    if not where or kv_cache_dtype not in ("float16", "bfloat16"):
        return []
    dtype = model_dtype(target)
    if dtype == kv_cache_dtype:
        return []
    allowed = f"auto or {dtype}" if dtype in ("float16", "bfloat16") else "auto"
    return [diag(limits()["cache_dtype"]["code"], f"--kv-cache-dtype {kv_cache_dtype} is not the target's dtype "
                 f"({dtype}): {rel.label()} refuses at start: \"kv_cache_dtype=\"{kv_cache_dtype}\" is incompatible "
                 f"with dtype=\"{dtype}\"\" ({where})", Location(key_path="--kv-cache-dtype"),
                 f"set --kv-cache-dtype to {allowed}")]


def engine_start_check(plan, draft, target, *, version: str | None = None, method: str | None = None,
                       max_model_len: int | None = None, hf_overrides: dict | None = None,
                       draft_kv_cache_dtype: str | None = None) -> list[Diagnostic]:
    """Every start limit of the judged release for a vLLM plan; nothing for another engine (its limits are
    not these)."""
    rt = plan.runtime
    if rt.engine != "vllm":
        return []
    rel = judged(version)
    tp, draft_tp = rt.tp_size, rt.lookup("draft_tp_size")
    return (cache_dtype_check(rel, rt.kv_cache_dtype, draft_kv_cache_dtype)
            + float_kv_check(rel, target, rt.kv_cache_dtype)
            + tp_check(draft, target, tp, draft_tp)
            + gdn_check(rel, target, tp)
            + vocab_check(draft, target, tp, draft_tp)
            + pipeline_check(rel, draft, target, rt.pp_size, method)
            + draft_layer_names_check(rel, draft, target, rt.pp_size, method)
            + aux_relay_check(rel, draft, target, rt.pp_size, method)
            + max_len_check(target, max_model_len, hf_overrides))


def cli_engine_start_check(options: CheckOptions, plan, draft, target, recipe=None) -> list[Diagnostic]:
    method, version, _ = serving(options, recipe)
    return engine_start_check(plan, draft, target, version=version, method=method,
                              max_model_len=options.max_model_len, hf_overrides=options.hf_overrides,
                              draft_kv_cache_dtype=options.draft_kv_cache_dtype)
