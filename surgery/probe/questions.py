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
- SRG618 the draft's RoPE differs from the target's: the draft's own, or the target's copied in;
- SRG613 the draft brings its own embedding / lm_head, different from the target's (one question per
  role): the draft's own (a fine-tune, as served), or the target's (the tensor dropped from the copy);
- SRG495 (the probe's own read, weights.py) a d2t valid as offsets and as absolute target ids: as
  offsets (as served), or as absolute ids (rewritten as offsets in the copy).
Answers that change weights carry `tensors` (the copy's safetensors is rewritten, draftcopy.py) and,
where the recipe can say the same, the `override` `--write` emits.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..formats import format_of
from ..formats.conventions import default_ids, to_vllm
from ..formats.table import conventions
from ..resources import load_data
from . import field as fq
from . import weights
from .answers import AUX_KEY, D2T_KEY, DROP, NORM_KEY, Answer, Question  # noqa: F401

QUESTION_CODES = ("SRG659", "SRG640", "SRG658", "SRG618", "SRG613", "SRG495", "SRG801")


@dataclass
class Questions:
    """What the probe asks, and what it leaves alone (findings it cannot answer by measurement)."""
    open: list[Question] = field(default_factory=list)
    findings: list[dict] = field(default_factory=list)  # every question code validate reported, as given
    settled: list[str] = field(default_factory=list)  # one answer left once the target's shape is read
    unanswerable: list[str] = field(default_factory=list)  # no alternative the engine can serve: not measurable
    fixed: list = field(default_factory=list)  # field.Fixed: answered without measuring (weights, the one servable reading)
    own: list = field(default_factory=list)  # the probe's own findings (field.py: SRG499 / SRG502), as diagnostics

    @property
    def base_edits(self) -> tuple:
        """Config edits every candidate carries: the fixed answers that are not the served reading."""
        return tuple(e for f in self.fixed if not f.answer.as_served for e in f.answer.edits)

    @property
    def covers(self) -> list[str]:
        """What a decision covers: every question measured or answered, by id."""
        return [q.id for q in self.open] + [f.question.id for f in self.fixed]


def open_questions(diagnostics, draft_facts, target_facts, draft_dir=None, method: str | None = None) -> Questions:
    """The questions among `diagnostics` the probe can answer, with their answers, then the probe's own
    (field.py: what no check reports). `draft_dir`: the draft folder, for the questions answered by editing
    or reading weights (none asked without it). `method`: the engine's speculative method (which head
    class reads which flag)."""
    out = Questions()
    seen = set()
    for d in diagnostics:
        key = (d.code, weights.roles_in(d.message) if d.code == "SRG613" else None)
        if d.code not in QUESTION_CODES or key in seen:
            continue
        if d.code in WEIGHT_CODES and draft_dir is None:
            continue
        seen.add(key)
        out.findings.append({"code": d.code, "message": d.message})
        q = BUILDERS[d.code](draft_facts, target_facts, d.message, draft_dir)
        if q is not None and len(q.answers) == 1 and q.code == "SRG659":
            out.fixed.append(fq.Fixed(q, q.answers[0], "settled"))
            out.settled.append(f"{q.code}: only {q.answers[0].name} names layers this target has "
                               "(the other readings name layers past its last)")
        elif q is None and d.code in WEIGHT_CODES:
            out.settled.append(f"{d.code}: the target's tensor does not fit this draft (shape): its own is the "
                               "only answer the engine can serve")
        elif q is None or len(q.answers) < 2:
            out.unanswerable.append(f"{d.code}: {len(q.answers) if q else 0} answer(s) this target can serve, "
                                    "nothing to compare: the probe cannot tell whether it is the trained one")
        else:
            out.open.append(q)
    _own(out, draft_facts, target_facts, draft_dir, method, seen)
    return out


def _own(out: Questions, draft, target, folder, method, seen) -> None:
    """The probe's own questions (field.py), where validate asked nothing about the same key."""
    codes = {code for code, _ in seen}
    asked = {q.key for q in out.open} | {f.question.key for f in out.fixed}
    own: list = []
    if "SRG659" not in codes and "SRG640" not in codes:
        own.append(fq.ids_question(draft, target, method))
    if "SRG618" not in codes:
        own.append(fq.rope_question(draft, target, method))
    own.append(fq.dspark_layout_question(draft, method))
    if "SRG801" not in codes:
        own.append(fq.causal_own(draft, method))
    own += fq.norm_questions(draft, method, asked | ({NORM_KEY} if "SRG658" in codes else set()))
    for finding, q in own:
        if q is None:
            continue
        out.own.append(finding)
        out.findings.append({"code": finding.code, "message": finding.message})
        if len(q.answers) >= 2:
            out.open.append(q)
        elif len(q.answers) == 1:  # the written ids name a layer the target lacks: the one reading left
            out.fixed.append(fq.Fixed(q, q.answers[0], "settled"))
            out.settled.append(f"{q.id}: only {q.answers[0].name} names layers this target has")
        else:
            out.unanswerable.append(f"{q.id}: no reading names layers this target has")
    for finding, fixed in fq.weight_flags(draft, method, folder):
        out.own.append(finding)
        out.findings.append({"code": finding.code, "message": finding.message})
        out.fixed.append(fixed)


def _aux_convention(draft, target, message, folder=None) -> Question | None:
    fmt = format_of(draft)
    if not fmt.ids_written:
        return None
    L = target.num_layers
    served = tuple(fmt.ids_written) if fmt.where_written == AUX_KEY else None
    readings: dict[tuple[int, ...], list[str]] = {}
    for w in fmt.writers:
        readings.setdefault(tuple(to_vllm(fmt.ids_written, w)), []).append(f"{w}'s convention")
    for s in load_data("data/probe.yaml")["layer_ids"]["shifts"]:  # the field's mistakes, whatever the producer
        readings.setdefault(tuple(i + int(s["shift"]) for i in fmt.ids_written), []).append(s["name"])
    answers = []
    for ids, who in readings.items():
        if any(i < 0 or i > L for i in ids):
            continue  # names a layer this target does not have: not how the head was trained
        answers.append(Answer(f"ids in {' / '.join(who)}: vLLM ids {list(ids)}",
                              ((AUX_KEY, list(ids)),), as_served=ids == served))
    return fq.with_neighbours(Question("SRG659", AUX_KEY, f"which convention are the ids {list(fmt.ids_written)} "
                                       "written in?", tuple(answers), message), 0, L)


def _aux_default(draft, target, message, folder=None) -> Question | None:
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


def _norm(draft, target, message, folder=None) -> Question | None:
    fmt = format_of(draft)
    built = (fmt.speculators.norm_vllm.get(NORM_KEY) if fmt.speculators is not None else None)
    return Question("SRG658", NORM_KEY, "was the head trained with norm_before_residual?",
                    tuple(Answer(f"norm_before_residual {str(v).lower()}", ((NORM_KEY, v),), as_served=v == built)
                          for v in (False, True)), message)


def _rope(draft, target, message, folder=None) -> Question | None:
    """SRG618: the draft's RoPE differs from the target's: its own, or the target's (field.py)."""
    return fq.target_rope_question("SRG618", draft, target, message)


def _own_module(draft, target, message, folder=None) -> Question | None:
    """SRG613: the draft's own embedding / lm_head differs from the target's. Asked only where the
    target's can stand in (same shape): a reduced-vocabulary lm_head has no alternative."""
    role = weights.roles_in(message)
    own = weights.role_tensor(folder, role) if role else None
    if own is None:
        return None
    want, d_h, t_h = target.scalars.get("vocab_size"), draft.scalars.get("hidden_size"), target.scalars.get("hidden_size")
    if len(own.shape) != 2 or own.shape[0] != want or (t_h and own.shape[1] != t_h) or (d_h and t_h and d_h != t_h):
        return None  # the target's does not fit this draft: the own one is the only answer
    return Question("SRG613", role, f"is the draft's own {own.name} a fine-tune it was trained with, or a copy "
                    f"(the target's {role} is what it was trained with)?",
                    (Answer(f"the draft's own {role} ({own.name})", (), as_served=True),
                     Answer(f"the target's {role} (the draft's {own.name} dropped)", (), tensors=((own.name, DROP),),
                            tensor_note="dropped: the engine shares the target's", tensor_op="drop",
                            override={"share_module": {"role": role, "if_draft_has_own": "share"}})), message)


def _d2t(draft, target, message, folder=None) -> Question | None:
    """SRG495: d2t valid in both conventions. 'absolute' is tried as the offsets it means."""
    values = weights.d2t_values(folder) if folder is not None else None
    readings = weights.d2t_readings(values or [], target.scalars.get("vocab_size") or 0)
    if "absolute" not in readings or "offsets" not in readings:
        return None
    name = weights.d2t_tensor(folder).name
    offsets = [t - i for i, t in enumerate(readings["absolute"])]
    return Question("SRG495", D2T_KEY, "are the d2t values offsets (target = i + d2t[i]) or absolute target ids?",
                    (Answer("d2t as offsets (the engine's reading)", (), as_served=True),
                     Answer("d2t as absolute target ids (rewritten as offsets)", (), tensors=((name, offsets),),
                            tensor_note="absolute ids rewritten as offsets: d2t[i] - i",
                            tensor_op="d2t_absolute_to_offsets")), message)


def _causal(draft, target, message, folder=None) -> Question | None:
    """SRG801: a DFlash draft states no dflash_config.causal: causal or not (field.py)."""
    return fq.causal_question(draft, message)


BUILDERS = {"SRG659": _aux_convention, "SRG640": _aux_default, "SRG658": _norm, "SRG618": _rope,
            "SRG613": _own_module, "SRG495": _d2t, "SRG801": _causal}
WEIGHT_CODES = ("SRG613", "SRG495")
