"""keep: the draft keeps its own module for a role (optionally tied, optionally required in its checkpoint).

Here: the step (what a recipe gives it), the spec, expansion, rendering, and `must_exist_problem` (what `must_exist: true` demands,
the same for every engine); `hf.py`, `vllm.py`: the performers. No engine refuses it."""
from __future__ import annotations

from typing import Literal

from ...text.diagnostics import SurgeryError, diag
from ...live.prepared import Check, NotApplicable
from ...text.records import record
from ..base import Operation, OpUnit, Step, arg
from ..common import Role, layer_set_arg, layers_note, op_layers, step_fields

Tie = Literal["draft_embeddings", "none"]


@record
class KeepStep(Step):
    HELP = ("Declare that the draft keeps its own module for a role (recorded in the plan and verified: not replaced "
            "by the target's).")
    EXAMPLES = [{"role": "lm_head", "because": "draft width differs from the target's"}]

    role: Role = arg("Module role kept by the draft.", ["lm_head"])
    tied_to: Tie | None = arg("The draft's own tie that must stay intact (e.g. lm_head tied to the draft's own "
                              "embedding weight).", ["draft_embeddings"], default=None)
    must_exist: bool | None = arg("The draft checkpoint must bring its own weights for this role (checked at load "
                                  "time); a missing one is an error, never silently replaced or left uninitialised.",
                                  [True], default=None)
    layers: str | None = layer_set_arg(["mtp_layers"], default=None)


@record
class Keep(Operation):
    kind = "keep"
    BOOKKEEPING = Operation.BOOKKEEPING + ("layer_set",)
    DECIDES = ("the module a draft role uses", ("role", "layer"))  # as `share_module` does

    role: str
    tied_to: Tie | None = None
    layer: int | None = None
    layer_set: str | None = None
    must_exist: bool | None = None  # the draft checkpoint must bring its own weights for the role


def expand(resolver, step) -> list[Keep]:
    role = step.args.role
    out = []
    for layer in op_layers(resolver, step):
        suffix = f":{layer}" if layer is not None else ""
        out.append(Keep(id=f"keep:{role}{suffix}", role=role, tied_to=step.args.tied_to, layer=layer,
                        layer_set=step.args.layers, must_exist=step.args.must_exist or None,
                        **step_fields(step)))
    return out


def must_exist_problem(role: str, draft_has_own: bool | None) -> str | None:
    """None when the draft checkpoint brought its own weights for the role; else why not."""
    if draft_has_own is True:
        return None
    if draft_has_own is False:
        return f"the draft checkpoint has no weights for {role} (must_exist: true)"
    return f"the engine cannot tell whether the draft checkpoint brought weights for {role} (must_exist: true)"


def require_own_weights(op, draft, d_path: str, ctx, where: str, cannot_tell: str) -> None:
    """`must_exist: true` on the live draft: SRG407 when its checkpoint brought no weights for the
    role; not applicable (said, with `cannot_tell`) when the engine cannot tell."""
    if not op.must_exist:
        return
    has_own = ctx.draft_has_own(draft, op.role, d_path)
    problem = must_exist_problem(op.role, has_own)
    if has_own is False:
        raise SurgeryError(diag("SRG407", f"{op.id}: {problem} ({where})"))
    if problem is not None:
        raise NotApplicable(problem + cannot_tell)


def own_weights_check(op, draft, d_path: str, ctx):
    """The verification of `must_exist`: the draft checkpoint brought the role's weights."""
    return lambda: Check(op.id, f"the draft checkpoint brought its own {op.role} (must_exist)",
                         ctx.draft_has_own(draft, op.role, d_path) is True)


def render(step: int, ops: list[Keep]) -> list[str]:
    first = ops[0]
    tie = f", tied to {first.tied_to}" if first.tied_to and first.tied_to != "none" else ""
    must = " (must be in the draft checkpoint)" if first.must_exist else ""
    return [f"  [{step}] keep {first.role}{layers_note(ops)}: draft keeps its own{tie}{must}"]


UNIT = OpUnit(kind="keep", step_class=KeepStep, spec=Keep, expand=expand, render=render, label=lambda o: f"keep {o.role}",
              summary="the draft keeps its own module (checked: not the target's; tie kept; present in the checkpoint)")
