"""Config translation between draft formats (`surgery convert`), pure data: no file is touched here.

Each conversion goes through one neutral form, the head as vLLM serves it: the layer config (carried
verbatim), the head fields (draft_vocab_size, target_hidden_size, the four norm flags with the value
vLLM uses), the aux ids the head was trained on in vLLM's convention, k and the verifier. Anything that
would be lost or guessed is refused (SRG660): an unknown field, ids whose convention is unknown, a
norm flag whose meaning depends on the reader (norm_before_residual absent from a speculators file),
ids the target convention cannot spell (SRG662). `why` records every field written and its reason.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..text.diagnostics import Location, fail
from .conventions import from_vllm, trained_on
from .recognise import IDS, NESTED, recognise
from .table import formats_data

TARGETS = ("speculators", "eagle", "modelopt")
NORMS = ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output")
HEAD_KEYS = ("draft_vocab_size", "target_hidden_size", *NORMS, IDS, NESTED)
# eagle_config keys vLLM reads (llama_eagle3.py) besides the ids, and what their absence means
NESTED_READ = {"use_aux_hidden_state": True, "norm_before_fc": None}
# ModelOpt bookkeeping inside eagle_config that vLLM never reads: carried verbatim
NESTED_CARRIED = ("use_input_layernorm_in_first_layer", "use_last_layernorm", "use_mtp_layernorm",
                  "next_layer_regular", "parallel_draft_step", "parallel_draft_heads_num_layers")
DEFAULT_K = 3
# what ModelOpt's exporter writes in every eagle_config (formats.yaml modelopt `producer_markers`)
MODELOPT_MARK = "next_layer_regular"
EAGLE3_ARCHS = ("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM", "Eagle3Qwen3ForCausalLM")


@dataclass
class Head:
    layer: dict  # the transformer layer config, verbatim
    fields: dict  # draft_vocab_size, target_hidden_size (when set), norm flags (vLLM's values)
    ids: tuple[int, ...] | None  # trained ids, vLLM's convention; None = the engine default (= every producer's)
    nested_extra: dict  # eagle_config keys carried verbatim (no ids)
    k: int | None
    verifier: str | None
    why: dict[str, str] = field(default_factory=dict)
    verifier_architectures: tuple[str, ...] = ()


def _refuse(message: str, key: str | None = None):
    return fail("SRG660", message, Location(None, key_path=key) if key else None)


def _block_draft(cfg: dict) -> str | None:
    """What makes `cfg` a DFlash / DSpark draft (formats.yaml `block_drafters`), or None."""
    data = formats_data()["block_drafters"]
    kind = cfg.get("speculators_model_type") if cfg.get("speculators_config") is not None else None
    if kind in data["speculators_model_types"]:
        return f"a speculators {kind} file"
    archs = cfg.get("architectures") if isinstance(cfg.get("architectures"), list) else []
    hit = [a for a in archs if a in data["architectures"]]
    return f"a native {hit[0]} config" if hit else None


def read_head(cfg: dict, num_layers: int, producer: str | None = None) -> Head:
    block = _block_draft(cfg)
    if block is not None:
        raise fail("SRG666", f"{block}: convert translates EAGLE-3 heads only; its neutral form has no mask token, "
                   "block size, anchor sampling or causal flag, so they would be lost",
                   Location(None, key_path="speculators_model_type" if block.startswith("a speculators")
                            else "architectures"))
    fmt = recognise(cfg, producer=producer)
    if fmt.name == "hf" and _plain_causal_lm(cfg):
        raise fail("SRG663", f"a plain {cfg['architectures'][0]} config (an EAGLE-1 head, or a draft model) has no "
                   "form in the formats surgery converts: vLLM 0.32 reads speculators files of "
                   f"{', '.join(sorted(formats_data()['speculators_algorithms']))} only (no EAGLE-1 `eagle`), and the "
                   "ModelOpt / EAGLE-3 configs are EAGLE-3 heads", Location(None, key_path="architectures"))
    if fmt.name == "hf":
        raise _refuse("not a draft head in a known format (no speculators_config, eagle_config or "
                      "LlamaForCausalLMEagle3 + draft_vocab_size)")
    if num_layers is None and not fmt.ids_written:
        trained = ((), "no ids written: every producer's default, vLLM's default")
    elif num_layers is None and fmt.producer is not None and fmt.producer_from != "--producer" and \
            fmt.producer in ("speculators", "vllm", "eagle"):
        trained = (tuple(fmt.ids_written), f"written ids in {fmt.producer}'s convention = vLLM's")
    elif num_layers is None:
        raise _refuse("translating these ids needs the target's layer count: pass --target", IDS)
    else:
        trained = trained_on(fmt, num_layers)
    if trained is None:
        raise _refuse(f"ids {list(fmt.ids_written)} are written but whose convention they are in is not known "
                      "(EAGLE, SpecForge and SGLang write the same keys): pass --producer", IDS)
    ids = tuple(trained[0]) if fmt.ids_written else None  # none written: every producer's default, kept absent
    if fmt.name == "speculators":
        s = fmt.speculators
        if s.unread:
            raise _refuse(f"fields vLLM does not read and surgery does not know: {', '.join(s.unread)}", s.unread[0])
        missing = [k for k in s.norm_vllm if k not in s.norm_written and s.norm_vllm[k] != s.norm_speculators[k]]
        if missing:
            raise _refuse(f"`{missing[0]}` is absent: vLLM reads {s.norm_vllm[missing[0]]}, the speculators class "
                          f"{s.norm_speculators[missing[0]]}; write it explicitly first", missing[0])
        layer = dict(cfg["transformer_layer_config"])
        nested = layer.pop(NESTED, {}) if isinstance(layer.get(NESTED), dict) else {}
        fields_ = {k: cfg.get(k) for k in ("draft_vocab_size", "target_hidden_size") if cfg.get(k) is not None}
        fields_.update(s.norm_vllm)
        return Head(layer, fields_, ids, dict(nested), s.num_speculative_tokens, s.verifier,
                    {"ids": trained[1]}, tuple(s.verifier_architectures))
    layer = {k: v for k, v in cfg.items() if k not in HEAD_KEYS}
    nested = dict(cfg.get(NESTED) or {})
    nested.pop(IDS, None)
    if nested.get(MODELOPT_MARK) is True:  # ModelOpt's constant mark (written back by --to modelopt)
        nested.pop(MODELOPT_MARK)
    unknown = [k for k in nested if k not in NESTED_READ and k not in NESTED_CARRIED]
    if unknown:
        raise _refuse(f"eagle_config.{unknown[0]} is not a field surgery knows the meaning of", f"{NESTED}.{unknown[0]}")
    if nested.get("use_aux_hidden_state") is False:
        raise _refuse("eagle_config.use_aux_hidden_state is false: an EAGLE-1 style head, not EAGLE-3",
                      f"{NESTED}.use_aux_hidden_state")
    fields_ = {k: cfg.get(k) for k in ("draft_vocab_size", "target_hidden_size") if cfg.get(k) is not None}
    # llama_eagle3.py: getattr(config, flag, False); norm_before_fc: eagle_config's, else the top-level
    for flag in NORMS:
        fields_[flag] = bool(cfg.get(flag, False))
    if "norm_before_fc" in nested:
        fields_["norm_before_fc"] = bool(nested.pop("norm_before_fc"))
    return Head(layer, fields_, ids, nested, None, None, {"ids": trained[1]})


def _plain_causal_lm(cfg: dict) -> bool:
    """An EAGLE-1 head's (or a draft model's) config: an ordinary *ForCausalLM, no draft-format marker."""
    archs = cfg.get("architectures") if isinstance(cfg.get("architectures"), list) else []
    return bool(archs) and all(isinstance(a, str) and a.endswith("ForCausalLM") for a in archs) \
        and not any(k in cfg for k in ("draft_vocab_size", NESTED, IDS))


def write_config(head: Head, to: str, num_layers: int, verifier: str | None, k: int | None,
                 verifier_architectures: tuple[str, ...] = ()) -> tuple[dict, dict]:
    """(config.json, why per field) in format `to`. `verifier_architectures`: the --target's, which
    the speculators library's own config class requires (VerifierConfig.architectures; vLLM does
    not read them)."""
    if to not in TARGETS:
        raise _refuse(f"--to {to!r}: one of {', '.join(TARGETS)}")
    why: dict[str, str] = {}
    if to == "speculators":
        verifier = verifier or head.verifier
        if not verifier:
            raise _refuse("a speculators file names its verifier (speculators_config.verifier.name_or_path): pass --target")
        k = k or head.k or DEFAULT_K
        layer = dict(head.layer)
        if head.nested_extra:
            layer[NESTED] = dict(head.nested_extra)
            why[f"transformer_layer_config.{NESTED}"] = "carried verbatim (vLLM reads use_aux_hidden_state there)"
        out: dict[str, Any] = {"speculators_model_type": "eagle3", "transformer_layer_config": layer}
        why["transformer_layer_config"] = "the source's layer config, verbatim"
        for key, value in head.fields.items():
            out[key] = value
            why[key] = "explicit, the value vLLM serves (absent norm_before_residual means True to vLLM, False to speculators)" \
                if key in NORMS else "from the source"
        if head.ids is not None:
            out[IDS] = list(head.ids)
            why[IDS] = f"vLLM's convention (input of layer i); {head.why.get('ids')}"
        archs = list(head.verifier_architectures if verifier == head.verifier and head.verifier_architectures
                     else verifier_architectures)
        if not archs:
            raise _refuse("the speculators library requires the verifier's architectures "
                          "(speculators_config.verifier.architectures): pass --target with its config.json")
        out["speculators_config"] = {
            "algorithm": "eagle3", "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": k}],
            "verifier": {"name_or_path": verifier, "architectures": archs}}
        why["speculators_config.verifier.architectures"] = \
            "from the source" if archs == list(head.verifier_architectures) else "--target's architectures " \
            "(required by the speculators library's VerifierConfig; vLLM does not read them)"
        why["speculators_config.proposal_methods[0].speculative_tokens"] = \
            "from the source" if head.k == k else ("--num-speculative-tokens" if k != DEFAULT_K or head.k else f"default {DEFAULT_K}")
        why["speculators_config.verifier.name_or_path"] = "from the source" if verifier == head.verifier else "--target"
        return out, why
    out = dict(head.layer)
    why["(layer fields)"] = "the source's layer config, verbatim"
    archs = out.get("architectures") or []
    if not any(a in EAGLE3_ARCHS for a in archs):
        out["architectures"] = ["LlamaForCausalLMEagle3"]
        why["architectures"] = "the format demands an EAGLE-3 head architecture (vLLM's EAGLEConfig keeps it)"
    for key, value in head.fields.items():
        if key in NORMS and not value:
            continue  # vLLM reads an absent flag as False on this path (getattr(config, flag, False))
        out[key] = value
        why[key] = "from the source" if key not in NORMS else "true in the source (absent would mean false)"
    nested = dict(head.nested_extra)
    if to == "eagle":
        if nested:
            raise _refuse(f"eagle_config keys {sorted(nested)} have no place in a plain EAGLE-3 config: use --to modelopt")
        if head.ids is not None:
            out[IDS] = list(head.ids)
            why[IDS] = f"top level, vLLM's / EAGLE's convention (input of layer i); {head.why.get('ids')}"
    else:
        if head.ids is not None:
            nested[IDS] = list(from_vllm(head.ids, "modelopt", num_layers))
            why[f"{NESTED}.{IDS}"] = "ModelOpt's convention (output of layer k = vLLM id - 1), nested as ModelOpt exports"
        nested[MODELOPT_MARK] = True
        why[f"{NESTED}.{MODELOPT_MARK}"] = "ModelOpt's exporter writes it in every export: the mark that says the ids are ModelOpt's"
        out[NESTED] = nested
    if head.verifier or head.k:
        why["(dropped)"] = f"verifier {head.verifier!r} and k {head.k}: serving metadata the {to} format has no field for"
    return out, why


def converted(cfg: dict, to: str, num_layers: int, producer: str | None = None, verifier: str | None = None,
              k: int | None = None, verifier_architectures: tuple[str, ...] = ()) -> tuple[dict, dict]:
    head = read_head(cfg, num_layers, producer)
    return write_config(head, to, num_layers, verifier, k, verifier_architectures)


def format_names() -> list[str]:
    return list(formats_data()["formats"])
