"""Config facts: a normalised, engine-neutral view of a HF `config.json`, read without transformers.

- `jsonread`: bounded, strict reading of the file (size and depth caps, coded errors);
- `model`: `ModelFacts` / `LayerFacts` / `DefaultUsed` and the fact names expressions may use;
- `fromconfig`: config dict -> facts, with the per-family defaults of data/config_defaults.yaml;
- `drafts`: MTP layer counts and EAGLE-3 aux layer ids, read the way vLLM reads them.
"""
from .fromconfig import facts_from_config, read_facts
from .jsonread import parse_config_text, read_config
from .model import FACT_NAMES, DefaultUsed, LayerFacts, ModelFacts

__all__ = ["FACT_NAMES", "DefaultUsed", "LayerFacts", "ModelFacts", "facts_from_config", "parse_config_text",
           "read_config", "read_facts"]
