"""keep: the draft keeps its own module for a role (optionally tied, optionally required in its checkpoint)."""
from __future__ import annotations

from dataclasses import dataclass

from .base import Operation, OpUnit
from .common import layers_note, op_layers, step_fields


@dataclass(frozen=True, kw_only=True)
class Keep(Operation):
    kind = "keep"
    BOOKKEEPING = Operation.BOOKKEEPING + ("layer_set",)

    role: str
    tied_to: str | None = None  # draft_embeddings | none
    layer: int | None = None
    layer_set: str | None = None
    must_exist: bool | None = None  # the draft checkpoint must bring its own weights for the role


def expand(resolver, step) -> list[Keep]:
    role = step.args["role"]
    out = []
    for layer in op_layers(resolver, step):
        suffix = f":{layer}" if layer is not None else ""
        out.append(Keep(id=f"keep:{role}{suffix}", role=role, tied_to=step.args.get("tied_to"), layer=layer,
                        layer_set=step.args.get("layers"), must_exist=step.args.get("must_exist") or None,
                        **step_fields(step)))
    return out


def render(step: int, ops: list[Keep]) -> list[str]:
    first = ops[0]
    tie = f", tied to {first.tied_to}" if first.tied_to and first.tied_to != "none" else ""
    must = " (must be in the draft checkpoint)" if first.must_exist else ""
    return [f"  [{step}] keep {first.role}{layers_note(ops)}: draft keeps its own{tie}{must}"]


UNIT = OpUnit(
    kind="keep", recipe_key="keep", spec=Keep, expand=expand, render=render,
    label=lambda o: f"keep {o.role}",
    summary="the draft keeps its own module (checked: not the target's; tie kept; present in the checkpoint)",
    refused_by={},
)
