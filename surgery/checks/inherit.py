"""What the draft inherits from its target in the engine, from the two config.json files and the
serving flags (codes SRG645-SRG647; the engine rules are data, surgery/data/engine_rules.yaml):

- SRG645: the draft's serving length under the user's hf_overrides (dict overrides do not reach a vLLM
  draft; past the draft's max_model_len vLLM stops drafting and zeroes the draft tokens: vllm#58080);
- SRG646: the quantization the engine builds the draft with vs the draft checkpoint's own;
- SRG647: a global fp8 KV cache reaching a drafter that writes its own cache without calibrated scales.
"""
from __future__ import annotations

from functools import lru_cache

from ..text.diagnostics import INFO, WARNING, Diagnostic, Location, diag
from ..engine.releases import release  # the judged release's own rules
from ..facts.fromconfig import merge_overrides  # one merge, the facts' own (issue 65); re-exported
from ..resources import load_data


@lru_cache(maxsize=1)
def engine_rules() -> dict:
    return load_data("data/engine_rules.yaml")


def text_part(raw: dict) -> dict:
    """The text model's config (nested `text_config` where there is one)."""
    text = raw.get("text_config")
    return text if isinstance(text, dict) else raw



def rope_of(cfg: dict) -> dict | None:
    text = text_part(cfg)
    rope = text.get("rope_scaling") or text.get("rope_parameters")
    return rope if isinstance(rope, dict) else None


def derived_max_len(cfg: dict) -> int | None:
    """vLLM's derived max_model_len of a config (config/model.py _get_and_verify_max_len, without the
    tokenizer's model_max_length): the smallest length key, times the rope factor where it applies (per
    layer type when the rope parameters are nested, the last factor winning as in vLLM's loop; never for
    the model types whose length is already scaled, Gemma 3)."""
    rules = engine_rules()["context"]
    text = text_part(cfg)
    lengths = [text[k] for k in rules["max_len_keys"] if isinstance(text.get(k), int) and not isinstance(text.get(k), bool)]
    override = text.get(rules.get("max_len_override_key") or "")
    if isinstance(override, int) and not isinstance(override, bool) and override > 0:
        lengths = [override]  # derive_max_model_len_and_key: model_max_length replaces the keys
    if not lengths:
        return None
    length = float(min(lengths))
    rope = rope_of(cfg)
    top_type = str(text.get("model_type") or cfg.get("model_type") or "")  # vLLM passes hf_text_config
    if rope and not any(t in top_type for t in rules.get("factor_not_applied_model_types") or ()):
        nested = bool(rope) and all(isinstance(v, dict) for v in rope.values())
        factor = 1.0
        for rp in (v for v in rope.values() if v) if nested else (rope,):
            kind = rp.get("rope_type") or rp.get("type") or "default"
            if kind not in rules["factor_not_applied"] and isinstance(rp.get("factor"), (int, float)):
                factor = rp["factor"]
        length *= factor
    return int(length)


def rope_kind(raw: dict) -> str:
    """cache_only when every RoPE the config states only sizes its cache (vLLM's _CACHE_ONLY_ROPE_TYPES:
    default, linear, llama3, ntk, proportional), else scaled."""
    rope = rope_of(raw or {}) or {}
    nested = bool(rope) and all(isinstance(v, dict) for v in rope.values())
    kinds = {str(rp.get("rope_type") or rp.get("type") or "default")
             for rp in ((v for v in rope.values() if v) if nested else (rope,)) if rp}
    return "scaled" if kinds - {"default", "linear", "llama3", "ntk", "proportional"} else "cache_only"


def raises_draft_length(version: str | None, method: str, d_cfg: dict) -> str | None:
    """Where the judged release's default GPU runner raises a short draft's position table to the serving
    length and drafts to the end (SpeculativeConfig._maybe_override_draft_max_position_embeddings, 0.27+,
    for drafts whose RoPE only sizes its cache; the V2 runner has no drafting gate), else None. The legacy
    runner's gate (_input_fits_in_drafter: token 0 past the draft's length) is named where the release still
    has that runner (vLLM on CPU, or VLLM_USE_V2_MODEL_RUNNER=0)."""
    if not version or method in (None, "draft_model"):
        return None
    rel = release("vllm", version)[0]
    runners = (rel.facts.get("runners") or {}) if rel is not None else {}
    if rel is None or not rel.rule("draft_max_position_override") or not runners.get("v2"):
        return None
    if method not in ("eagle", "eagle3") and not rel.rule("draft_max_position_override_all_methods"):
        return None  # before 0.33 only EAGLE drafts are raised
    if rope_kind(d_cfg) == "scaled":
        return None  # a scaled RoPE: not raised (0.33+ lower the target's length instead: SRG620)
    gate = rel.rule("input_fits_in_drafter")
    legacy = (f"; the legacy runner (CPU, or VLLM_USE_V2_MODEL_RUNNER=0) still stops drafting past it and proposes "
              f"token 0 (_input_fits_in_drafter, {gate})") if gate and runners.get("legacy") else ""
    return f"{rel.label()}'s V2 runner (the GPU default; {rel.rule('draft_max_position_override')}){legacy}"


