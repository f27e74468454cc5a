"""Draft-family specifics read off a config the way vLLM reads them: MTP layer counts (per family,
data in config_defaults.yaml) and EAGLE-3 auxiliary hidden-state layer ids."""
from __future__ import annotations

from typing import Any

from ..text.diagnostics import Location, fail
from .model import DefaultUsed
from ..resources import load_data


def _lookup(cfg: dict, dotted: str):
    node: Any = cfg
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def mtp_facts(cfg: dict, text: dict, table: dict, source: str, used: list) -> dict:
    """MTP layer facts, read the way vLLM reads them for this family (data in config_defaults.yaml):
    `mtp_count_keys` (first present wins; dotted paths, text config first, then the top level),
    `mtp_count_default` when none is present, `mtp_serve_at_most` (vLLM builds at most this many,
    e.g. MiMo-V2 and LongCat serve one), `mtp_step_pattern_key` (a string with one character per
    physical layer of one MTP step: Nemotron-H `mtp_hybrid_override_pattern`), `mtp_required_keys`
    (fields the family's MTP code reads with no default: listed in `mtp_missing_keys` when absent) and
    `mtp_layer_types_key` (per-MTP-layer types, one per MTP layer: dots3_note `mtp_layer_types`)."""
    keys = table.get("mtp_count_keys") or ["num_nextn_predict_layers"]
    count, where = None, None
    for key in keys:
        for level, prefix in ((text, "text_config." if text is not cfg else ""), (cfg, "")):
            value = _lookup(level, key)
            if value is not None:
                count, where = value, prefix + key
                break
        if count is not None:
            break
    default = table.get("mtp_count_default", table.get(keys[0]))
    if count is None and default is not None:
        count, where = default, keys[0]
        if not any(u.key.split(".")[-1] == where for u in used):  # num_nextn_predict_layers: already recorded
            used.append(DefaultUsed(where, count))
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= 4096):
        raise fail("SRG205", f"`{where}` must be an MTP layer count in 0..4096, got {count!r}"[:200],
                   Location(source, key_path=where))
    served = count
    cap = table.get("mtp_serve_at_most")
    if count is not None and isinstance(cap, int):
        served = min(count, cap)
    per_step = 1
    pattern_key = table.get("mtp_step_pattern_key")
    if pattern_key:
        pattern = _lookup(text, pattern_key) if _lookup(text, pattern_key) is not None else _lookup(cfg, pattern_key)
        if pattern is not None:
            if not isinstance(pattern, str) or not pattern:
                raise fail("SRG205", f"`{pattern_key}` must be a non-empty string, got {pattern!r}"[:200],
                           Location(source, key_path=pattern_key))
            per_step = len(pattern)
    # fields the family's MTP code reads without a default (vLLM fails on a config without them)
    required = table.get("mtp_required_keys") or []
    missing = [k for k in required if _lookup(text, k) is None and _lookup(cfg, k) is None]
    types_key = table.get("mtp_layer_types_key")
    types = (_lookup(text, types_key) if _lookup(text, types_key) is not None else _lookup(cfg, types_key)) \
        if types_key else None
    if types is not None and not isinstance(types, list):
        raise fail("SRG205", f"`{types_key}` must be a list of layer types, got {types!r}"[:200],
                   Location(source, key_path=types_key))
    return {"num_mtp_layers": count, "num_mtp_layers_served": served, "mtp_layers_per_step": per_step,
            "mtp_missing_keys": missing, "mtp_layer_types_count": len(types) if types is not None else None}


def aux_layer_ids(cfg: dict, source: str = "<config>") -> list[int] | None:
    """EAGLE-3 auxiliary hidden-state layer ids as vLLM reads them from the draft config
    (`get_eagle3_aux_layers_from_config`): the top-level key, else `eagle_config`'s."""
    ids = cfg.get("eagle_aux_hidden_state_layer_ids")
    if not ids and isinstance(cfg.get("eagle_config"), dict):
        ids = cfg["eagle_config"].get("eagle_aux_hidden_state_layer_ids")
    if not ids:
        return None
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i <= 4096
                                            for i in ids):
        raise fail("SRG205", f"`eagle_aux_hidden_state_layer_ids` must be a list of layer indices, got {ids!r}"[:200],
                   Location(source, key_path="eagle_aux_hidden_state_layer_ids"))
    return list(ids)


