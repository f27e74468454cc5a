"""What SGLang refuses when it starts or builds the models, checked from the two config.json files and the
serving flags (codes SRG770-SRG778): the SGLang counterpart of engine_start.py (vLLM).

Why here: SGLang's refusals are its own, not vLLM's (issue 65: an SGLang user was told "valid", with
vLLM's findings, for setups SGLang refuses at start). Each rule is data (surgery/data/sglang_limits.yaml:
the engine's own message fragment, the keys it reads), and a rule is applied to a release only where that
release's wheel holds the message (surgery/data/releases/sglang.json `start.limits`, written by
tools/gen_engine_releases.py). tests/sglang_oracle/ runs SGLang 0.5.23's own parser, server-argument
resolution, model configs and model constructors (surgery/engine/ask/sglang_runner.py) on a grid of real
configs and holds these checks to it, case by case.

Every finding names SGLang's release, its message, and the file:line the release holds it at.
"""
from __future__ import annotations

import os
from typing import Any

from ..text.diagnostics import ERROR, WARNING, Diagnostic, Location, diag
from ..engine.capture import sglang_aux_ids_read, sglang_builds_dspark_v4, sglang_layers_to_capture
from ..engine.cards import card
from ..engine.releases import Release, installed_version, known, release
from ..facts.fromconfig import family_defaults
from ..formats.findings import format_of, trained_on
from ..resources import load_data

ALLOW_LONGER = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"


def limits_data() -> dict:
    return load_data("data/sglang_limits.yaml")


def rules() -> dict:
    return limits_data()["rules"]


def family_of(algorithm: str | None) -> str | None:
    """The vLLM method family of an SGLang algorithm (EAGLE3 -> eagle3, NEXTN -> mtp ...)."""
    return limits_data()["algorithms"].get(str(algorithm or "").upper())


def algorithm_of(method: str | None, recipe_method: str | None = None) -> str | None:
    """SGLang's --speculative-algorithm for what was asked: an SGLang name as given, else the one that runs
    a vLLM method family (eagle3 -> EAGLE3, mtp / deepseek_mtp -> EAGLE, draft_model -> STANDALONE ...)."""
    for asked in (method, recipe_method):
        if not asked:
            continue
        name = str(asked)
        if name.upper() in limits_data()["algorithms"]:
            return name.upper()
        family = {"deepseek_mtp": "mtp", "ernie_mtp": "mtp", "qwen3_next_mtp": "mtp"}.get(name, name)
        for algo, fam in limits_data()["algorithms"].items():
            if fam == family and algo not in ("NEXTN", "FROZEN_KV_MTP"):
                return algo
    return None


def judged(version: str | None) -> tuple[Release | None, Diagnostic | None]:
    """The SGLang release the limits read: --engine-version, else the installed SGLang, else the newest
    release the data covers."""
    if not version:
        version = installed_sglang() or known("sglang")[-1]
    return release("sglang", version, "--engine-version")


def installed_sglang() -> str | None:
    return installed_version("sglang")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(raw: dict) -> dict:
    text = raw.get("text_config")
    return text if isinstance(text, dict) else raw


def _where(rel: Release, rule: str) -> str | None:
    return ((rel.facts.get("start") or {}).get("limits") or {}).get(rule)


def _start_facts(rel: Release) -> dict:
    return rel.facts.get("start") or {}


def context_length(raw: dict) -> int:
    """SGLang's derived context length of a config (get_context_length on the text config)."""
    ctx = limits_data()["context"]
    text = _text(raw)
    rope = text.get("rope_scaling") or text.get("rope_parameters")
    factor = 1.0
    if isinstance(rope, dict) and "rope_type" not in rope and all(isinstance(v, dict) for v in rope.values()):
        rope = None  # per-layer-type rope parameters (Gemma): no top-level factor
    if str(text.get("model_type") or raw.get("model_type") or "") in ctx["per_layer_type_model_types"]:
        rope = None  # transformers turns this class's rope_scaling into per-layer-type parameters
    if isinstance(rope, dict):
        factor = rope.get("factor", 1) if isinstance(rope.get("factor", 1), (int, float)) else 1
        if ctx["factor_not_applied_with"] in rope or rope.get("rope_type") in ctx["factor_not_applied_rope_types"]:
            factor = 1
    # a key the file leaves out is the transformers class's default (what SGLang's config object carries)
    filled = family_defaults(str(text.get("model_type") or raw.get("model_type") or ""))
    for key in ctx["keys"]:
        value = text.get(key, filled.get(key))
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return int(factor * value)
    return int(ctx["default"])