def context_check(draft, target, *, method: str, hf_overrides: dict | None, max_model_len: int | None,
                  num_speculative_tokens: int | None, version: str | None = None) -> list[Diagnostic]:
    rules = engine_rules()["context"]
    t_cfg = merge_overrides(target.raw, hf_overrides)
    same = draft.source == target.source
    d_cfg = merge_overrides(draft.raw, hf_overrides if rules["dict_overrides_reach_draft"] else None)
    t_len = max_model_len or derived_max_len(t_cfg)
    d_len = derived_max_len(d_cfg)
    if not isinstance(t_len, int) or not isinstance(d_len, int):
        return []
    draft_len = min(d_len, t_len)  # _maybe_override_draft_max_model_len
    k = num_speculative_tokens or 1
    out = []
    raised = raises_draft_length(version, method, d_cfg)
    if draft_len < t_len and raised:
        out.append(diag("SRG645", f"{method} draft length {draft_len} < serving length {t_len}: {raised}: the draft's "
                        "max_position_embeddings is raised to the serving length and the V2 runner drafts to the end", Location(draft.source, key_path=draft.key_prefix + "max_position_embeddings"),
                        severity=INFO))
    elif draft_len < t_len:
        touched = sorted(k_ for k_ in (hf_overrides or {}) if k_ in rules["rope_keys"] or k_ == "text_config")
        why = (f"the dict hf_overrides {touched} reach the target only (vLLM {engine_rules()['vllm_version']}: "
               "SpeculativeConfig.compose_draft_hf_overrides drops dict overrides for the draft)"
               if touched else "the draft checkpoint's own length is shorter")
        extra = " (EAGLE: vLLM raises the draft's max_position_embeddings, but not this length)" \
            if method in ("eagle", "eagle3") else ""
        out.append(diag("SRG645", f"{method} draft max_model_len {draft_len} < serving length {t_len}: {why}{extra}; "
                        f"once a sequence is past {draft_len - k} tokens vLLM stops running the drafter and proposes "
                        f"token 0 (_input_fits_in_drafter), acceptance ~0",
                        Location(draft.source, key_path=draft.key_prefix + "max_position_embeddings"),
                        "serve with --max-model-len at most the draft's length, or give the draft the same "
                        "context extension in its own config.json" + (" (a copy of the checkpoint folder)" if same else ""),
                        severity=None if touched else WARNING))
    elif hf_overrides and rope_of(t_cfg) != rope_of(d_cfg) and method == "mtp":
        out.append(diag("SRG645", f"the target runs rope {rope_of(t_cfg)} under hf_overrides, the MTP draft's config "
                        f"keeps {rope_of(d_cfg)} (dict overrides do not reach the draft)",
                        Location(draft.source, key_path="rope_scaling"), severity=INFO))
    return out


# ---------------------------------------------------------------- quantization


def quant_method(raw: dict) -> str | None:
    for cfg in (raw, text_part(raw)):
        q = cfg.get("quantization_config")
        if isinstance(q, dict):
            return str(q.get("quant_method") or q.get("quant_algo") or "unknown")
    return None


def served_module(draft, method: str) -> str | None:
    """The vLLM module that builds this draft (registry name after EAGLEConfig's rename)."""
    if method == "draft_model":
        return "draft_model"
    if method == "dspark":
        return "dspark"
    table = engine_rules()["modules"]
    for arch in draft.architectures:
        names = [arch]
        if method == "eagle3" and not (arch.startswith("Eagle3") or arch.endswith("Eagle3")):
            names.append(f"Eagle3{arch}")
        if method == "eagle" and not arch.startswith("Eagle"):
            names.append(f"Eagle{arch}")
        for name in names:
            if name in table:
                return table[name]
    if draft.model_type in ("gemma4_assistant", "gemma4_unified_assistant"):
        return "gemma4_mtp"
    return None


