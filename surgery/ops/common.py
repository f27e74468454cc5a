"""Helpers the op units share (expansion bookkeeping, range rendering, the step fields several kinds take)."""
from __future__ import annotations

from typing import Literal

from .base import arg

# the module roles a recipe names (each engine card maps them to module paths: surgery/data/engines/)
Role = Literal["input_embeddings", "lm_head", "final_norm", "rotary_emb", "per_layer_embeddings", "mtp_shared_head"]


def map_arg():
    """`map:` of a step that works per mapped layer pair."""
    return arg("Name of a layer map.", ["kv_source"], minLength=1, maxLength=64)


def layer_set_arg(examples: list[str], help: str = "Name of a layer set (see `layer_sets`): the operation is "
                  "expanded once per layer index of the set.", **kw):
    """`layers:` naming a layer set (recipe.py checks the name exists: SRG124)."""
    return arg(help, examples, minLength=1, maxLength=64, **kw)


# The code a KV map reports when a compared fact differs between a draft layer and the target layer
# whose cache it reads: the resolver at plan time, share_kv's vLLM performer on the live layers.
MATCH_CODES = {"head_dim": "SRG303", "num_kv_heads": "SRG304", "sliding_window": "SRG305", "layer_type": "SRG306"}


def compact_ranges(values: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2, 5, 7-8'."""
    out, run = [], []
    for v in sorted(set(values)):
        if run and v == run[-1] + 1:
            run.append(v)
        else:
            if run:
                out.append(_run(run))
            run = [v]
    if run:
        out.append(_run(run))
    return ", ".join(out)


def _run(run: list[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}"


def step_fields(step) -> dict:
    """The fields every spec takes from its recipe step."""
    return {"step": step.index, "because": step.args.because, "otherwise": step.args.otherwise}


def group_by_target(pairs: list[tuple[int, int]]) -> list[tuple[str, int]]:
    groups: dict[int, list[int]] = {}
    for d, t in pairs:
        groups.setdefault(t, []).append(d)
    return [(compact_ranges(ds), t) for t, ds in sorted(groups.items(), key=lambda kv: min(kv[1]))]


def layers_note(ops: list) -> str:
    layers = [o.layer for o in ops if getattr(o, "layer", None) is not None]
    return f" (layer{'s' if len(layers) > 1 else ''} {compact_ranges(layers)})" if layers else ""


def op_layers(resolver, step) -> list[int | None]:
    """A per-layer op expands over its layer set; without `layers:` it is one op (layer None)."""
    if step.args.layers is None:
        return [None]
    return list(resolver.sets.get(step.args.layers, ()))
