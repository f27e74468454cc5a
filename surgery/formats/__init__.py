"""Published draft-config formats (issue 24): speculators, ModelOpt export, EAGLE / SGLang / SpecForge.

`normalise_config` is what `surgery.facts` calls on every config before reading it: a speculators file
becomes the config vLLM builds from it (`SpeculatorsConfig`), everything else passes unchanged (vLLM
reads ModelOpt and EAGLE files as plain HF configs). The original speculators file stays reachable
under `SOURCE_KEY`, so `format_of(facts)` can say which format, producer and convention the draft
came in. Rules are data: surgery/data/formats.yaml.
"""
from __future__ import annotations

from .recognise import DraftFormat, recognise
from .speculators import vllm_hf_config

SOURCE_KEY = "speculators_source_config"  # the original speculators file inside the normalised dict

__all__ = ["DraftFormat", "SOURCE_KEY", "format_of", "normalise_config", "original_config", "recognise"]


def normalise_config(cfg: dict, source: str = "<config>") -> dict:
    """The config as vLLM's draft hf_config holds it (a speculators file), else `cfg` itself."""
    if not isinstance(cfg, dict) or cfg.get("speculators_config") is None or SOURCE_KEY in cfg:
        return cfg
    out = vllm_hf_config(cfg, source)
    out[SOURCE_KEY] = cfg
    return out


def original_config(raw: dict) -> dict:
    """The file as written: the speculators original where the facts hold the normalised view."""
    inner = raw.get(SOURCE_KEY) if isinstance(raw, dict) else None
    return inner if isinstance(inner, dict) else raw


def format_of(facts, producer: str | None = None) -> DraftFormat:
    """The format of the config a `ModelFacts` was read from."""
    return recognise(original_config(facts.raw), facts.source, producer)
