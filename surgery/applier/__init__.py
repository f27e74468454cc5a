"""Applying a Plan to live models, engine-neutral: atomic (check everything, then mutate with an undo
log) and verified. The performers it dispatches to live with their op kinds (surgery/ops/<kind>/<engine>.py);
the engine contexts they are given in surgery/live/.

The package is `surgery.applier`, not `surgery.apply`: `surgery.apply` is the library function
(surgery/__init__.py), and a subpackage of the same name would rebind that attribute on import."""
from .core import ApplyReport, Check, VerifyReport, apply_plan, rollback, verify_plan

__all__ = ["ApplyReport", "Check", "VerifyReport", "apply_plan", "rollback", "verify_plan"]