def _label(rel: Release) -> str:
    return f"SGLang {rel.asked}" + ("" if rel.exact else f" (data of {rel.version})")


def _line(code: str, rel: Release, rule: str, message: str, key: str, hint: str, severity: str = ERROR,
          file: str | None = None) -> Diagnostic:
    where = _where(rel, rule)
    at = f" ({where.removeprefix('sglang/')})" if where else ""
    return diag(code, f"{_label(rel)}: {message}{at}", Location(file or "", key_path=key), hint,
                severity=severity)


def kv_cache_dtype_check(rel: Release, kv_cache_dtype: str | None, target=None) -> list[Diagnostic]:
    choices = _start_facts(rel).get("kv_cache_dtypes")
    if not kv_cache_dtype or kv_cache_dtype == "auto" or not choices:
        return []
    if kv_cache_dtype in choices:
        return dsa_kv_check(rel, kv_cache_dtype, target) if target is not None else []
    vllm_name = " (vLLM's name; SGLang spells FP8 fp8_e4m3 / fp8_e5m2)" if kv_cache_dtype == "fp8" else ""
    return [diag(rules()["kv_cache_dtype"]["code"], f"{_label(rel)} refuses --kv-cache-dtype "
                 f"{kv_cache_dtype!r}{vllm_name}: its parser's choices are {', '.join(choices)}",
                 Location("", key_path="--kv-cache-dtype"), f"use one of {', '.join(choices)}")]


def dsa_kv_check(rel: Release, kv_cache_dtype: str, target) -> list[Diagnostic]:
    """A DeepSeek-sparse-attention target takes bf16 / fp8_e4m3 caches only (overrides.py)."""
    rule = rules()["dsa_kv_cache_dtype"]
    text = _text(target.raw)
    archs = set(target.architectures or [])
    if not (archs & set(rule["architectures"]) and text.get(rule["key"]) is not None) \
            or kv_cache_dtype in rule["dtypes"] or not _where(rel, "dsa_kv_cache_dtype"):
        return []
    return [_line(rule["code"], rel, "dsa_kv_cache_dtype", f"refuses --kv-cache-dtype {kv_cache_dtype} for a DeepSeek "
                  f"sparse-attention target ({sorted(archs)[0]} with {rule['key']}): \"{rule['says']}\"",
                  "--kv-cache-dtype", "use bfloat16 or fp8_e4m3 (or auto)")]


def attention_backend_check(rel: Release, backend: str | None, algorithm: str | None, target) -> list[Diagnostic]:
    if not backend:
        return []
    code = rules()["flex_attention"]["code"]
    choices = _start_facts(rel).get("attention_backends")
    if choices and backend not in choices:
        return [diag(code, f"{_label(rel)} refuses --attention-backend {backend!r}: its parser's choices are "
                     f"{', '.join(choices)}", Location("", key_path="--attention-backend"),
                     "pick one of SGLang's attention backends")]
    if backend == "flex_attention" and algorithm and _where(rel, "flex_attention"):
        return [_line(code, rel, "flex_attention", "refuses flex_attention with speculative decoding (\"Speculative "
                      "decoding is currently not supported with Flex Attention backend\")", "--attention-backend",
                      "leave --attention-backend to SGLang's default, or pick triton / fa3 / flashinfer")]
    gemma = rules()["gemma4_attention_backends"]
    types = {_text(target.raw).get("model_type"), target.raw.get("model_type")}
    if types & set(gemma["model_types"]) and backend not in gemma["backends"] and _where(rel, "gemma4_attention_backends"):
        return [_line(code, rel, "gemma4_attention_backends", f"refuses --attention-backend {backend} for a Gemma 4 "
                      f"target (\"Gemma4 only supports {', '.join(gemma['backends'])}\")", "--attention-backend",
                      f"pick one of {', '.join(gemma['backends'])}, or leave it to SGLang's default")]
    return []


