"""Config dict -> `ModelFacts` (surgery/facts/model.py), without transformers.

Everything the resolver checks comes from here: per-layer type / head_dim / KV heads / window /
KV-shared flag, hidden and vocab sizes, draft-specific fields. Where a field is missing we apply
the default the transformers config class would apply (data in `data/config_defaults.yaml`) and
record it, so the plan can say "head_dim: default 256 used".
"""
from __future__ import annotations

import dataclasses
import json
from functools import lru_cache
from typing import Any

import copy

from ..text.diagnostics import Location, SurgeryError, fail
from ..formats import normalise_config
from ..engine.servedarch import speculative_class
from .drafts import (aux_layer_ids, block_draft_target_layer_ids, mtp_facts, nested_mask_token, num_aux,
                     parallel_drafting_token_id)
from .jsonread import check_depth, read_config_from, strip_annotations
from .model import FULL, SLIDING, DefaultUsed, LayerFacts, ModelFacts
from ..resources import data_dir, load_data

MAX_SANE = 1 << 31  # any layer count / width / vocab above this is a corrupted config
# written as null, transformers' config classes derive these in __post_init__ (head_dim = hidden_size //
# num_attention_heads, num_key_value_heads = num_attention_heads): the class default applies only when absent
CLASS_DERIVED = ("head_dim", "num_key_value_heads")


@lru_cache(maxsize=1)
def defaults_table() -> dict[str, dict[str, Any]]:
    return load_data("data/config_defaults.yaml")


@lru_cache(maxsize=1)
def class_defaults() -> dict[str, dict[str, Any]]:
    """model_type -> the declared defaults of its transformers config class for the fields the facts
    read (data/config_class_defaults.json, generated from the installed transformers by
    tools/gen_config_class_defaults.py): what transformers sets when config.json omits the key (issue 42)."""
    with open(data_dir() / "config_class_defaults.json", encoding="utf-8") as fh:
        return json.load(fh)["defaults"]


def family_defaults(model_type: str) -> dict[str, Any]:
    """The defaults for one config level: the generic fallbacks ("*"), the transformers class's
    declared defaults, then config_defaults.yaml's per-family rules (derivations transformers makes in
    code: layer_types periods, forced full last layer, KV sharing of assistants)."""
    table = defaults_table()
    return {**table["*"], **class_defaults().get(model_type, {}), **table.get(model_type, {})}


class _Reader:
    """Reads fields of one config level with defaults, recording each default used."""

    def __init__(self, cfg: dict, defaults: dict, source: str, prefix: str):
        self.cfg = cfg
        self.defaults = defaults
        self.source = source
        self.prefix = prefix
        self.used: list[DefaultUsed] = []

    def get(self, key: str, fallback: Any = None, record: bool = True) -> Any:
        value = self.cfg.get(key)
        if value is not None:
            return value
        if key in self.cfg and key in CLASS_DERIVED:
            return fallback  # an explicit null: transformers derives it (head_dim, num_key_value_heads)
        if key in self.defaults:
            if record:
                self.used.append(DefaultUsed(self.prefix + key, self.defaults[key]))
            return self.defaults[key]
        return fallback

    def int_(self, key: str, required: bool = False, fallback: int | None = None, minimum: int = 0) -> int | None:
        value = self.get(key, fallback)
        if value is None:
            if required:
                raise fail("SRG201", f"`{key}` is missing and has no default",
                           Location(self.source, key_path=self.prefix + key))
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise fail("SRG205", f"`{key}` must be an integer, got {value!r}"[:200],
                       Location(self.source, key_path=self.prefix + key))
        if value < minimum or value > MAX_SANE:
            raise fail("SRG205", f"`{key}` = {_shown(value)} is out of bounds "
                       f"[{minimum}, {MAX_SANE}]", Location(self.source, key_path=self.prefix + key))
        return value


def _shown(value: int) -> str:
    """`f"{n:.3g}"` converts to float and raised OverflowError beyond ~1e308 (found by fuzzing)."""
    if abs(value) < 1e12:
        return str(value)
    digits = str(abs(value))
    return f"{'-' if value < 0 else ''}{digits[0]}.{digits[1:3]}e+{len(digits) - 1}"


def _text_config(cfg: dict, source: str) -> tuple[dict, str]:
    """(the text model's config, its key prefix): `text_config` of a multimodal config, else the config."""
    text = cfg.get("text_config")
    if text is None:
        return cfg, ""
    if not isinstance(text, dict):
        raise fail("SRG202", "`text_config` must be an object", Location(source, key_path="text_config"))
    return text, "text_config."


