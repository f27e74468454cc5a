"""share_module: the draft uses the target's module for a role (embedding, lm_head, shared_head, ...).

Everything about this op kind is in this folder:
- here: the step (what a recipe gives it), the spec, how a recipe step expands into specs, the
  plan-time check (`check`: the shapes must fit, from the two configs; what SGLang replaces anyway),
  how a step renders in the plan table;
- `decide.py`: the load-time decision `if_draft_has_own` takes on the live weights, and the
  reversible rebinding both engines perform once they found the two modules;
- `hf.py`, `vllm.py`: the performers, one per engine (finding the modules, engine-specific checks).
No engine refuses it.
"""
from __future__ import annotations

from typing import Literal

from ...engine.cards import ENGINES, card
from ...text.records import record
from ..base import Operation, OpUnit, Step, arg
from ..common import Role, layer_set_arg, layers_note, op_layers, step_fields

Policy = Literal["share", "share_if_identical", "keep"]


@record
class ShareModuleStep(Step):
    HELP = "Replace a draft module (by role) with the target's module object (no copy)."
    EXAMPLES = [{"role": "input_embeddings", "from": "target", "when": "pp_size == 1", "otherwise": "error"}]

    role: Role = arg("Module role, mapped to module paths per engine and architecture.", ["input_embeddings"])
    source: Literal["target"] = arg("Where the module comes from.", ["target"], default="target", key="from")
    if_draft_has_own: Policy | None = arg(
        "Load-time policy when the draft checkpoint carries its own weights for the role (unknowable from "
        "config.json): `share` replaces them anyway; `share_if_identical` shares only when the draft has none or "
        "they equal the target's (vLLM's EAGLE rule, `_maybe_share_embeddings` / `_maybe_share_lm_head`); `keep` "
        "keeps the draft's own and shares only when it has none.", ["share_if_identical"], default=None)
    layers: str | None = layer_set_arg(["mtp_layers"], default=None)


@record
class ShareModule(Operation):
    kind = "share_module"
    BOOKKEEPING = Operation.BOOKKEEPING + ("layer_set", "source")  # source: always `target` (schema)
    DECIDES = ("the module a draft role uses", ("role", "layer"))  # as `keep` does

    role: str
    source: str = "target"
    layer: int | None = None  # per-layer roles (mtp_shared_head) expanded over a layer set
    layer_set: str | None = None
    if_draft_has_own: Policy | None = None  # None = share


def expand(resolver, step) -> list[ShareModule]:
    role = step.args.role
    out = []
    for layer in op_layers(resolver, step):
        suffix = f":{layer}" if layer is not None else ""
        out.append(ShareModule(id=f"share_module:{role}{suffix}", role=role, source=step.args.source,
                               layer=layer, layer_set=step.args.layers,
                               if_draft_has_own=step.args.if_draft_has_own, **step_fields(step)))
    return out


def check(resolver, step) -> bool:
    """Plan time, each step whose `when` holds: the shapes fit (else the step expands to nothing), and
    what the plan's engine replaces whatever the step says."""
    if not check_fits(resolver, step, step.args.role):
        return False
    note_engine_replaces(resolver, step, step.args.role)
    return True


def check_fits(resolver, step, role: str) -> bool:
    """Plan-time checks for sharing a target module with the draft: the shapes must fit (from the
    two configs). False (with the diagnostic added) when they do not: the step expands to nothing."""
    loc = resolver.recipe.location(step.path + ("role",))
    d, t = resolver.draft, resolver.target
    if role in ("input_embeddings", "lm_head") and d["vocab_size"] != t["vocab_size"]:
        resolver.add("SRG313", f"cannot share {role}: draft vocab_size {d['vocab_size']} != target vocab_size "
                     f"{t['vocab_size']}", loc)
        return False
    if role == "input_embeddings":
        width = d["backbone_hidden_size"] or d["target_hidden_size"] or d["hidden_size"]
        if width != t["hidden_size"]:
            resolver.add("SRG314", f"cannot share input_embeddings: the draft consumes embeddings of width {width} "
                         f"but the target's are {t['hidden_size']} wide", loc)
            return False
    if role in ("lm_head", "mtp_shared_head"):
        if d["output_vocab_size"] != t["vocab_size"]:
            resolver.add("SRG313", f"cannot share lm_head: the draft predicts {d['output_vocab_size']} tokens "
                         f"(draft_vocab_size), the target head {t['vocab_size']}", loc,
                         "a reduced-vocabulary draft keeps its own head: use `keep: {role: lm_head}`")
            return False
        if d["hidden_size"] != t["hidden_size"]:
            resolver.add("SRG314", f"cannot share lm_head: draft hidden_size {d['hidden_size']} != target "
                         f"hidden_size {t['hidden_size']}", loc, "use `keep: {role: lm_head}`")
            return False
    return True


# the roles an engine's draft worker may replace wholesale (SGLang's set_embed_and_head)
REPLACED_ROLES = ("input_embeddings", "lm_head", "mtp_shared_head")


def note_engine_replaces(resolver, step, role: str) -> None:
    """Plan time, SGLang: its EAGLE / NEXTN draft worker replaces the draft's embedding and head by
    the target's whatever the draft brought (the card's `wiring.head_always_replaced_for`); a step
    that keeps a draft's own, different module (vLLM's wiring) changes that on SGLang. Said as SRG368
    (info) at the step's `if_draft_has_own`, so the difference is in the plan, not only in the
    hook's log line at load."""
    engine = resolver.runtime.engine
    policy = step.args.if_draft_has_own
    if engine not in ENGINES or policy not in ("share_if_identical", "keep") or role not in REPLACED_ROLES:
        return
    c = card(engine)
    method = ((resolver.recipe.engine or {}).get("vllm") or {}).get("method")
    algorithms = c.methods.get(method or "") or []
    replaced = c.wiring.head_always_replaced_for if c.wiring is not None else []
    if not algorithms or not set(algorithms) <= set(replaced):
        return
    resolver.add("SRG368", f"{engine} ({'/'.join(algorithms)}) replaces the draft's {role} by the target's whatever "
                 f"the draft brought; this step keeps a draft's own, different {role} (`if_draft_has_own: {policy}`, "
                 "vLLM's wiring), so with the recipe such a draft runs on its own module there",
                 resolver.recipe.location(step.path + ("if_draft_has_own",)))



def render(step: int, ops: list[ShareModule]) -> list[str]:
    first = ops[0]
    policy = {"share_if_identical": " (at load: kept if the draft brings distinct weights of its own)",
              "keep": " (at load: only if the draft brings none of its own)"}.get(first.if_draft_has_own or "", "")
    return [f"  [{step}] share_module {first.role}{layers_note(ops)}: draft uses the target's module{policy}"]


UNIT = OpUnit(kind="share_module", step_class=ShareModuleStep, spec=ShareModule, expand=expand, render=render,
              check=check,
              label=lambda o: f"share_module {o.role}", summary="the draft uses the target's module for a role; `if_draft_has_own` decided on the live weights")