def context_check(rel: Release, draft, target, algorithm: str | None, context: int | None,
                  allow_longer: bool) -> list[Diagnostic]:
    """SGLang builds the target at --context-length and the draft at the TARGET's context length
    (tp_worker.py: the draft worker's ModelConfig gets the target's context_len); either above its own
    derived length is refused unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN is set."""
    code = rules()["user_context_length"]["code"]
    target_len = context_length(target.raw)
    hint_env = f"set {ALLOW_LONGER}=1 where SGLang runs (it then serves past the derived length)"
    out = []
    serving = target_len
    if context is not None:
        serving = context
        if context > target_len and _where(rel, "user_context_length"):
            if allow_longer:
                out.append(_line(code, rel, "user_context_length", f"--context-length {context} is above the target's "
                                 f"derived context length {target_len}; {ALLOW_LONGER} is set, so SGLang serves it "
                                 "(positions past the trained length: incorrect outputs)", "--max-model-len",
                                 "serve at most the derived length, or extend the target's RoPE scaling",
                                 severity=WARNING, file=target.source))
            else:
                out.append(_line(code, rel, "user_context_length", f"refuses --context-length {context}: above the "
                                 f"target's derived context length {target_len} (\"User-specified context_length "
                                 f"({context}) is greater than the derived context_length ({target_len})\")",
                                 "--max-model-len", f"serve at most {target_len}, or {hint_env}", file=target.source))
                return out
    if not algorithm or draft is None or draft.raw is target.raw or draft.source == target.source:
        return out
    draft_len = context_length(draft.raw)
    if serving > draft_len and _where(rel, "draft_context_length"):
        if allow_longer:
            out.append(_line(code, rel, "draft_context_length", f"the draft is built at the target's context length "
                             f"{serving}, above its own {draft_len}; {ALLOW_LONGER} is set, so SGLang raises the "
                             f"draft's max_position_embeddings to {serving} (its RoPE runs past the length it was "
                             "trained on)", "max_position_embeddings",
                             "prefer a draft trained at the serving length", severity=WARNING, file=draft.source))
        else:
            out.append(_line(code, rel, "draft_context_length", f"refuses the draft: SGLang builds it at the target's "
                             f"context length {serving}, above the draft's derived {draft_len} (\"Target model's "
                             f"context_length ({serving}) is greater than the derived context_length ({draft_len})\")",
                             "max_position_embeddings", f"{hint_env}, or serve with --context-length {draft_len}",
                             file=draft.source))
    return out


def pipeline_check(rel: Release, target, algorithm: str | None, pp: int) -> list[Diagnostic]:
    if pp <= 1:
        return []
    r = rules()
    out = []
    for name in ("dflash_pipeline", "dspark_pipeline"):
        if algorithm in r[name]["algorithms"] and _where(rel, name):
            out.append(_line(r[name]["code"], rel, name, f"refuses --pp-size {pp} with {algorithm} (\"{r[name]['says']}\" "
                             "for serving outside PD prefill)", "--pp", "use --pp 1"))
    archs = list(target.architectures or [])
    single = set(_start_facts(rel).get("single_stage_architectures") or [])
    if set(archs) & single and _where(rel, "single_stage_target"):
        out.append(_line(r["single_stage_target"]["code"], rel, "single_stage_target", f"refuses --pp-size {pp}: the "
                         f"target class {archs[0]} asserts it is the only pipeline stage", "--pp",
                         "use --pp 1 (tensor parallelism spreads this model)", file=target.source))
    ple = _int(_text(target.raw).get(r["ple_pipeline"]["key"]))
    if ple and ple > 0 and _where(rel, "ple_pipeline"):
        out.append(_line(r["ple_pipeline"]["code"], rel, "ple_pipeline", f"refuses --pp-size {pp} for a target with "
                         f"per-layer inputs ({r['ple_pipeline']['key']} {ple}) under CUDA graphs (its pipeline relay "
                         "drops per_layer_inputs)", "--pp", "use --pp 1, or serve with --disable-cuda-graph",
                         file=target.source))
    return out


def _registered(rel: Release, arch: str) -> bool:
    archs = _start_facts(rel).get("architectures")
    return not archs or arch in archs


