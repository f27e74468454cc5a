"""share_module: the draft uses the target's module for a role (embedding, lm_head, shared_head, ...)."""
from __future__ import annotations

from dataclasses import dataclass

from .base import Operation, OpUnit
from .common import layers_note, op_layers, step_fields

# what `if_draft_has_own` means, applied at load time by both adapters (surgery/applier/sharing.py)
POLICIES = ("share", "share_if_identical", "keep")


@dataclass(frozen=True, kw_only=True)
class ShareModule(Operation):
    kind = "share_module"
    BOOKKEEPING = Operation.BOOKKEEPING + ("layer_set", "source")  # source: always `target` (schema)

    role: str
    source: str = "target"
    layer: int | None = None  # per-layer roles (mtp_shared_head) expanded over a layer set
    layer_set: str | None = None
    if_draft_has_own: str | None = None  # None = share


def expand(resolver, step) -> list[ShareModule]:
    role = step.args["role"]
    if not resolver.check_share_module(step, role):
        return []
    out = []
    for layer in op_layers(resolver, step):
        suffix = f":{layer}" if layer is not None else ""
        out.append(ShareModule(id=f"share_module:{role}{suffix}", role=role, source=step.args.get("from", "target"),
                               layer=layer, layer_set=step.args.get("layers"),
                               if_draft_has_own=step.args.get("if_draft_has_own"), **step_fields(step)))
    return out


def render(step: int, ops: list[ShareModule]) -> list[str]:
    first = ops[0]
    policy = {"share_if_identical": " (at load: kept if the draft brings distinct weights of its own)",
              "keep": " (at load: only if the draft brings none of its own)"}.get(first.if_draft_has_own or "", "")
    return [f"  [{step}] share_module {first.role}{layers_note(ops)}: draft uses the target's module{policy}"]


UNIT = OpUnit(
    kind="share_module", recipe_key="share_module", spec=ShareModule, expand=expand, render=render,
    label=lambda o: f"share_module {o.role}",
    summary="the draft uses the target's module for a role; `if_draft_has_own` decided on the live weights",
    refused_by={},
)