def quant_check(draft, target, *, method: str) -> list[Diagnostic]:
    rules = engine_rules()["quantization"]
    own, tgt = quant_method(draft.raw), quant_method(target.raw)
    if own is None and tgt is None:
        return []
    module = served_module(draft, method)
    sglang = rules["sglang"]["rule"]
    if draft.source == target.source or draft.raw == target.raw:
        if method == "dspark" and tgt:
            return [diag("SRG646", f"DSpark draft inside the {tgt} target checkpoint: vLLM "
                         f"{engine_rules()['vllm_version']} builds it with the target's quantization config, so draft "
                         "modules stored in another format (e.g. MXFP4 experts under an NVFP4 target) load in the "
                         "target's (vllm#49133)", Location(target.source, key_path="quantization_config"),
                         severity=WARNING)]
        return []
    if module is None:
        return [diag("SRG646", f"draft {list(draft.architectures)} ({method}): which quantization vLLM builds it with is "
                     f"not in surgery/data/engine_rules.yaml; the draft is {own or 'unquantised'}, the target "
                     f"{tgt or 'unquantised'}", Location(draft.source, key_path="architectures"), severity=INFO)]
    vllm = rules["vllm"]
    gets = own if module in vllm["own"] else tgt if module in vllm["target"] else None
    if module not in vllm["own"] and module not in vllm["target"]:
        return []
    if gets == own:
        if tgt and not own and method != "draft_model":
            return [diag("SRG646", f"vLLM builds this {module} draft with its own quantization (none); SGLang would "
                         f"not: {sglang}", Location(target.source, key_path="quantization_config"), severity=INFO)]
        return []
    return [diag("SRG646", f"vLLM {engine_rules()['vllm_version']} builds the {module} draft with the target's "
                 f"quantization ({tgt or 'none'}), but the draft checkpoint is {own or 'unquantised'}: its weights "
                 f"load in a format they were not saved in (garbage or slow drafts, vllm#49133); SGLang: {sglang}",
                 Location(draft.source, key_path="quantization_config"),
                 "serve a draft quantized like the target, or an engine build that uses the draft's own config")]


# ---------------------------------------------------------------- drafter KV-cache dtype


def has_kv_scales(raw: dict) -> bool:
    keys = engine_rules()["kv_cache"]["scale_keys"]
    for cfg in (raw, text_part(raw)):
        q = cfg.get("quantization_config")
        if isinstance(q, dict) and any(q.get(k) for k in keys):
            return True
    return False


def kv_dtype_check(plan, draft, target, *, draft_kv_cache_dtype: str | None) -> list[Diagnostic]:
    kv = plan.runtime.kv_cache_dtype or "auto"
    effective = draft_kv_cache_dtype or kv  # speculative_config.kv_cache_dtype, else the global one
    if not effective.startswith("fp8"):
        return []
    shared = {op.draft_layer for op in plan.ops("share_kv")}
    if draft.source == target.source:
        own_layers = list(range(int(draft.scalars.get("num_mtp_layers") or 1)))  # the MTP layers
    else:
        own_layers = [i for i in range(max(draft.num_layers, 1)) if i not in shared]
    if not own_layers or has_kv_scales(draft.raw):
        return []
    copied = bool(plan.ops("copy_attrs"))
    if copied:
        return []
    where = "--draft-kv-cache-dtype" if draft_kv_cache_dtype else "--kv-cache-dtype (global: vLLM's speculative_config.kv_cache_dtype is unset, so it reaches the drafter)"
    return [diag("SRG647", f"{effective} KV cache from {where}: the draft writes and reads {len(own_layers)} layer(s) of "
                 f"its own cache with scale 1.0 (its checkpoint ships no KV scales and the recipe copies none); MTP "
                 f"acceptance fell 0.725 -> 0.630 this way (vllm#55557; the same class on another engine: a Kimi-K3 "
                 f"DSpark following the target's FP8 cache with no scales, accept length 2.6-2.8 -> 1.79, "
                 f"lightseekorg/tokenspeed#1012)",
                 Location(draft.source, key_path="quantization_config"),
                 "keep the drafter's cache unquantised: speculative_config {\"kv_cache_dtype\": \"auto\"} (vLLM >= the "
                 "field of vllm#48787), checked here with --draft-kv-cache-dtype auto")]


def inheritance_checks(plan, recipe, draft, target, *, method: str, hf_overrides: dict | None = None,
                       max_model_len: int | None = None, num_speculative_tokens: int | None = None,
                       draft_kv_cache_dtype: str | None = None, engine_version: str | None = None) -> list[Diagnostic]:
    if plan.runtime.engine != "vllm":
        return []
    out = context_check(draft, target, method=method, hf_overrides=hf_overrides, max_model_len=max_model_len,
                        num_speculative_tokens=num_speculative_tokens, version=engine_version)
    out += quant_check(draft, target, method=method)
    out += kv_dtype_check(plan, draft, target, draft_kv_cache_dtype=draft_kv_cache_dtype)
    return out