def architecture_check(rel: Release, draft, target, algorithm: str | None) -> list[Diagnostic]:
    """A draft class SGLang does not register (and transformers does not define) is refused at load."""
    if not algorithm or draft is None or draft.source == target.source or not _where(rel, "unregistered_architecture"):
        return []
    archs = list(draft.architectures or [])
    if not archs or any(_registered(rel, a) for a in archs) or _in_transformers(archs[0]):
        return []
    return [_line(rules()["unregistered_architecture"]["code"], rel, "unregistered_architecture", f"refuses the draft: "
                  f"{archs[0]} is not a model class SGLang registers (\"Cannot find model module. '{archs[0]}' is not a "
                  "registered model\")", "architectures", "serve this draft with an engine that has its class "
                  "(vLLM), or convert it to a format SGLang loads", file=draft.source)]


def _in_transformers(arch: str) -> bool:
    """SGLang falls back to transformers' class of that name (model_loader/utils.py): only when it exists."""
    try:
        import transformers  # heavy: only for a draft class SGLang does not register
    except ImportError:
        return False
    try:
        return getattr(transformers, arch, None) is not None
    except Exception:  # noqa: BLE001 - transformers' lazy module raising on a name is "not there"
        return False


def _tp_sides(draft, target, algorithm):
    sides = [("target", target.raw, target.source)]
    if algorithm and draft is not None and draft.source != target.source and draft.raw is not target.raw:
        sides.append(("draft", draft.raw, draft.source))
    return sides


def tp_check(rel: Release, draft, target, algorithm: str | None, tp: int) -> list[Diagnostic]:
    """The model constructors' splits over tp: `assert total_num_heads % tp_size == 0`, the KV heads
    (`% tp_size` or `tp_size %`), and divide() of a tower's or the MLP's widths."""
    if tp <= 1 or not _where(rel, "attention_heads"):
        return []
    code = rules()["attention_heads"]["code"]
    for side, raw, source in _tp_sides(draft, target, algorithm):
        parts = [("", _text(raw))] + [(f"{k}.", raw[k]) for k in ("vision_config", "audio_config")
                                       if isinstance(raw.get(k), dict)]
        for prefix, cfg in parts:
            heads = _int(cfg.get("num_attention_heads"))
            if heads and heads % tp:
                return [_line(code, rel, "attention_heads", f"refuses --tp-size {tp}: the {side}'s {prefix}"
                              f"num_attention_heads {heads} is not a multiple of it (the attention asserts "
                              "total_num_heads % tp_size == 0)", f"{prefix}num_attention_heads",
                              f"pick a --tp that divides {heads}", file=source)]
            kv = _int(cfg.get("num_key_value_heads"))
            mla = cfg.get("kv_lora_rank") is not None
            if kv and not mla and not prefix and (kv % tp if kv >= tp else tp % kv):
                return [_line(code, rel, "attention_heads", f"refuses --tp-size {tp}: the {side}'s "
                              f"{kv} KV heads and tp do not divide each other", "num_key_value_heads",
                              f"pick a --tp that divides {kv} or is a multiple of it", file=source)]
            widths = ["hidden_size", "intermediate_size"] if prefix else rules()["divide"]["keys"]
            for key in widths:
                width = _int(cfg.get(key))
                if width and width % tp and _where(rel, "divide"):
                    return [_line(code, rel, "divide", f"refuses --tp-size {tp}: the {side}'s {prefix}{key} {width} "
                                  f"is split over tp (\"{width} is not divisible by {tp}\")", f"{prefix}{key}",
                                  f"pick a --tp that divides {width}", file=source)]
    return []


def _key(raw: dict, dotted: str) -> Any:
    """A config value by dotted path ("dspark_config.markov_rank"); `text_config.` reads the config itself where it
    has no text config (SGLang's _get_text_config)."""
    head, _, rest = dotted.partition(".")
    if not rest:
        return raw.get(head)
    holder = _text(raw) if head == "text_config" else raw.get(head)
    return holder.get(rest) if isinstance(holder, dict) else None


