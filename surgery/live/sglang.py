"""The SGLang context: a live draft model and target model inside an SGLang speculative worker.

What differs from vLLM and matters to every SGLang performer (engine card
surgery/data/engines/sglang.yaml):
- a role is shared by rebinding the draft module's `weight` to the target's tensor, as SGLang's
  own `set_embed_and_head` / `set_embed` do; the draft's module object stays;
- SGLang records nothing about which weights the draft checkpoint brought (sglang#27908: a head
  never loaded served at accept rate 0.00). The hook can record the names the draft's
  `load_weights` received (`loaded_names`); without that record "has own" cannot be told;
- EAGLE-3 targets capture `hidden_states + residual` before each layer listed in the text model's
  `layers_to_capture` (ids 1..L-1 only).
Nothing here imports SGLang: tests use stand-ins.
"""
from __future__ import annotations

from typing import Any

from .context import Context
from .paths import get_path


def capture_holder(target: Any) -> Any | None:
    """The text model holding `layers_to_capture` (SGLang's LlamaModel and kin), as the target's
    `set_eagle3_layers_to_capture` sets it; None for a target that captures nothing."""
    inner = getattr(target, "model", None)
    if inner is not None and hasattr(inner, "layers_to_capture"):
        return inner
    return None


def num_layers(target: Any) -> int | None:
    cfg = getattr(target, "config", None)
    value = getattr(cfg, "num_hidden_layers", None)
    return int(value) if isinstance(value, int) else None


class SGLangContext(Context):
    engine = "sglang"

    def __init__(self, algorithm: str | None = None, loaded_names: frozenset[str] | None = None,
                 own_weights: dict[str, Any] | None = None, engine_version: str | None = None):
        """`algorithm`: SGLang's speculative algorithm (EAGLE3, EAGLE, NEXTN, STANDALONE).
        `loaded_names`: the parameter names the draft's `load_weights` received from its checkpoint,
        when the hook recorded them; None: not recorded (has-own cannot be told).
        `own_weights`: role path -> the draft's own weight tensor as it was BEFORE SGLang's
        init_lm_head, which deletes and rebinds it (`del m.weight; m.weight = target's`): without it a
        recipe applied afterwards would see the target's tensor and call it the draft's own.
        `engine_version`: the SGLang release serving, whose capture range judges the aux ids (SRG362);
        None: the installed SGLang's (surgery/engine/capture.py)."""
        self.algorithm = algorithm
        self.engine_version = engine_version
        self.loaded_names = loaded_names
        self.own_weights = dict(own_weights or {})

    def own_weight(self, draft: Any, path: str) -> Any:
        """The draft's own weight at `path`: the one SGLang's wiring replaced, else the current one."""

        return self.own_weights.get(path, getattr(get_path(draft, path), "weight", None))

    def draft_has_own(self, draft: Any, role: str, path: str | None = None) -> bool | None:
        """Whether the draft checkpoint brought the role's weight (`<path>.weight` among the names
        its load_weights received). None without a record: SGLang keeps none of its own."""
        if self.loaded_names is None or path is None:
            return None
        # EAGLE-original / SpecForge heads name their tensors without the `model.` prefix
        # (`embed_tokens.weight`), as SGLang's load_weights accepts them
        names = {f"{path}.weight", f"{path.removeprefix('model.')}.weight"}
        return bool(names & self.loaded_names)
