"""share_kv: a draft attention layer reads the mapped target layer's KV cache.

Here: the step (`map:`), the spec, expansion, rendering and the plan-time checks on the maps the
steps read (`check_recipe`: the target layer writes KV of its own, splits over tensor parallelism
and lives on the draft's pipeline stage); `hf.py`, `vllm.py`: the performers."""
from __future__ import annotations


from ...pipeline import pp_layer_range, stage_of_layer
from ...text.records import record
from ..base import Operation, OpUnit, Step
from ..common import compact_ranges, group_by_target, map_arg, step_fields


@record
class ShareKVStep(Step):
    HELP = "Each mapped draft attention layer reads the KV cache of its target layer (no KV of its own)."
    EXAMPLES = [{"map": "kv_source"}]

    map: str = map_arg()


@record
class ShareKV(Operation):
    kind = "share_kv"
    BOOKKEEPING = Operation.BOOKKEEPING + ("map",)  # the map's name; its rows are draft/target_layer
    DECIDES = ("the KV cache a draft layer reads", ("draft_layer",))

    map: str
    draft_layer: int
    target_layer: int


def expand(resolver, step) -> list[ShareKV]:
    m = step.args.map
    return [ShareKV(id=f"share_kv:{m}:{row.draft}->{row.target}", map=m, draft_layer=row.draft,
                    target_layer=row.target, **step_fields(step)) for row in resolver.maps.get(m, ())]


def check_recipe(resolver, steps) -> None:
    """Each map a share_kv step reads, checked once (whether the step's `when` holds or not), unless the
    pipeline is deeper than the target (SRG316 said that already)."""
    if resolver.runtime.pp_size > resolver.target.num_layers:
        return
    for name in dict.fromkeys(step.args.map for step in steps):
        check_kv_map(resolver, name)


def check_kv_map(resolver, name: str) -> None:
    """Checks on a map that KV sharing uses, reported once per target layer (with its draft layers)."""
    spec = resolver.recipe.layer_maps[name]
    loc = resolver.recipe.location(spec.path)
    rt, target = resolver.runtime, resolver.target
    start, end = pp_layer_range(target.num_layers, rt.pp_size - 1, rt.pp_size) if rt.pp_size > 1 else (0, 0)
    readers: dict[int, list[int]] = {}
    for row in resolver.maps[name]:
        readers.setdefault(row.target, []).append(row.draft)
    for t, drafts in readers.items():
        who = f"draft layer{'s' if len(drafts) > 1 else ''} {compact_ranges(drafts)}"
        tl = target.layers[t]
        if tl.kv_shared:
            resolver.add("SRG307", f"map {name}: {who} would read target layer {t}, which is in the target's "
                         f"KV-shared tail (layers {target['num_unshared_layers']}..{target.num_layers - 1}) "
                         f"and writes no KV of its own", loc)
        kv, tp = tl.num_kv_heads, rt.tp_size
        if tp > 1 and not (kv % tp == 0 or tp % kv == 0):
            resolver.add("SRG310", f"map {name}: target layer {t} (read by {who}) has {kv} KV heads, not divisible "
                         f"by tp_size {tp} (nor tp by it)", loc)
        if rt.pp_size > 1 and not start <= t < end:
            resolver.add("SRG316", f"map {name}: target layer {t} (read by {who}) lives on pipeline stage "
                         f"{stage_of_layer(target.num_layers, t, rt.pp_size)} but the draft runs on the last "
                         f"stage (target layers {start}..{end - 1}) with pp_size {rt.pp_size}", loc,
                         "the draft cannot read a KV cache held by another stage")


def render(step: int, ops: list[ShareKV]) -> list[str]:
    desc = "; ".join(f"draft {d} -> target {t}" for d, t in group_by_target([(o.draft_layer, o.target_layer) for o in ops]))
    return [f"  [{step}] share_kv ({ops[0].map}): {desc}"]


UNIT = OpUnit(kind="share_kv", step_class=ShareKVStep, spec=ShareKV, expand=expand, render=render,
              label=lambda o: f"share_kv ({o.map})", check_recipe=check_recipe,
              summary="draft attention layer reads the mapped target layer's KV cache",
              refused_by={"sglang": "SGLang gives the draft worker its own KV pool (EagleDraftWorker.alloc_memory_pool "
                                    "shares only req_to_token_pool); a draft layer cannot read a target layer's cache "
                                    "there. Gemma 4 assistants: use vLLM or HF; docs/sglang.md"})
