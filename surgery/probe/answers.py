"""The probe's vocabulary: an answer (config edits, weight edits, the recipe override that says the same)
and a question (its code, the key its answers write, its answers). Shared by questions.py (validate's
questions), field.py (the probe's own) and candidates.py; a module of its own so none of them imports
another's builders."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

AUX_KEY = "eagle_aux_hidden_state_layer_ids"
NORM_KEY = "norm_before_residual"
ROPE_KEYS = ("rope_scaling", "rope_parameters", "rope_theta", "partial_rotary_factor")
DROP = object()  # an edit that removes the key
D2T_KEY = "d2t"


@dataclass(frozen=True)
class Answer:
    """One answer to a question: `edits` (dotted key -> value, or DROP) turn the draft's config into
    the one that says it; `tensors` (tensor name -> new values, or DROP) the draft's weights;
    `override` the recipe override that says the same (--write); `as_served` marks the reading the
    engine takes from the config (and weights) as they are."""
    name: str
    edits: tuple[tuple[str, Any], ...] = ()
    as_served: bool = False
    tensors: tuple[tuple[str, Any], ...] = ()
    tensor_note: str = ""  # what the tensor edit is, for the report and the patch
    override: dict | None = None
    tensor_op: str = ""  # the edit by name, for the patch read back (patch.py TENSOR_OPS): drop / d2t_absolute_to_offsets

    def to_dict(self) -> dict:
        out = {"name": self.name, "as_served": self.as_served,
               "edits": {k: ("<dropped>" if v is DROP else v) for k, v in self.edits}}
        if self.tensors:
            out["tensors"] = {k: self.tensor_note or ("<dropped>" if v is DROP else "rewritten") for k, v in self.tensors}
            out["tensor_ops"] = {k: self.tensor_op or ("drop" if v is DROP else "values") for k, v in self.tensors}
        if self.override:
            out["override"] = self.override
        return out


@dataclass(frozen=True)
class Question:
    code: str
    key: str  # the config key the answers write
    text: str
    answers: tuple[Answer, ...]
    finding: str = ""
    # a check of a flag the engine serves from the config or its default (norm_before_residual, DFlash causal):
    # the served answer stands when it leads within the noise and the pair reaches its expectation (status.py)
    check: bool = False

    @property
    def id(self) -> str:
        """The question's name in a decision's answers: its code and key (one code may ask several keys)."""
        return f"{self.code} {self.key}"

    def to_dict(self) -> dict:
        return {"id": self.id, "code": self.code, "key": self.key, "question": self.text, "finding": self.finding,
                "check": self.check, "answers": [a.to_dict() for a in self.answers]}
