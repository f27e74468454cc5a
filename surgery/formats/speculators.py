"""A speculators-format draft config read the way vLLM 0.32 reads it.

vLLM (transformers_utils/configs/speculators/base.py `SpeculatorsConfig`): the config it builds is
`transformer_layer_config` updated by the algorithm's function in algos.py (`update_eagle3`:
draft_vocab_size, target_hidden_size when set, the four norm flags with their defaults, the
architecture by the layer's model_type, the aux ids when set); the speculative config
(`build_vllm_speculative_config`) takes the method from `speculators_model_type` and k from
`proposal_methods[0].speculative_tokens`; `maybe_override_with_speculators` serves the model named in
`speculators_config.verifier.name_or_path`. The block drafters (`update_dflash`, `update_dspark`)
write the file's `aux_hidden_state_layer_ids` twice: as capture ids and, minus one, in the draft's
own numbering. The per-algorithm rules are data (formats.yaml).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..text.diagnostics import Location, fail
from .table import algorithm, formats_data

DEFAULT_LAYER_MODEL_TYPE = "llama"  # update_eagle3: pre_trained_config.get("model_type", "llama")


@dataclass(frozen=True)
class SpeculatorsFields:
    """What vLLM takes from a speculators file besides the layer config."""

    algorithm: str
    method: str
    num_speculative_tokens: int
    verifier: str
    verifier_architectures: tuple[str, ...]
    norm_written: dict[str, Any]  # the norm flags as the file writes them (absent keys left out)
    norm_vllm: dict[str, Any]  # as vLLM builds them
    norm_speculators: dict[str, Any]  # as the speculators config class would default them
    unread: tuple[str, ...] = ()  # keys vLLM does not read (bookkeeping excluded)
    proposal_methods: int = 1
    default_proposal_method: str | None = None
    first_proposal_type: str | None = None
    extra: dict = field(default_factory=dict)


def _where(source: str, key: str) -> Location:
    return Location(source, key_path=key)


def speculators_fields(cfg: dict, source: str) -> SpeculatorsFields:
    """vLLM's `validate_speculators_config` + `build_vllm_speculative_config`, as coded errors."""
    kind = cfg.get("speculators_model_type")
    algo = algorithm(kind) if isinstance(kind, str) else None
    if algo is not None and algo.get("refused"):
        raise fail("SRG664", f"speculators_model_type {kind!r}: {' '.join(algo['refused'].split())}"[:400],
                   _where(source, "speculators_model_type"))
    if algo is None:
        known = ", ".join(sorted(formats_data()["speculators_algorithms"]))
        raise fail("SRG651", f"speculators_model_type {kind!r} is not one surgery reads (reads: {known})"[:300],
                   _where(source, "speculators_model_type"))
    spec = cfg.get("speculators_config")
    if not isinstance(spec, dict):
        raise fail("SRG650", "`speculators_config` must be an object", _where(source, "speculators_config"))
    methods = spec.get("proposal_methods")
    if not isinstance(methods, list) or not methods or not isinstance(methods[0], dict):
        raise fail("SRG650", "`speculators_config.proposal_methods` must be a non-empty list of objects "
                   "(vLLM: 'No proposal methods found in speculators config')",
                   _where(source, "speculators_config.proposal_methods"))
    k = methods[0].get("speculative_tokens")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 4096:
        raise fail("SRG650", f"`proposal_methods[0].speculative_tokens` must be an integer in 1..4096, got {k!r}"[:300],
                   _where(source, "speculators_config.proposal_methods[0].speculative_tokens"))
    verifier = spec.get("verifier")
    name = verifier.get("name_or_path") if isinstance(verifier, dict) else None
    if not isinstance(name, str) or not name:
        raise fail("SRG650", "`speculators_config.verifier.name_or_path` is missing (vLLM serves this model as the "
                   "target)", _where(source, "speculators_config.verifier.name_or_path"))
    layer = cfg.get("transformer_layer_config")
    if not isinstance(layer, dict):
        raise fail("SRG650", "`transformer_layer_config` must be an object (vLLM: 'Must provide "
                   "transformer_layer_config')", _where(source, "transformer_layer_config"))
    for key, to in _required(algo).items():
        if key not in cfg:
            raise fail("SRG650", f"`{key}` is required for speculators_model_type {kind} (vLLM sets `{to}` from it)",
                       _where(source, key))
    archs = verifier.get("architectures") if isinstance(verifier, dict) else None
    data = formats_data()
    known_top = set(data["speculators_read"]) | set(data["speculators_bookkeeping"]) | algorithm_reads(algo)
    known_spec = set(data["speculators_config_read"]) | set(data["speculators_config_bookkeeping"])
    unread = [k2 for k2 in cfg if k2 not in known_top] + \
        [f"speculators_config.{k2}" for k2 in spec if k2 not in known_spec]
    defaults = algo["defaults"]
    written = {key: cfg[key] for key in defaults if key in cfg}
    norm_vllm = {key: cfg.get(key, default) for key, default in defaults.items()}
    norm_spec = {key: cfg.get(key, algo.get("speculators_class_defaults", {}).get(key, default))
                 for key, default in defaults.items()}
    return SpeculatorsFields(
        algorithm=kind, method=algo["method"], num_speculative_tokens=k, verifier=name,
        verifier_architectures=tuple(a for a in archs if isinstance(a, str)) if isinstance(archs, list) else (),
        norm_written=written, norm_vllm=norm_vllm, norm_speculators=norm_spec, unread=tuple(unread),
        proposal_methods=len(methods), default_proposal_method=spec.get("default_proposal_method"),
        first_proposal_type=methods[0].get("proposal_type"),
        extra={"parallel_drafting": True} if algo.get("parallel_drafting") else {})


