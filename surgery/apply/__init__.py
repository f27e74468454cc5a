"""Applying a Plan to live models: atomic (check everything, then mutate with an undo log) and verified."""
from .core import ApplyReport, Check, VerifyReport, apply_plan, rollback, verify_plan

__all__ = ["ApplyReport", "Check", "VerifyReport", "apply_plan", "rollback", "verify_plan"]
