"""Applying a Plan to live models: atomic (check everything, then mutate with an undo log) and verified."""
import sys as _sys
import types as _types

from .core import ApplyReport, Check, VerifyReport, apply_plan, rollback, verify_plan

__all__ = ["ApplyReport", "Check", "VerifyReport", "apply_plan", "rollback", "verify_plan"]


class _CallableModule(_types.ModuleType):
    """`surgery.apply` names both the library function (surgery/__init__.py) and this package, and
    importing the package rebinds the attribute `surgery.apply` to it (Python sets a submodule on
    its parent). Calling the package applies a plan, so `surgery.apply(plan, draft, target)` and
    `from surgery import apply` work whatever was imported first."""

    def __call__(self, plan, draft, target, adapter=None, **kwargs):
        return apply_plan(plan, draft, target, adapter=adapter, **kwargs)


_sys.modules[__name__].__class__ = _CallableModule