def _required(algo: dict) -> dict:
    """key -> where vLLM puts it, for the keys vLLM indexes without a default (a KeyError in algos.py)."""
    out = dict(algo.get("required") or {})
    if algo.get("aux_ids"):
        out[algo["aux_ids"]["key"]] = algo["aux_ids"]["to"]
    return out


def algorithm_reads(algo: dict) -> set[str]:
    """The top-level keys an algorithm's update function in algos.py reads (formats.yaml entry)."""
    keys = set(algo.get("always", [])) | set(algo.get("copied_if_set", [])) | set(_required(algo))
    keys |= {rule["from"] for rule in (algo.get("set") or {}).values()} | set(algo.get("defaults", {}))
    return keys


def _put(out: dict, dotted: str, value: Any) -> None:
    head, _, rest = dotted.partition(".")
    if rest:
        inner = out.get(head)
        out[head] = inner = dict(inner) if isinstance(inner, dict) else {}
        _put(inner, rest, value)
    else:
        out[head] = value


def block_draft_ids(cfg: dict, algo: dict, source: str) -> tuple[list[int], list[int]]:
    """(capture ids, the draft's own ids) as vLLM derives them from `aux_hidden_state_layer_ids`:
    update_dflash / update_dspark copy them to eagle_aux_hidden_state_layer_ids and write
    `[i - 1 for i in aux_layer_ids]` as the target layer whose output the draft reads."""
    rule = algo["aux_ids"]
    ids = cfg[rule["key"]]
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i <= 4096
                                            for i in ids):
        raise fail("SRG205", f"`{rule['key']}` must be a list of layer indices, got {ids!r}"[:200],
                   _where(source, rule["key"]))
    return list(ids), [i + rule["shift"] for i in ids]


def _architecture(cfg: dict, algo: dict, layer_type: str, kind: str, source: str) -> str:
    if algo.get("architecture"):
        given = cfg.get("architectures") if isinstance(cfg.get("architectures"), list) else []
        kept = [a for a in given if a in algo.get("architectures_kept", [])]
        return kept[0] if kept else algo["architecture"]
    arch = algo["architectures"].get(layer_type)
    if arch is None:
        raise fail("SRG651", f"transformer_layer_config.model_type {layer_type!r} has no {kind} "
                   f"architecture in vLLM (known: {', '.join(sorted(algo['architectures']))})",
                   _where(source, "transformer_layer_config.model_type"))
    return arch


def vllm_hf_config(cfg: dict, source: str) -> dict:
    """The dict vLLM builds its draft `hf_config` from (`extract_transformers_pre_trained_config`):
    `transformer_layer_config` plus the algorithm's fields. A layer model_type the algorithm has no
    architecture for is refused, as vLLM refuses it."""
    fields_ = speculators_fields(cfg, source)
    algo = algorithm(fields_.algorithm)
    out = dict(cfg["transformer_layer_config"])
    for key in algo.get("always", []):
        out[key] = cfg.get(key)
    for key in algo.get("copied_if_set", []):
        if cfg.get(key) is not None and (key != "eagle_aux_hidden_state_layer_ids" or cfg.get(key)):
            out[key] = cfg[key]
    out.update(fields_.norm_vllm)
    layer_type = out.get("model_type", DEFAULT_LAYER_MODEL_TYPE)
    out["architectures"] = [_architecture(cfg, algo, layer_type, fields_.algorithm, source)]
    for key in algo.get("replaces", []):
        out.pop(key, None)
    for key, to in (algo.get("required") or {}).items():
        _put(out, to, cfg[key])
    if algo.get("aux_ids"):
        capture, native = block_draft_ids(cfg, algo, source)
        out[algo["aux_ids"]["to"]] = capture
        _put(out, algo["aux_ids"]["to_native"], native)
    for to, rule in (algo.get("set") or {}).items():
        value = cfg.get(rule["from"], rule["default"])
        _put(out, to, (not value) if rule.get("negate") else value)
    if "model_type" not in out:
        out["model_type"] = DEFAULT_LAYER_MODEL_TYPE
    return out
