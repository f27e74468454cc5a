"""The open questions of a pair: what `validate` reports it cannot settle from the configs, each with
the answers the field knows, written as edits of the draft's config.json.

Why from validate's findings: a question the configs answer (a producer mark, an explicit
`norm_before_residual`, a RoPE equal to the target's) raises no finding, so the probe never builds a
candidate against an answer the config states. Questions handled (codes.yaml):

- SRG659 aux-id convention unmarked: one answer per distinct reading of the written ids by the
  producers of the layout (formats.yaml `conventions`), translated to vLLM's convention; a reading
  that names a layer the target lacks is no answer;
- SRG640 no aux ids: the engine default and each producer's default (the head was trained on one);
- SRG658 `norm_before_residual` absent from a speculators file: true or false;
- SRG618 the draft's RoPE differs from the target's: the draft's own, or the target's copied in.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from ..formats import format_of
from ..formats.conventions import default_ids, to_vllm
from ..formats.table import conventions

AUX_KEY = "eagle_aux_hidden_state_layer_ids"
NORM_KEY = "norm_before_residual"
ROPE_KEYS = ("rope_scaling", "rope_parameters", "rope_theta", "partial_rotary_factor")
DROP = object()  # an edit that removes the key
QUESTION_CODES = ("SRG659", "SRG640", "SRG658", "SRG618")


@dataclass(frozen=True)
class Answer:
    """One answer to a question: `edits` (dotted key -> value, or DROP) turn the draft's config into
    the one that says it; `as_served` marks the reading the engine takes from the config as it is."""
    name: str
    edits: tuple[tuple[str, Any], ...] = ()
    as_served: bool = False

    def to_dict(self) -> dict:
        return {"name": self.name, "as_served": self.as_served,
                "edits": {k: ("<dropped>" if v is DROP else v) for k, v in self.edits}}


@dataclass(frozen=True)
class Question:
    code: str
    key: str  # the config key the answers write
    text: str
    answers: tuple[Answer, ...]
    finding: str = ""

    def to_dict(self) -> dict:
        return {"code": self.code, "key": self.key, "question": self.text, "finding": self.finding,
                "answers": [a.to_dict() for a in self.answers]}


@dataclass
class Questions:
    """What the probe asks, and what it leaves alone (findings it cannot answer by measurement)."""
    open: list[Question] = field(default_factory=list)
    findings: list[dict] = field(default_factory=list)  # every question code validate reported, as given
    settled: list[str] = field(default_factory=list)  # one answer left once the target's shape is read
    unanswerable: list[str] = field(default_factory=list)  # no alternative the engine can serve: not measurable


def open_questions(diagnostics, draft_facts, target_facts) -> Questions:
    """The questions among `diagnostics` the probe can answer, with their answers."""
    out = Questions()
    seen = set()
    for d in diagnostics:
        if d.code not in QUESTION_CODES or d.code in seen:
            continue
        seen.add(d.code)
        out.findings.append({"code": d.code, "message": d.message})
        q = BUILDERS[d.code](draft_facts, target_facts, d.message)
        if q is not None and len(q.answers) == 1 and q.code == "SRG659" and q.answers[0].as_served:
            out.settled.append(f"{q.code}: only {q.answers[0].name} names layers this target has "
                               "(the other readings name layers past its last)")
        elif q is None or len(q.answers) < 2:
            out.unanswerable.append(f"{d.code}: {len(q.answers) if q else 0} answer(s) this target can serve, "
                                    "nothing to compare: the probe cannot tell whether it is the trained one")
        else:
            out.open.append(q)
    return out


def _aux_convention(draft, target, message) -> Question | None:
    fmt = format_of(draft)
    if not fmt.ids_written:
        return None
    L = target.num_layers
    served = tuple(fmt.ids_written) if fmt.where_written == AUX_KEY else None
    readings: dict[tuple[int, ...], list[str]] = {}
    for w in fmt.writers:
        readings.setdefault(tuple(to_vllm(fmt.ids_written, w)), []).append(w)
    answers = []
    for ids, who in readings.items():
        if any(i < 0 or i > L for i in ids):
            continue  # names a layer this target does not have: not how the head was trained
        answers.append(Answer(f"ids in {'/'.join(who)}'s convention: vLLM ids {list(ids)}",
                              ((AUX_KEY, list(ids)),), as_served=ids == served))
    return Question("SRG659", AUX_KEY, f"which convention are the ids {list(fmt.ids_written)} written in?",
                    tuple(answers), message)


def _aux_default(draft, target, message) -> Question | None:
    L = target.num_layers
    engine_default = tuple(default_ids("vllm", L))
    readings: dict[tuple[int, ...], list[str]] = {}
    for name in conventions():
        ids = tuple(to_vllm(default_ids(name, L), name))
        readings.setdefault(ids, []).append(name)
    answers = [Answer(f"{'/'.join(who)} default: vLLM ids {list(ids)}", ((AUX_KEY, list(ids)),),
                      as_served=ids == engine_default)
               for ids, who in readings.items() if all(0 <= i <= L for i in ids)]
    return Question("SRG640", AUX_KEY, "which target layers was the head (no aux ids written) trained on?",
                    tuple(answers), message)


def _norm(draft, target, message) -> Question | None:
    fmt = format_of(draft)
    built = (fmt.speculators.norm_vllm.get(NORM_KEY) if fmt.speculators is not None else None)
    return Question("SRG658", NORM_KEY, "was the head trained with norm_before_residual?",
                    tuple(Answer(f"norm_before_residual {str(v).lower()}", ((NORM_KEY, v),), as_served=v == built)
                          for v in (False, True)), message)


def _rope(draft, target, message) -> Question | None:
    """Two answers: the draft's RoPE as written, and the target's (every RoPE key of the target's text
    config copied over the draft's, at the place the draft's config keeps its text settings)."""
    d_raw, t_raw = draft.raw, target.raw
    d_prefix = "text_config." if isinstance(d_raw.get("text_config"), dict) else ""
    t_text = t_raw.get("text_config") if isinstance(t_raw.get("text_config"), dict) else t_raw
    d_text = d_raw.get("text_config") if d_prefix else d_raw
    edits = []
    for key in ROPE_KEYS:
        if key in t_text:
            edits.append((d_prefix + key, copy.deepcopy(t_text[key])))
        elif key in d_text:
            edits.append((d_prefix + key, DROP))
    return Question("SRG618", "rope", "was the head trained with its own RoPE or the target's?",
                    (Answer("the draft's own RoPE (as written)", (), as_served=True),
                     Answer("the target's RoPE", tuple(edits))), message)


BUILDERS = {"SRG659": _aux_convention, "SRG640": _aux_default, "SRG658": _norm, "SRG618": _rope}
