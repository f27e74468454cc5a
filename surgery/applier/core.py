"""Engine-neutral apply and verify.

apply_plan runs in two phases. Phase 1 asks each operation's performer for the engine
(surgery/ops/<kind>/<engine>.py, found through the registry) to *prepare* it:
resolve module paths, check shapes and kinds on the live objects, and return the reversible
mutations it would perform; nothing is touched, so any failure leaves both models as they were.
Phase 2 performs the mutations in order with an undo log; if one raises (a bug, an injected fault,
a device error), every earlier mutation (and the failing one, should it have got part-way) is undone in
reverse order before the coded error is raised.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..text.diagnostics import Diagnostic, SurgeryError, diag
from ..live.context import Context
from ..live.mutations import Mutation
from ..live.prepared import Check, NotApplicable, Prepared
from ..ops.base import Operation
from ..ops.registry import UNITS, performer
from ..plan import Plan


@dataclass
class VerifyReport:
    checks: list[Check]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def to_dict(self) -> dict:
        return {"ok": self.ok, "checks": [c.to_dict() for c in self.checks]}


@dataclass
class ApplyReport:
    applied: list[str]
    not_applicable: list[Diagnostic]  # SRG321, one per operation the engine did not perform
    prepared: list[Prepared] = field(repr=False)
    seconds: float = 0.0

    @property
    def decisions(self) -> dict[str, str]:
        return {p.op.id: p.decision for p in self.prepared if p.decision}

    def undo(self) -> None:
        """Undo the applied plan, newest change first (`rollback` below, as a method: a holder of the
        report, the vLLM plugin's state, undoes it without importing the applier)."""
        for p in reversed(self.prepared):
            for m in reversed(p.mutations):
                m.undo()

    def to_dict(self) -> dict:
        return {"applied": self.applied, "not_applicable": [d.to_dict() for d in self.not_applicable],
                "decisions": self.decisions, "seconds": self.seconds}

    def summary(self) -> str:
        """`N not applicable (SRG321: op ids...)`, for one-line reports; empty when all ran."""
        if not self.not_applicable:
            return "0 not applicable"
        shown = "; ".join(d.message for d in self.not_applicable[:3])
        more = f"; ... {len(self.not_applicable) - 3} more" if len(self.not_applicable) > 3 else ""
        return f"{len(self.not_applicable)} not applicable (SRG321: {shown}{more})"


def refusal(op: Operation, engine: str) -> str | None:
    """None if the engine performs this operation, else the reason it cannot (the op unit's declaration)."""
    unit = UNITS.get(op.op)
    return unit.refusal(engine) if unit is not None else f"unknown operation kind {op.op!r}"


def prepare_op(op: Operation, draft: Any, target: Any, context: Context) -> Prepared:
    """The engine's performer of this op kind prepares it (raises NotApplicable / SurgeryError)."""
    return performer(op.op, context.engine).prepare(op, draft, target, context)


def _context_for(plan: Plan, context: Context | None) -> Context:
    if context is not None:
        return context
    if plan.runtime.engine == "hf":
        from ..live.hf import HFContext

        return HFContext()
    raise SurgeryError(diag("SRG011", f"no default context for engine {plan.runtime.engine!r}; pass context= "
                            "(e.g. surgery.live.vllm.VLLMContext)"))


STRICT_OPT_OUTS = ("`surgery apply --no-strict`, SURGERY_STRICT=0, or additional_config "
                   "{\"surgery\": {\"strict\": false}} in vLLM")


def _not_performed(op: Operation, reason: str, engine: str, strict: bool) -> Diagnostic:
    """What an operation the engine cannot perform becomes: an error (SRG322) unless the recipe
    step says `otherwise: skip|warn` or the user opted out of strictness; else SRG321 (a warning
    for `otherwise: warn` and for the opt-out, info for `otherwise: skip`)."""
    policy = op.otherwise
    if policy in ("skip", "warn"):
        return diag("SRG321", f"{op.id}: {reason}", severity="info" if policy == "skip" else "warning")
    if not strict:
        return diag("SRG321", f"{op.id}: {reason} (not strict)", severity="warning")
    return diag("SRG322", f"{op.id}: the {engine} engine cannot perform this operation: {reason}",
                hint="give the step `when:` with `otherwise: skip` (or `warn`) if the recipe may go without it, "
                     "or opt out: " + STRICT_OPT_OUTS)


def prepare_plan(plan: Plan, draft: Any, target: Any, context: Context,
                 strict: bool = True) -> tuple[list[Prepared], list[Diagnostic]]:
    if not plan.ok:
        raise SurgeryError(plan.errors)
    if plan.runtime.engine != context.engine:
        raise SurgeryError(diag("SRG402", f"the plan was resolved for engine {plan.runtime.engine!r} but is being "
                                f"applied with the {context.engine!r} context",
                                hint=f"resolve with --engine {context.engine}"))
    problems = context.static_checks(plan, draft, target)
    if problems:
        raise SurgeryError(problems)
    prepared, not_applicable, errors = [], [], []
    for op in plan.operations:
        reason = refusal(op, context.engine)
        if reason is None:
            try:
                prepared.append(prepare_op(op, draft, target, context))
                continue
            except NotApplicable as exc:
                reason = str(exc)
            except SurgeryError as exc:
                errors.extend(exc.diagnostics)
                continue
            except (AttributeError, IndexError, KeyError, TypeError) as exc:  # a path the live model lacks
                errors.append(diag("SRG402", f"{op.id}: the live models do not have what the plan names "
                                   f"({type(exc).__name__}: {exc})"))
                continue
        d = _not_performed(op, reason, context.engine, strict)
        (errors if d.code == "SRG322" else not_applicable).append(d)
    if errors:
        raise SurgeryError(errors)
    return prepared, not_applicable


def apply_plan(plan: Plan, draft: Any, target: Any, context: Context | None = None,
               fault: Callable[[Operation, Mutation], None] | None = None, strict: bool = True) -> ApplyReport:
    """Apply atomically. Strict (default): an operation the engine cannot perform is an error
    (SRG322) unless its recipe step says `otherwise: skip|warn`. `fault` (tests only) is called
    before each mutation and may raise."""
    start = time.perf_counter()
    context = _context_for(plan, context)
    prepared, not_applicable = prepare_plan(plan, draft, target, context, strict=strict)
    done: list[Mutation] = []  # every mutation whose apply() was entered, the failing one included
    current: Operation | None = None
    try:
        for p in prepared:
            current = p.op
            for m in p.mutations:
                if fault is not None:
                    fault(p.op, m)
                # Logged before apply(): a mutation that raises half-way (e.g. after rebinding, while
                # re-registering) is undone too; undo() of one that recorded nothing is a no-op.
                done.append(m)
                m.apply()
    except Exception as exc:  # any failure: roll back everything, then report with a code
        rollback_errors = []
        for m in reversed(done):
            try:
                m.undo()
            except Exception as undo_exc:  # keep undoing the rest; report it
                rollback_errors.append(f"{m.label}: {undo_exc}")
        detail = f"{type(exc).__name__}: {exc}"
        msg = (f"operation {current.id if current else '?'} failed ({detail}); {len(done)} mutation(s) "
               f"rolled back")
        if rollback_errors:
            msg += "; rollback problems: " + "; ".join(rollback_errors)
        raise SurgeryError(diag("SRG403", msg)) from exc
    return ApplyReport([p.op.id for p in prepared], not_applicable, prepared, time.perf_counter() - start)


def verify_plan(plan: Plan, draft: Any, target: Any, context: Context | None = None,
                report: ApplyReport | None = None) -> VerifyReport:
    """Check every applied operation's invariants on the live objects: the checks each performer
    prepared with the report (`context` only has to fit the plan, as for apply_plan)."""
    _context_for(plan, context)
    if report is None:
        raise SurgeryError(diag("SRG011", "verify_plan needs the ApplyReport returned by apply_plan"))
    checks: list[Check] = []
    for p in report.prepared:
        for make in p.checks:
            try:
                checks.append(make())
            except Exception as exc:  # a check that cannot run is a failed check, with the reason
                checks.append(Check(p.op.id, "check raised", False, f"{type(exc).__name__}: {exc}"))
    return VerifyReport(checks)


def rollback(report: ApplyReport) -> None:
    """Undo an applied plan (reverse order). Used by ablation and by callers that re-wire."""
    report.undo()