def _geometry(r, top_defaults: dict, source: str, prefix: str) -> dict:
    """The sizes and per-layer facts the layer maps are built from (defaults recorded in `r.used`)."""
    _derive_num_hidden_layers(r, source, prefix)
    hidden = r.int_("hidden_size", required=True, minimum=1)
    vocab = r.int_("vocab_size", required=True, minimum=1)
    n_layers = r.int_("num_hidden_layers", required=True, minimum=1)
    if n_layers > 4096:
        raise fail("SRG205", f"`num_hidden_layers` = {n_layers} is out of bounds [1, 4096]",
                   Location(source, key_path=prefix + "num_hidden_layers"))
    n_heads = r.int_("num_attention_heads", required=True, minimum=1)
    kv_heads = r.int_("num_key_value_heads", fallback=n_heads, minimum=1)
    head_dim = r.int_("head_dim", fallback=max(hidden // n_heads, 1), minimum=1)
    window = r.int_("sliding_window", minimum=1)

    layer_types = _layer_types(r, n_layers, source, prefix)
    shared = r.int_("num_kv_shared_layers", fallback=0)
    if top_defaults.get("all_layers_kv_shared") and not shared:
        # Gemma4(Unified)AssistantConfig.__post_init__: an assistant shares KV in every layer
        shared = n_layers
        r.used.append(DefaultUsed(prefix + "num_kv_shared_layers", n_layers))
    if shared > n_layers:
        raise fail("SRG202", f"`num_kv_shared_layers` = {shared} exceeds `num_hidden_layers` = {n_layers}",
                   Location(source, key_path=prefix + "num_kv_shared_layers"))
    first_shared = n_layers - shared
    per_layer = _per_layer_dims(r, layer_types, head_dim, kv_heads, source, prefix)
    layers = tuple(
        LayerFacts(i, lt, per_layer[i][0], per_layer[i][1], window if lt == SLIDING else None,
                   shared > 0 and i >= first_shared)
        for i, lt in enumerate(layer_types)
    )
    return {"hidden": hidden, "vocab": vocab, "n_layers": n_layers, "n_heads": n_heads, "kv_heads": kv_heads,
            "head_dim": head_dim, "window": window, "layer_types": layer_types, "shared": shared,
            "first_shared": first_shared, "per_layer": per_layer, "layers": layers}


def _rope_theta(text: dict):
    """`rope_theta`, else the full-attention entry of `rope_parameters` (transformers 5's layout)."""
    rope_theta = text.get("rope_theta")
    rope_params = text.get("rope_parameters")
    if rope_theta is None and isinstance(rope_params, dict):
        sub = rope_params.get(FULL, rope_params)
        rope_theta = sub.get("rope_theta") if isinstance(sub, dict) else None
    return rope_theta


def _draft_head_scalars(cfg: dict, source: str) -> dict:
    """What a draft head's config says about the target it reads: aux ids, block-drafter keys, mask token."""
    nested = cfg.get("dflash_config") if isinstance(cfg.get("dflash_config"), dict) else None
    return {
        "target_hidden_size": cfg.get("target_hidden_size"),
        "eagle_aux_hidden_state_layer_ids": aux_layer_ids(cfg, source),
        "num_aux_hidden_states": num_aux(cfg, source),
        "block_draft_target_layer_ids": block_draft_target_layer_ids(cfg, source),
        "parallel_drafting_token_id": parallel_drafting_token_id(cfg, source),
        "nested_mask_token": nested_mask_token(cfg),
        "markov_rank": cfg.get("markov_rank"),
        "nested_markov_rank": nested.get("markov_rank") if nested is not None else None,
        # SpecForge's DFlash family: dflash_config.projector_type None = DFlash, "dspark", "domino" (GRU head)
        "block_draft_projector": nested.get("projector_type") if nested is not None else None,
    }


TYPE_TESTS = {
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "list": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "bool": lambda v: isinstance(v, bool),
}


@lru_cache(maxsize=1)
def config_types() -> dict:
    return load_data("data/config_types.yaml")


def check_types(cfg: dict, source: str) -> None:
    """SRG755: a key whose value has a type the field cannot take (data/config_types.yaml), at its key path,
    on the top level and on text_config, and inside the RoPE dicts; null passes (the class default)."""
    table = config_types()

    def check(level: dict, prefix: str, fields: dict) -> None:
        for key, kinds in fields.items():
            value = level.get(key)
            if value is None or any(TYPE_TESTS[k](value) for k in kinds):
                continue
            raise fail("SRG755", f"`{prefix}{key}` must be {' or '.join(kinds)}, got {type(value).__name__} "
                       f"{value!r}"[:240], Location(source, key_path=prefix + key))

    levels = [(cfg, "")]
    if isinstance(cfg.get("text_config"), dict):
        levels.append((cfg["text_config"], "text_config."))
    for level, prefix in levels:
        check(level, prefix, table["fields"])
        for rope_key in ("rope_scaling", "rope_parameters"):
            rope = level.get(rope_key)
            if not isinstance(rope, dict):
                continue
            check(rope, f"{prefix}{rope_key}.", table["rope_fields"])
            for sub, entry in rope.items():  # rope_parameters per layer type (transformers 5)
                if isinstance(entry, dict):
                    check(entry, f"{prefix}{rope_key}.{sub}.", table["rope_fields"])


def merge_overrides(raw: dict, overrides: dict | None) -> dict:
    """The config as vLLM sees it under dict hf_overrides (nested dicts merged key by key)."""
    out = copy.deepcopy(raw)

    def merge(dst: dict, src: dict) -> None:
        for key, value in src.items():
            if isinstance(value, dict) and isinstance(dst.get(key), dict):
                merge(dst[key], value)
            else:
                dst[key] = copy.deepcopy(value)

    if overrides:
        merge(out, overrides)
    return out


OVERRIDES = "--hf-overrides"


def with_overrides(facts: ModelFacts, overrides: dict | None) -> ModelFacts:
    """The target's facts as the engine serves it under `--hf-overrides` (a dict): the merged config read by
    the one path a config.json takes (facts_from_config: the same bounds, types and codes). A finding at a
    key the overrides set names `--hf-overrides` as its file."""
    if not overrides:
        return facts
    cfg = merge_overrides(facts.raw, overrides)
    try:
        served = facts_from_config(cfg, facts.source)
    except SurgeryError as exc:
        raise SurgeryError([_at_override(d, facts.source, overrides) for d in exc.diagnostics]) from None
    return dataclasses.replace(served, model=facts.model)


def _at_override(d, source: str, overrides: dict):
    loc = d.location
    path = (loc.key_path or "") if loc is not None else ""
    node: Any = overrides
    for part in path.split(".") if path else []:
        if not isinstance(node, dict) or part not in node:
            return d
        node = node[part]
    if not path:
        return d
    return dataclasses.replace(d, message=f"{d.message} (set by --hf-overrides on {source})",
                               location=Location(OVERRIDES, key_path=path))


def facts_from_config(cfg: dict, source: str = "<config>") -> ModelFacts:
    if not isinstance(cfg, dict):
        raise fail("SRG010", f"expected a JSON object, got {type(cfg).__name__}", Location(source))
    check_depth(cfg, source)
    cfg = normalise_config(strip_annotations(cfg), source)  # speculators files: vLLM's view (surgery/formats)
    model_type = cfg.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise fail("SRG010", "`model_type` is missing", Location(source, key_path="model_type"))
    text, prefix = _text_config(cfg, source)
    check_types(cfg, source)
    table = defaults_table()
    text_type = text.get("model_type") if isinstance(text.get("model_type"), str) else \
        table.get(model_type, {}).get("text_model_type", model_type)
    defaults = family_defaults(text_type)
    top_defaults = family_defaults(model_type)
    r = _Reader(text, defaults, source, prefix)
    top = _Reader(cfg, top_defaults, source, "")

    g = _geometry(r, top_defaults, source, prefix)
    hidden, vocab, n_layers, n_heads, kv_heads = g["hidden"], g["vocab"], g["n_layers"], g["n_heads"], g["kv_heads"]
    head_dim, window, layer_types, shared, per_layer = g["head_dim"], g["window"], g["layer_types"], g["shared"], \
        g["per_layer"]

    archs = cfg.get("architectures") or []
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise fail("SRG202", "`architectures` must be a list of strings", Location(source, key_path="architectures"))
    draft_vocab = r.int_("draft_vocab_size", minimum=1)
    if draft_vocab is None:
        draft_vocab = top.int_("draft_vocab_size", minimum=1)
    nextn = r.int_("num_nextn_predict_layers", minimum=0)
    if nextn is None:
        nextn = top.int_("num_nextn_predict_layers", minimum=0)
    backbone = top.int_("backbone_hidden_size", minimum=1)
    tie = cfg.get("tie_word_embeddings", text.get("tie_word_embeddings"))
    if tie is None:
        tie = top.get("tie_word_embeddings")
    rope_theta = _rope_theta(text)
    scalars: dict[str, Any] = {
        "model_type": model_type,
        "text_model_type": text_type,
        "architecture": archs[0] if archs else None,
        "hidden_size": hidden,
        "vocab_size": vocab,
        "output_vocab_size": draft_vocab or vocab,
        "num_hidden_layers": n_layers,
        "num_attention_heads": n_heads,
        "num_kv_heads": kv_heads,
        "head_dim": head_dim,
        "global_head_dim": r.get("global_head_dim", record=False),
        "sliding_window": window,
        "num_kv_shared_layers": shared,
        "num_unshared_layers": g["first_shared"],
        "backbone_hidden_size": backbone,
        "num_nextn_predict_layers": nextn,
        "draft_vocab_size": draft_vocab,
        "tie_word_embeddings": bool(tie),
        "max_position_embeddings": r.get("max_position_embeddings", record=False),
        "rope_theta": rope_theta,
        "hidden_size_per_layer_input": r.get("hidden_size_per_layer_input", record=False),
        "use_ordered_embeddings": cfg.get("use_ordered_embeddings"),
        "has_sliding_layers": SLIDING in layer_types,
        "layer_type_set": sorted(set(layer_types)),
        "has_own_embeddings": None,  # weights facts: unknown from config alone
        **_draft_head_scalars(cfg, source),
        "index_topk": text.get("index_topk", cfg.get("index_topk")),
        "bos_token_id": _token_ids(cfg, text, "bos_token_id", r, top),
        "eos_token_id": _token_ids(cfg, text, "eos_token_id", r, top),
        "pad_token_id": _token_ids(cfg, text, "pad_token_id", r, top),
        "num_centroids": top.get("num_centroids", record=False) if cfg.get("use_ordered_embeddings") else
        cfg.get("num_centroids"),
        "head_dims": sorted({layer_dims[0] for layer_dims in per_layer}),
        "rope_scaling_type": _rope_scaling_type(text),
    }
    scalars["eos_token_ids"] = _as_list(scalars["eos_token_id"])
    scalars["speculative_class"] = speculative_class(archs, cfg)
    scalars.update(mtp_facts(cfg, text, {**top_defaults, **defaults}, source, r.used))
    return ModelFacts(source, model_type, text_type, tuple(archs), scalars, g["layers"],
                      tuple(r.used + top.used), prefix, cfg)


def _derive_num_hidden_layers(r: "_Reader", source: str, prefix: str) -> None:
    """Families whose config.json has no `num_hidden_layers` but a field the config class derives it
    from (data: `num_hidden_layers_from` in config_defaults.yaml): LongCat-Flash 2 * num_layers,
    Nemotron-H len(layers_block_type). The derived value is recorded like a default."""
    rule = r.defaults.get("num_hidden_layers_from")
    if r.cfg.get("num_hidden_layers") is not None or not isinstance(rule, dict):
        return
    value = r.cfg.get(rule.get("key"))
    if value is None:
        return
    if rule.get("length"):
        if not isinstance(value, (list, str)):
            raise fail("SRG205", f"`{rule['key']}` must be a list or string, got {value!r}"[:200],
                       Location(source, key_path=prefix + rule["key"]))
        derived = len(value)
    else:
        if isinstance(value, bool) or not isinstance(value, int):
            raise fail("SRG205", f"`{rule['key']}` must be an integer, got {value!r}"[:200],
                       Location(source, key_path=prefix + rule["key"]))
        derived = value * int(rule.get("times", 1))
    r.cfg = {**r.cfg, "num_hidden_layers": derived}
    r.used.append(DefaultUsed(prefix + "num_hidden_layers", f"{derived} (derived from {rule['key']})"))


def _as_list(value) -> list[int]:
    return value if isinstance(value, list) else ([] if value is None else [value])


def _token_ids(cfg: dict, text: dict, key: str, r: "_Reader", top: "_Reader"):
    """The id (or the sorted ids) as written, top level first; absent at both levels, the config
    class's default (the text config's class, else the top-level class), recorded like any default:
    gemma-3-27b's text_config omits bos_token_id and Gemma3TextConfig gives 2 (issue 42)."""
    if key in cfg or key in text:
        value = cfg.get(key, text.get(key))
    elif key in r.defaults:
        value = r.get(key)
    else:
        value = top.get(key)
    if isinstance(value, list):
        ids = sorted(v for v in value if isinstance(v, int) and not isinstance(v, bool))
        return ids[0] if len(ids) == 1 else ids
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _rope_scaling_type(text: dict) -> str | None:
    rs = text.get("rope_scaling")
    if isinstance(rs, dict):
        kind = rs.get("rope_type", rs.get("type"))
        return kind if isinstance(kind, str) else None
    return None


def _layer_types(r: _Reader, n_layers: int, source: str, prefix: str) -> list[str]:
    types = r.cfg.get("layer_types")
    if types is None:
        # which field (if any) sets the sliding:full period differs per family (data, not code)
        pattern = None
        if r.defaults.get("honours_sliding_window_pattern"):
            pattern = r.get("sliding_window_pattern")
        elif "layer_types_period" in r.defaults:
            pattern = r.defaults["layer_types_period"]
        if pattern is not None:
            if isinstance(pattern, bool) or not isinstance(pattern, int) or pattern < 1:
                raise fail("SRG205", f"`sliding_window_pattern` must be a positive integer, got {pattern!r}",
                           Location(source, key_path=prefix + "sliding_window_pattern"))
            types = [SLIDING if (i + 1) % pattern else FULL for i in range(n_layers)]
            r.used.append(DefaultUsed(prefix + "layer_types", f"sliding with every {pattern}th layer full"))
        else:
            types = [FULL] * n_layers
            r.used.append(DefaultUsed(prefix + "layer_types", "all full_attention"))
    if not isinstance(types, list) or not all(isinstance(t, str) and t for t in types):
        raise fail("SRG202", "`layer_types` must be a list of non-empty strings",
                   Location(source, key_path=prefix + "layer_types"))
    if len(types) != n_layers:
        given = "" if "num_hidden_layers" in r.cfg else " (missing from config.json: the config class's default)"
        raise fail("SRG202", f"`layer_types` has {len(types)} entries but `num_hidden_layers` is {n_layers}{given}",
                   Location(source, key_path=prefix + "layer_types"))
    types = list(types)
    if r.defaults.get("force_last_layer_full") and types[-1] != FULL:
        types[-1] = FULL
        r.used.append(DefaultUsed(prefix + f"layer_types[{n_layers - 1}]", "full_attention (forced, as transformers does)"))
    return types


def _per_layer_dims(r: _Reader, layer_types: list[str], head_dim: int, kv_heads: int, source: str,
                    prefix: str) -> list[tuple[int, int]]:
    """(head_dim, kv_heads) per layer: Gemma 4 full layers use `global_head_dim` and, with
    `attention_k_eq_v`, `num_global_key_value_heads`; an explicit `per_layer_config` wins."""
    dims = [(head_dim, kv_heads)] * len(layer_types)
    explicit = r.cfg.get("per_layer_config")
    if isinstance(explicit, dict):
        dims = list(dims)
        for key, override in explicit.items():
            try:
                idx = int(key)
            except ValueError:
                raise fail("SRG202", f"`per_layer_config` key {key!r} is not a layer index",
                           Location(source, key_path=prefix + "per_layer_config")) from None
            if not 0 <= idx < len(layer_types) or not isinstance(override, dict):
                raise fail("SRG202", f"`per_layer_config` entry {key!r} is invalid",
                           Location(source, key_path=prefix + f"per_layer_config.{key}"))
            hd = override.get("head_dim", dims[idx][0])
            kv = override.get("num_key_value_heads", dims[idx][1])
            if not all(isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_SANE for v in (hd, kv)):
                raise fail("SRG205", f"`per_layer_config.{key}` has an invalid head_dim / num_key_value_heads",
                           Location(source, key_path=prefix + f"per_layer_config.{key}"))
            dims[idx] = (hd, kv)
        return dims
    if "global_head_dim" in r.defaults or "global_head_dim" in r.cfg:
        global_hd = r.int_("global_head_dim", minimum=1, fallback=head_dim)
        k_eq_v = r.cfg.get("attention_k_eq_v", r.defaults.get("attention_k_eq_v", True))
        global_kv = r.cfg.get("num_global_key_value_heads")
        full_kv = global_kv if (k_eq_v and global_kv is not None) else kv_heads
        if isinstance(full_kv, bool) or not isinstance(full_kv, int) or not 0 < full_kv <= MAX_SANE:
            raise fail("SRG205", f"`num_global_key_value_heads` must be a positive integer, got {full_kv!r}",
                       Location(source, key_path=prefix + "num_global_key_value_heads"))
        return [(global_hd, full_kv) if t == FULL else (head_dim, kv_heads) for t in layer_types]
    return dims


def read_facts(ref) -> ModelFacts:
    """The facts of a model: a folder, a config.json, a hub id `org/name[@revision]` (surgery.facts.modelref)
    or a ModelSource. The facts keep the source (`facts.model`) so later checks read the same files
    at the same commit."""
    cfg, source, model = read_config_from(ref)
    return dataclasses.replace(facts_from_config(cfg, source), model=model)