def _layer_id_list(ids, key: str, source: str) -> list[int] | None:
    if ids is None or ids == []:
        return None
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) and -1 <= i <= 4096
                                            for i in ids):
        raise fail("SRG205", f"`{key}` must be a list of layer indices, got {ids!r}"[:200], Location(source, key_path=key))
    return list(ids)


# Where vLLM 0.32 reads a DFlash / DSpark draft's own target-layer numbering, in its order
# (v1/worker/gpu/spec_decode/eagle/eagle3_utils.py `get_eagle3_aux_layers_from_config`, after the
# top-level `eagle_aux_hidden_state_layer_ids`): `dflash_config.target_layer_ids`, the DSpark
# `dspark_target_layer_ids`, the dense DSpark top-level `target_layer_ids`. These ids name the target
# layer whose OUTPUT the draft reads, so vLLM captures id + 1 (the -1 of algos.py `update_dflash`).
BLOCK_DRAFT_ID_KEYS = ("dflash_config.target_layer_ids", "dspark_target_layer_ids", "target_layer_ids")


def block_draft_target_layer_ids(cfg: dict, source: str = "<config>") -> list[int] | None:
    """A DFlash / DSpark draft's `target_layer_ids` in the draft's own numbering (first key of
    BLOCK_DRAFT_ID_KEYS present), or None."""
    for key in BLOCK_DRAFT_ID_KEYS:
        value = _lookup(cfg, key)
        if value:
            return _layer_id_list(value, key, source)
    return None


# vLLM 0.32's order for the token id that fills parallel-drafting slots (llm_base_proposer.py
# `_init_parallel_drafting_params`, v1/worker/gpu/spec_decode/utils.py `get_parallel_drafting_token_id`).
# As there, a key that is present decides, null or not, except top-level `mask_token_id`, which counts
# only when not null (`"mask_token_id" in dflash_config`, `hasattr` for the last three): a present null
# is no usable token (vLLM fails on it), not a reason to read the next key.
MASK_TOKEN_KEYS = ("dflash_config.mask_token_id", "mask_token_id", "dspark_noise_token_id", "pard_token",
                   "ptd_token_id")


def _mask_token_key(cfg: dict) -> tuple[str, object] | None:
    dflash = cfg.get("dflash_config")
    if isinstance(dflash, dict) and "mask_token_id" in dflash:
        return "dflash_config.mask_token_id", dflash["mask_token_id"]
    if cfg.get("mask_token_id") is not None:
        return "mask_token_id", cfg["mask_token_id"]
    for key in MASK_TOKEN_KEYS[2:]:
        if key in cfg:
            return key, cfg[key]
    return None


def parallel_drafting_token_id(cfg: dict, source: str = "<config>") -> int | None:
    """The mask / noise token id a parallel-drafting head fills its extra slots with, read as vLLM
    reads it, or None (none written, or the key vLLM reads holds null)."""
    found = _mask_token_key(cfg)
    if found is None or found[1] is None:
        return None
    key, value = found
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise fail("SRG205", f"`{key}` must be a token id, got {value!r}"[:200], Location(source, key_path=key))
    return value


def nested_mask_token(cfg: dict) -> str | None:
    """The dotted key of a mask token written inside a nested config object where no vLLM release
    known to surgery/data/vllm_config_spelling.yaml reads it (e.g. `eagle_config.mask_token_id`), or
    None. SpecForge's own nested spelling, `dflash_config.mask_token_id`, is read by every one of them."""
    rules = load_data("data/vllm_config_spelling.yaml")
    read = {k for entry in rules["releases"] for k in (entry.get("mask_token") or {}).get("reads", ())}
    nested = rules["nested_mask_token"]
    for container in nested["containers"]:
        inner = cfg.get(container)
        if not isinstance(inner, dict):
            continue
        for name in nested["names"]:
            key = f"{container}.{name}"
            if key not in read and inner.get(name) is not None:
                return key
    return None


def num_aux(cfg: dict, source: str = "<config>") -> int | None:
    """How many auxiliary hidden states the EAGLE-3 fc layer consumes (vLLM llama_eagle3: the
    config's `num_aux_hidden_states`, else the length of the configured ids, else 3)."""
    n = cfg.get("num_aux_hidden_states")
    if isinstance(n, int) and not isinstance(n, bool):
        return n
    ids = aux_layer_ids(cfg, source)
    return len(ids) if ids else None
