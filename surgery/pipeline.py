"""Layer placement rules the resolver shares: pipeline-parallel placement, as vLLM computes it (`vllm.distributed.utils.get_pp_indices`,
without the VLLM_PP_LAYER_PARTITION override). Reproduced here because the resolver must not import
vLLM; tests/test_pipeline_oracle.py checks it against vLLM's own function."""
from __future__ import annotations


def pp_partitions(num_layers: int, pp_size: int) -> list[int]:
    per = num_layers // pp_size
    parts = [per] * pp_size
    remaining = num_layers % pp_size
    # the remainder goes to all but the last stage, counted from the end (vLLM's balancing rule)
    for i in range(2, remaining + 2):
        parts[-i] += 1
    return parts


def pp_layer_range(num_layers: int, pp_rank: int, pp_size: int) -> tuple[int, int]:
    parts = pp_partitions(num_layers, pp_size)
    start = sum(parts[:pp_rank])
    return start, start + parts[pp_rank]


def stage_of_layer(num_layers: int, layer: int, pp_size: int) -> int:
    end = 0
    for rank, size in enumerate(pp_partitions(num_layers, pp_size)):
        end += size
        if layer < end:
            return rank
    raise ValueError(f"layer {layer} outside 0..{num_layers - 1}")


def last_unshared_of_type(layer_types: list[str], num_unshared: int) -> dict[str, int]:
    """Per layer type, the last target layer of that type outside the KV-shared tail (layers
    `num_unshared..` write no KV of their own): the layer a KV-shared draft layer of that type reads
    (vLLM `_setup_gemma4_kv_sharing`, transformers `store_full_length_kv`). The one place this rule
    lives; the resolver's `last_unshared_of_type` layer-map rule calls it."""
    out: dict[str, int] = {}
    for i, t in enumerate(layer_types[:num_unshared]):
        out[t] = i
    return out
