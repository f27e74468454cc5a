"""The facts of one model, engine-neutral: per-layer type / head_dim / KV heads / window /
KV-shared flag, flat scalars an expression may name (`FACT_NAMES`), and the defaults used."""
from __future__ import annotations

from dataclasses import field
from typing import Any

from ..text.diagnostics import Location
from ..pipeline import last_unshared_of_type
from ..text.records import Record, record

SLIDING = "sliding_attention"
FULL = "full_attention"


@record
class LayerFacts(Record):
    index: int
    layer_type: str
    head_dim: int
    num_kv_heads: int
    sliding_window: int | None
    kv_shared: bool

    def get(self, fact: str) -> Any:
        return {"layer_type": self.layer_type, "head_dim": self.head_dim, "num_kv_heads": self.num_kv_heads,
                "sliding_window": self.sliding_window, "kv_shared": self.kv_shared}[fact]


@record
class DefaultUsed(Record):
    key: str
    value: Any

    def to_dict(self) -> dict:
        return {"key": self.key, "value": self.value}


@record
class ModelFacts(Record):
    source: str
    model_type: str
    text_model_type: str
    architectures: tuple[str, ...]
    scalars: dict[str, Any]  # flat facts usable in expressions as draft.X / target.X
    layers: tuple[LayerFacts, ...]
    defaults_used: tuple[DefaultUsed, ...] = ()
    key_prefix: str = ""  # "text_config." where the text facts live in a nested config
    raw: dict = field(default_factory=dict, repr=False, compare=False)
    # where the config came from (surgery.facts.modelref.ModelSource): the folder or the pinned hub commit
    # whose other files (tokenizer, safetensors headers) the checks read; None for a bare config dict
    model: Any = field(default=None, repr=False, compare=False)

    def pin(self) -> dict | None:
        return self.model.pin() if self.model is not None else None

    def __getitem__(self, name: str) -> Any:
        return self.scalars[name]

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def unshared_layers(self) -> list[LayerFacts]:
        return [layer for layer in self.layers if not layer.kv_shared]

    def last_unshared_by_type(self) -> dict[str, int]:
        """layer_type -> index of the last layer of that type that writes its own K/V.

        The one place of the "last unshared layer of its type" rule: transformers' Gemma 4
        (`Gemma4TextAttention`, `kv_shared_layer_index`) and vLLM's gemma4 model point every layer of
        the KV-shared tail there, and the draft-side map rule `last_unshared_of_type` reuses it."""
        unshared = sum(1 for layer in self.layers if not layer.kv_shared)
        return last_unshared_of_type([layer.layer_type for layer in self.layers], unshared)

    def own_kv_sources(self) -> dict[int, int]:
        """For a model with a KV-shared tail: shared layer index -> the layer whose K/V it reads.
        Layers of a type with no producer are left out (facts reading reports those)."""
        last = self.last_unshared_by_type()
        return {layer.index: last[layer.layer_type] for layer in self.layers
                if layer.kv_shared and layer.layer_type in last}

    def key_location(self, key: str) -> Location:
        return Location(self.source, key_path=self.key_prefix + key)


# the facts an expression may name (draft.X / target.X); the resolver rejects anything else
FACT_NAMES = (
    "model_type", "text_model_type", "architecture", "hidden_size", "vocab_size", "output_vocab_size",
    "num_hidden_layers", "num_attention_heads", "num_kv_heads", "head_dim", "global_head_dim",
    "sliding_window", "num_kv_shared_layers", "num_unshared_layers", "backbone_hidden_size",
    "num_nextn_predict_layers", "draft_vocab_size", "tie_word_embeddings", "max_position_embeddings",
    "rope_theta", "hidden_size_per_layer_input", "use_ordered_embeddings", "has_sliding_layers",
    "layer_type_set", "has_own_embeddings", "target_hidden_size",
    # added for the recipe library (issue 5)
    "eagle_aux_hidden_state_layer_ids", "num_aux_hidden_states", "index_topk", "bos_token_id", "eos_token_id",
    "pad_token_id", "num_centroids", "head_dims", "rope_scaling_type",
    # added for MTP coverage (issue 18): the MTP layer count however the family spells it
    "num_mtp_layers", "num_mtp_layers_served", "mtp_layers_per_step", "mtp_missing_keys", "mtp_layer_types_count",
    # added for the block / parallel drafters (issue 25): DFlash / DSpark ids in the draft's own numbering,
    # the parallel-drafting mask token, DSpark's Markov head rank
    "block_draft_target_layer_ids", "parallel_drafting_token_id", "markov_rank",
    # issue 35: SpecForge's DSpark spelling, the rank inside dflash_config (vLLM reads the top level only)
    "nested_markov_rank",
    # issue 35: a mask token nested where vLLM does not read it (`eagle_config.mask_token_id`, ...), its key
    "nested_mask_token",
    # issue 42: the eos ids as a list (an int eos is one id of a list that contains it)
    "eos_token_ids",
    # issue 42: the speculative family vLLM's registry (or EAGLE-3 markers) assigns the config; null for a plain LM
    "speculative_class",
    # issue 42: SpecForge's dflash_config.projector_type (null = DFlash; "dspark"; "domino": a GRU correction head)
    "block_draft_projector",
)