def dspark_v4_rank_check(rel: Release, draft) -> list[Diagnostic]:
    """SRG776 for DeepSeek-V4's own DSpark drafter: the rank DeepseekV4ForCausalLMDSpark reads (sglang_limits.yaml
    `dspark_v4_markov_rank`: dspark_markov_rank first, never only the top-level markov_rank the dense rule reads)."""
    rule = rules()["dspark_v4_markov_rank"]
    if not _where(rel, "dspark_v4_markov_rank"):
        return []
    keys = rule["rank_keys"]
    key, value = next(((k, _key(draft.raw, k)) for k in keys if _key(draft.raw, k) is not None), (None, None))
    try:
        rank = int(value) if value is not None else 0
    except (TypeError, ValueError):
        rank = None
    if rank is not None and rank > 0:
        return []
    said = "none of them is set (0)" if key is None else f"{key}: {value!r}"
    why = ("int() of it fails" if rank is None else "\"DSpark markov_rank must be >= 0\" (dspark_config.py)"
           if rank < 0 else "\"DSpark V4 draft requires markov_rank > 0\"")
    return [_line(rule["code"], rel, "dspark_v4_markov_rank", "refuses DeepSeek-V4's own DSpark drafter: it builds this "
                  f"{rule['architecture']} draft (a dspark_* key) under DSPARK as DeepseekV4ForCausalLMDSpark, which "
                  f"reads the Markov head's rank from {', else '.join(keys)}: {said}, refused by {why}",
                  key or keys[0], "write dspark_markov_rank (the Markov head's rank; DeepSeek-V4-Flash-DSpark publishes "
                  "256) at the top level of config.json", file=draft.source)]


def draft_config_check(rel: Release, draft, target, algorithm: str | None) -> list[Diagnostic]:
    """What the draft class asserts of its own config while SGLang builds it."""
    out = []
    r = rules()
    if algorithm == "DSPARK" and draft is not None and sglang_builds_dspark_v4(draft.raw):
        out += dspark_v4_rank_check(rel, draft)
    elif algorithm == "DSPARK" and draft is not None and _where(rel, "dspark_markov_rank"):
        rank = draft.raw.get("markov_rank")
        if not (isinstance(rank, (int, float)) and not isinstance(rank, bool) and rank > 0):
            nested = (draft.raw.get("dflash_config") or {}).get("markov_rank") \
                if isinstance(draft.raw.get("dflash_config"), dict) else None
            also = f"; the config nests it (dflash_config.markov_rank {nested}), which SGLang does not read" \
                if nested is not None else ""
            out.append(_line(r["dspark_markov_rank"]["code"], rel, "dspark_markov_rank", "refuses the DSpark draft: it "
                             f"reads a top-level markov_rank > 0 (\"DSpark requires markov_rank > 0\"), got "
                             f"{rank!r}{also}", "markov_rank", "write markov_rank at the draft config's top level",
                             file=draft.source))
    target_type = str(_text(target.raw).get("model_type") or target.raw.get("model_type") or "")
    text = _text(target.raw)
    if algorithm in ("EAGLE", "NEXTN") and draft is not None and draft.source == target.source:
        norm = r["nextn_fused_norm"]
        hidden = _int(text.get("hidden_size"))
        if target_type in norm["model_types"] and hidden is not None and _where(rel, "nextn_fused_norm") and not (
                norm["min_exclusive"] < hidden <= norm["max"] and hidden % norm["multiple"] == 0):
            out.append(_line(norm["code"], rel, "nextn_fused_norm", f"the NEXTN draft's fused eh_norm fails at the first "
                             f"draft step on CUDA: hidden_size {hidden} is not in ({norm['min_exclusive']}, {norm['max']}] "
                             f"and a multiple of {norm['multiple']}", "hidden_size",
                             "serve this MTP layer with vLLM, or a target whose hidden size the kernel takes",
                             file=target.source))
        one = r["nextn_one_layer"]
        layers = _int(text.get("num_nextn_predict_layers"))
        if target_type in one["model_types"] and layers is not None and layers != 1 and _where(rel, "nextn_one_layer"):
            out.append(_line(one["code"], rel, "nextn_one_layer", f"refuses the NEXTN draft: num_nextn_predict_layers "
                             f"{layers} (\"Only 1 nextn layer is supported\")", "num_nextn_predict_layers",
                             "serve with vLLM's MTP (it runs every MTP layer)", file=target.source))
    freq = r["nextn_moe_layer_freq"]
    if target_type in freq["model_types"] and text.get("n_routed_experts") is not None \
            and "moe_layer_freq" not in text and _where(rel, "nextn_moe_layer_freq"):
        out.append(_line(freq["code"], rel, "nextn_moe_layer_freq", "refuses the target: its MoE layers read "
                         "config.moe_layer_freq, which this config does not set (no default)", "moe_layer_freq",
                         "add \"moe_layer_freq\": 1 to the target's config.json (DeepSeek's own value)",
                         file=target.source))
    return out


