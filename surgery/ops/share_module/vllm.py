"""share_module inside a vLLM worker: the shared decision (decide.py) with vLLM's has-own flags
(surgery/live/vllm.py); vLLM has already checked shapes while loading the draft."""
from __future__ import annotations

from typing import Any

from ...live.prepared import Prepared
from .decide import prepare_module_share


def prepare(op: Any, draft: Any, target: Any, ctx: Any) -> Prepared:
    return prepare_module_share(op, draft, target, ctx)
