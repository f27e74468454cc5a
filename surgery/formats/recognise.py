"""Which published format a draft config.json is in, from its markers (formats.yaml `formats`), and
what that says about its aux-layer ids: where they are written, in whose convention, and which ids
each vLLM runner will read."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..text.diagnostics import Location, fail
from .speculators import SpeculatorsFields, speculators_fields
from .table import algorithm, conventions, formats
from ..engine.servedarch import served_architecture

NESTED = "eagle_config"
IDS = "eagle_aux_hidden_state_layer_ids"


@dataclass(frozen=True)
class DraftFormat:
    name: str  # speculators | modelopt | nested | eagle | hf (a plain HF config, no draft-format marker)
    producer: str | None  # whose aux-id convention the file's ids are in; None = not known from the file
    producer_from: str  # "format markers", "--producer", or "unknown"
    ids_top: tuple[int, ...] | None  # eagle_aux_hidden_state_layer_ids as written at the top level
    ids_nested: tuple[int, ...] | None  # eagle_config.eagle_aux_hidden_state_layer_ids as written
    speculators: SpeculatorsFields | None = None
    vllm_model_type: str | None = None  # the model_type of the hf_config vLLM builds for the draft
    # with no producer known: the conventions the ids may be in, one per producer that writes this layout
    # (formats.yaml `writers`; "vllm" stands for a writer whose export may already be in vLLM's convention)
    writers: tuple[str, ...] = ()

    @property
    def ids_written(self) -> tuple[int, ...] | None:
        return self.ids_top or self.ids_nested

    @property
    def where_written(self) -> str | None:
        if self.ids_top:
            return IDS
        return f"{NESTED}.{IDS}" if self.ids_nested else None

    def to_dict(self) -> dict[str, Any]:
        out = {"format": self.name, "producer": self.producer, "producer_from": self.producer_from,
               "ids_written": list(self.ids_written) if self.ids_written else None,
               "ids_written_at": self.where_written, "vllm_model_type": self.vllm_model_type}
        if self.speculators is not None:
            s = self.speculators
            out["speculators"] = {"algorithm": s.algorithm, "method": s.method,
                                  "num_speculative_tokens": s.num_speculative_tokens, "verifier": s.verifier,
                                  "norm_written": s.norm_written, "norm_vllm": s.norm_vllm,
                                  "norm_speculators": s.norm_speculators, "unread": list(s.unread)}
        return out


def _ids(value: Any, source: str, key: str) -> tuple[int, ...] | None:
    if not value:
        return None
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i <= 4096
                                              for i in value):
        raise fail("SRG205", f"`{key}` must be a list of layer indices, got {value!r}"[:200], Location(source, key_path=key))
    return tuple(value)


def _lookup(cfg: dict, dotted: str):
    for part in dotted.split("."):
        cfg = cfg.get(part) if isinstance(cfg, dict) else None
    return cfg


def _matches(markers: dict, cfg: dict) -> bool:
    if not all(_lookup(cfg, key) is not None for key in markers.get("has", [])):
        return False
    archs = markers.get("architectures")
    if archs is not None:
        given = cfg.get("architectures") if isinstance(cfg.get("architectures"), list) else []
        if not set(given) & set(archs):
            return False
    part = markers.get("architectures_containing")
    if part is not None:
        given = cfg.get("architectures") if isinstance(cfg.get("architectures"), list) else []
        if not any(isinstance(a, str) and part in a for a in given):
            return False
    return True


def format_name(cfg: dict) -> str:
    for name, spec in formats().items():
        if _matches(spec["markers"], cfg):
            return name
    return "hf"


def recognise(cfg: dict, source: str = "<config>", producer: str | None = None) -> DraftFormat:
    """The draft's format; `producer` (from `--producer`) overrides what the markers say."""
    if producer is not None and producer not in conventions():
        raise fail("SRG011", f"--producer {producer!r} is not one of: {', '.join(sorted(conventions()))}")
    name = format_name(cfg)
    marked, unknown_why = _marked_producer(formats().get(name, {}), cfg)
    nested = cfg.get(NESTED) if isinstance(cfg.get(NESTED), dict) else {}
    spec = speculators_fields(cfg, source) if name == "speculators" else None
    vllm_type = "speculators" if name == "speculators" else ("eagle" if name in ("modelopt", "nested", "eagle") or
                                                              _served_as_eagle3(cfg) else None)
    block = (algorithm(spec.algorithm) or {}).get("aux_ids") if spec is not None else None
    top_key = block["key"] if block else IDS  # a block drafter's capture ids (algos.py update_dflash)
    return DraftFormat(
        name=name, producer=producer or marked,
        producer_from="--producer" if producer else ("format markers" if marked else (unknown_why or "unknown")),
        ids_top=_ids(cfg.get(top_key), source, top_key), ids_nested=_ids(nested.get(IDS), source, f"{NESTED}.{IDS}"),
        speculators=spec, vllm_model_type=vllm_type,
        writers=() if (producer or marked) else _writers(formats().get(name, {}), cfg, bool(unknown_why)))


def _writers(spec: dict, cfg: dict, marked_unknown: bool) -> tuple[str, ...]:
    """The conventions a format's unmarked ids may be in: its `writers` (only the marked producer when a
    mark names one whose convention is unknown for this model type), each as its convention, plus
    "vllm" for a writer whose export may have shifted the ids for vLLM already (`unknown_for_model_types`)."""
    producers = spec.get("writers") or ()
    if marked_unknown:
        producers = [m["producer"] for m in spec.get("producer_markers") or () if _matches(m, cfg)][:1]
    out = []
    for producer in producers:
        out.append(producer)
        if cfg.get("model_type") in (conventions().get(producer, {}).get("unknown_for_model_types") or ()):
            out.append("vllm")
    return tuple(dict.fromkeys(out))


def _marked_producer(spec: dict, cfg: dict) -> tuple[str | None, str | None]:
    """The producer a format's markers name: its fixed `producer`, else the first of `producer_markers`
    the file carries; a producer whose convention is unknown for this model type (formats.yaml
    `unknown_for_model_types`) is no producer, with the reason."""
    if spec.get("producer"):
        return spec["producer"], None
    for m in spec.get("producer_markers") or ():
        if _matches(m, cfg):
            rule = conventions().get(m["producer"], {})
            if cfg.get("model_type") in (rule.get("unknown_for_model_types") or ()):
                return None, (f"unknown: {m['producer']} marker ({', '.join(m['has'])}), but its {cfg['model_type']} "
                              "export may have shifted the ids (formats.yaml)")
            return m["producer"], None
    return None, None


def _served_as_eagle3(cfg: dict) -> bool:
    """A config vLLM serves under eagle3 by the name it states (Eagle3DeepseekV2ForCausalLM, ...): vLLM's
    draft hf_config is EAGLEConfig (model_type eagle) whatever the format."""
    archs = cfg.get("architectures") if isinstance(cfg.get("architectures"), list) else []
    return bool(archs) and all(isinstance(a, str) and "Eagle3" in a and served_architecture("eagle3", a) == a
                               for a in archs)