def eagle_class_check(rel: Release, draft, algorithm: str | None) -> list[Diagnostic]:
    """A named silent failure: SGLang builds the class the config names; an EAGLE-1 head written as a plain
    LlamaForCausalLM loads as a plain Llama and its fc is dropped (engine card `eagle_draft_architectures`)."""
    if algorithm != "EAGLE" or draft is None:
        return []
    renames = card("sglang").wiring.eagle_draft_architectures
    archs = list(draft.architectures or [])
    if not archs or archs[0] not in renames or _int(draft.raw.get("num_hidden_layers")) not in (1, 2):
        return []
    return [diag(rules()["eagle1_as_llama"]["code"], f"{_label(rel)} builds this EAGLE head as {archs[0]} "
                 f"(the class its config names): a plain Llama, the head's fc dropped; it drafts from unrelated "
                 f"hidden states", Location(draft.source, key_path="architectures"),
                 f"set the draft config's architectures to [\"{renames[archs[0]]}\"] (SGLang's EAGLE class)")]


def capture_check(rel: Release, draft, target, algorithm: str | None, producer: str | None) -> list[Diagnostic]:
    """A named silent failure: the target layers SGLang's EAGLE-3 capture hands the head (surgery/sglang/rules.py,
    held to SGLang's own functions by tests/sglang_engine/test_oracle.py) are not the ones the head was trained
    on (its format's convention, surgery/formats/)."""
    if algorithm != "EAGLE3" or draft is None:
        return []
    fmt = format_of(draft, producer)
    L = target.num_layers
    trained = trained_on(fmt, L) if L else None
    if trained is None:
        return []
    text = _text(target.raw)
    ids = sglang_aux_ids_read(draft.raw)
    captured = sglang_layers_to_capture(str(text.get("model_type") or target.raw.get("model_type") or ""), L, ids)
    if tuple(captured) == tuple(trained[0]):
        return []
    read = f"eagle_config.eagle_aux_hidden_state_layer_ids {ids}" if ids is not None else \
        "no nested eagle_config ids, so its default (2, L // 2, L - 3)"
    return [diag("SRG779", f"{_label(rel)} hands the head target layers {list(captured)} (it reads {read}), the head "
                 f"was trained on {list(trained[0])} ({trained[1]}), both as inputs of those layers: it drafts from "
                 "the wrong hidden states and acceptance drops, with nothing logged",
                 Location(draft.source, key_path="eagle_config.eagle_aux_hidden_state_layer_ids"),
                 "write the trained ids where SGLang reads them (eagle_config.eagle_aux_hidden_state_layer_ids, "
                 "in SGLang's numbering: each id minus one)")]


def sglang_start_check(plan, draft, target, *, version: str | None, algorithm: str | None,
                       context_length_asked: int | None, kv_cache_dtype: str | None,
                       attention_backend: str | None, producer: str | None = None, environ=None) -> list[Diagnostic]:
    """Every SGLang limit of the judged release for an SGLang plan; nothing for another engine."""
    rt = plan.runtime
    if rt.engine != "sglang":
        return []
    rel, note = judged(version)
    if rel is None:
        return [note] if note else []
    env = os.environ if environ is None else environ
    allow_longer = str(env.get(ALLOW_LONGER, "")).strip().lower() in ("1", "true", "yes")
    out = [note] if note else []
    refused_at_args = (kv_cache_dtype_check(rel, kv_cache_dtype, target)
                       + attention_backend_check(rel, attention_backend, algorithm, target)
                       + pipeline_check(rel, target, algorithm, rt.pp_size))
    out += refused_at_args
    out += context_check(rel, draft, target, algorithm, context_length_asked, allow_longer)
    out += architecture_check(rel, draft, target, algorithm)
    out += tp_check(rel, draft, target, algorithm, rt.tp_size)
    out += draft_config_check(rel, draft, target, algorithm)
    out += eagle_class_check(rel, draft, algorithm)
    out += capture_check(rel, draft, target, algorithm, producer)
    return out
