"""What a performer is given besides the operation and the two models: the engine's context.

A context says which engine's live models these are (its card gives the module paths), runs the
whole-model checks before any operation is prepared, and answers the engine-specific questions
performers ask (has the draft checkpoint brought its own weights for a role?). One subclass per
engine (surgery/live/hf.py, surgery/live/vllm.py); an engine's performers take its context.
"""
from __future__ import annotations

from typing import Any

from .paths import role_path, role_paths
from .prepared import NotApplicable


class Context:
    engine: str = "?"

    def static_checks(self, plan: Any, draft: Any, target: Any) -> list:
        """Whole-model checks before any operation is prepared (layer counts, stages); diagnostics."""
        return []

    def role_path(self, model: Any, op: Any, side: str) -> str:
        """The op's role's module path on one side; a role this engine has no module for is not
        applicable here (said, with the card it was looked up in)."""
        if role_paths(self.engine, op.role, side, op.layer) is None:
            raise NotApplicable(f"role {op.role} has no {self.engine} module (surgery/data/engines/{self.engine}.yaml)")
        return role_path(self.engine, model, op.role, side, op.layer)

    def draft_has_own(self, draft: Any, role: str, path: str) -> bool | None:
        """Whether the draft checkpoint brought weights for `role` (at `path`); None: cannot tell."""
        return None
