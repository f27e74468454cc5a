"""The questions the field has that `validate` does not raise (issue 66), with their answers and where
each comes from (surgery/data/probe.yaml):

- layer ids (EAGLE-3, P-EAGLE, DFlash, DSpark): the written ids read one layer late (capture ids written)
  and one layer early (layer outputs written), beside each producer's convention (questions.py SRG659);
  a reading that names a layer the target lacks is no answer, and when only one reading is left it is
  settled (measured once, never compared);
- norm flags: `norm_before_residual` for every head class that reads it (no tensor tells, and readers
  disagree on its default), `norm_output` where the config states it; `norm_before_fc` / `fc_norm`
  answered from the weights (the flag builds a norm with its own tensor: the checkpoint says whether the
  head was trained with it);
- RoPE: every field that changes positions (theta, scaling, `partial_rotary_factor`) compared with the
  target's for the methods fed the target's positions, where validate's SRG618 did not already ask;
- DFlash `dflash_config.causal` where the config states none (validate's SRG801);
- the DSpark layout key where the config does not state the layout with both keys.

Each finding is SRG499 (a question the configs leave open) or SRG502 (answered from the weights), so the
report says why a candidate exists. `group` (probe.yaml `groups`) says which questions are crossed."""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from ..checks.dspark_layout import LAYOUT_KEYS, is_dspark, stated_layout
from ..checks.inherit import engine_rules, served_module
from ..checks.safetensors_header import read_checkpoint
from ..facts.drafts import BLOCK_DRAFT_ID_KEYS
from ..formats import format_of
from ..resources import load_data
from ..text.diagnostics import SurgeryError, Location, diag
from .answers import AUX_KEY, DROP, NORM_KEY, ROPE_KEYS, Answer, Question

OWN = "SRG499"  # a question the configs leave open, asked by the probe itself
WEIGHTS = "SRG502"  # answered from the weights


def data() -> dict:
    return load_data("data/probe.yaml")


@dataclass(frozen=True)
class Fixed:
    """A question answered without measuring: from the weights, or the one reading the target can serve."""
    question: Question
    answer: Answer
    how: str  # "weights" | "settled"

    def to_dict(self) -> dict:
        return {"question": self.question.to_dict(), "answer": self.answer.to_dict(), "how": self.how}


def group_of(q: Question) -> str:
    """The group (probe.yaml `groups`) a question belongs to: its answers are crossed with its group's."""
    key = q.key
    if key in ("rope",):
        return "positions"
    if key in ("input_embeddings", "lm_head", "d2t"):
        return "vocabulary"
    return "inputs"


def _lookup(cfg: dict, dotted: str):
    for part in dotted.split("."):
        cfg = cfg.get(part) if isinstance(cfg, dict) else None
    return cfg


# ---------------------------------------------------------------- layer ids

def block_ids(raw: dict) -> tuple[str, list[int]] | None:
    """(key, ids) of a DFlash / DSpark draft's own target-layer numbering, the first key vLLM reads."""
    for key in BLOCK_DRAFT_ID_KEYS:
        value = _lookup(raw, key)
        if isinstance(value, list) and value and all(isinstance(i, int) and not isinstance(i, bool) for i in value):
            return key, list(value)
    return None


def _ids_answers(written: list[int], key: str, lo: int, hi: int, served_ok: bool,
                 named: dict[tuple[int, ...], str] | None = None) -> list[Answer]:
    """One answer per distinct reading of `written` (as written, each shift of probe.yaml), in the
    family's numbering; readings outside lo..hi name layers the target lacks and are left out."""
    readings: dict[tuple[int, ...], list[str]] = {}
    for ids, name in (named or {tuple(written): "as written"}).items():
        readings.setdefault(ids, []).append(name)
    for s in data()["layer_ids"]["shifts"]:
        # shift -1: written one layer late, the head reads written - 1; +1: written one early, it reads written + 1
        ids = tuple(i + int(s["shift"]) for i in written)
        readings.setdefault(ids, []).append(s["name"])
    out = []
    for ids, names in readings.items():
        if any(i < lo or i > hi for i in ids):
            continue
        out.append(Answer(f"ids {list(ids)} ({'; '.join(names)})", ((key, list(ids)),),
                          as_served=served_ok and list(ids) == list(written)))
    return out


def with_neighbours(q: Question | None, lo: int, hi: int) -> Question | None:
    """`q` with its one reading's neighbours added, when only one reading names layers lo..hi and it is not the
    ids as written (probe.yaml `layer_ids.neighbours`). Why: a written set past the target's last layer is
    explained by a uniform shift only sometimes ([2, 7, 8] for [0, 6, 7] is not); alone, the shifted reading
    would be taken without a comparison. Each neighbour moves one id by `step` (distinct ids, in range)."""
    if q is None or len(q.answers) != 1 or q.answers[0].as_served:
        return q
    (key, ids), = q.answers[0].edits
    step = int(data()["layer_ids"]["neighbours"]["step"])
    out = [q.answers[0]]
    seen = {tuple(ids)}
    for i, old in enumerate(ids):
        for new in (old - step, old + step):
            moved = tuple(ids[:i]) + (new,) + tuple(ids[i + 1:])
            if not lo <= new <= hi or len(set(moved)) < len(moved) or moved in seen:
                continue
            seen.add(moved)
            out.append(Answer(f"ids {list(moved)} (a neighbour of the one reading left: id {old} -> {new})",
                              ((key, list(moved)),)))
    return Question(q.code, q.key, q.text, tuple(out), q.finding, q.check)


def ids_question(draft, target, method: str | None) -> tuple[Any, Question | None]:
    """(finding, question) for the written layer ids of a block drafter or an EAGLE-3 head whose ids
    validate did not already question (SRG659 covers unmarked EAGLE-3 ids; questions.py adds the shifts
    there)."""
    L = target.num_layers
    if not L:
        return None, None
    found = block_ids(draft.raw)
    if found is not None and method in ("dflash", "dspark", None):
        key, written = found
        lo, hi = 0, L - 1  # the draft names the layer whose OUTPUT it reads: vLLM captures id + 1 (0..L)
        family = "block"
    else:
        fmt = format_of(draft)
        if not fmt.ids_written:
            return None, None
        key, written = AUX_KEY, list(fmt.ids_written)
        lo, hi = 0, L  # vLLM's id i is the input of layer i; L the final pre-norm state
        family = "eagle3"
    answers = _ids_answers(written, key, lo, hi, served_ok=all(lo <= i <= hi for i in written))
    if len(answers) == 1 and answers[0].as_served:
        return None, None
    note = (f"{family} layer ids {written} at {key}: besides the ids as written, the field writes them one layer "
            f"late (the capture ids) and one layer early (layer outputs); {len(answers)} reading(s) name layers "
            f"this {L}-layer target has")
    finding = diag(OWN, note, Location(draft.source, key_path=key), severity="info")
    q = Question(OWN, key, f"which target layers does the head read (ids written {written})?", tuple(answers),
                 note)
    return finding, with_neighbours(q, lo, hi)


# ---------------------------------------------------------------- norm flags

def _reads(draft, method: str | None) -> list[str]:
    module = served_module(draft, method or "")
    return list((engine_rules()["norm_flags"]["vllm"] or {}).get(module) or ())


def _flag(raw: dict, key: str):
    nested = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), dict) else {}
    if key in nested:
        return nested[key], f"eagle_config.{key}"
    return raw.get(key), key


def norm_questions(draft, method: str | None, asked: set[str]) -> list[tuple[Any, Question]]:
    """The measured norm flags (probe.yaml `norm_flags.measured`) the head class reads."""
    reads = _reads(draft, method)
    out = []
    spec = data()["norm_flags"]["measured"]
    for key, rule in spec.items():
        if key not in reads or key in asked:
            continue
        value, where = _flag(draft.raw, key)
        if rule["asked"] == "when_true" and value is not True:
            continue
        served = bool(value)  # every reader of these flags defaults to False on a native config
        fmt = format_of(draft)
        if key == NORM_KEY and fmt.speculators is not None:
            built = fmt.speculators.norm_vllm.get(NORM_KEY)
            served = bool(built) if built is not None else served
        text = (f"{key} is {'absent' if value is None else str(value).lower()} ({where}); the engine builds "
                f"{str(served).lower()}, and no tensor says which one the head was trained with")
        answers = tuple(Answer(f"{key} {str(v).lower()}", ((where, v),), as_served=v == served) for v in (False, True))
        out.append((diag(OWN, text, Location(draft.source, key_path=where), severity="info"),
                    Question(OWN, key, f"was the head trained with {key}?", answers, text, check=True)))
    return out


def _has_tensor(folder, names) -> bool | None:
    """Whether the draft's checkpoint holds any of `names` (None: no checkpoint to read)."""
    if folder is None:
        return None
    try:
        ckpt = read_checkpoint(str(folder))
    except SurgeryError:
        return None
    return ckpt.first(list(names)) is not None


def weight_flags(draft, method: str | None, folder) -> list[tuple[Any, Fixed]]:
    """Norm flags the checkpoint answers (probe.yaml `norm_flags.weights`): the flag builds a norm with its
    own tensor, so a flag without the tensor (or the tensor without the flag) is answered by the weights."""
    reads = _reads(draft, method)
    out = []
    for key, rule in data()["norm_flags"]["weights"].items():
        if key not in reads:
            continue
        has = _has_tensor(folder, rule["tensors"])
        if has is None:
            continue
        value, where = _flag(draft.raw, key)
        if bool(value) == has:
            continue
        text = (f"{key} is {'absent' if value is None else str(value).lower()} ({where}) but the checkpoint "
                f"{'has' if has else 'has no'} {rule['tensors'][0]}: the weights say {key} {str(has).lower()}")
        answer = Answer(f"{key} {str(has).lower()} (from the weights)", ((where, has),))
        q = Question(WEIGHTS, key, f"was the head trained with {key}?", (answer,), text)
        out.append((diag(WEIGHTS, text, Location(draft.source, key_path=where), severity="warning"),
                    Fixed(q, answer, "weights")))
    return out


# ---------------------------------------------------------------- RoPE

def _text(raw: dict) -> tuple[str, dict]:
    if isinstance(raw.get("text_config"), dict):
        return "text_config.", raw["text_config"]
    return "", raw


def effective_rope(text: dict) -> dict:
    """Every field that changes positions, flattened: theta, type, factor and the scaling's other numbers,
    partial_rotary_factor (1.0 when absent). A per-layer-type rope_parameters (Gemma 4) is kept as it is."""
    out: dict = {}
    for key in ("rope_scaling", "rope_parameters"):
        value = text.get(key)
        if isinstance(value, dict):
            if value and all(isinstance(v, dict) for v in value.values()):
                return {"per_layer_type": copy.deepcopy(value),
                        "partial_rotary_factor": float(text.get("partial_rotary_factor", 1.0) or 1.0)}
            out.update({k: v for k, v in value.items() if v is not None})
    if text.get("rope_theta") is not None:
        out["rope_theta"] = text["rope_theta"]
    out.setdefault("rope_type", out.pop("type", "default") if "type" in out else "default")
    out["rope_theta"] = float(out.get("rope_theta", 10000.0))
    out["partial_rotary_factor"] = float(out.get("partial_rotary_factor", text.get("partial_rotary_factor", 1.0)) or 1.0)
    return out


def rope_question(draft, target, method: str | None) -> tuple[Any, Question | None]:
    """The draft's RoPE against the target's, field by field, for methods fed the target's positions."""
    if method not in data()["rope"]["methods"]:
        return None, None
    d_prefix, d_text = _text(draft.raw)
    _, t_text = _text(target.raw)
    mine, theirs = effective_rope(d_text), effective_rope(t_text)
    if mine == theirs:
        return None, None
    differ = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
    text = (f"the draft's RoPE differs from the target's in {', '.join(differ)} "
            f"(draft {', '.join(f'{k}={mine.get(k)!r}' for k in differ)}; target "
            f"{', '.join(f'{k}={theirs.get(k)!r}' for k in differ)}); a {method} draft is fed the target's positions")
    finding = diag(OWN, text, Location(draft.source, key_path=d_prefix + differ[0]), severity="warning")
    return finding, target_rope_question(OWN, draft, target, text)


def target_rope_question(code: str, draft, target, message: str) -> Question:
    """Two answers: the draft's RoPE as written, and the target's (every RoPE key of the target's text
    config copied over the draft's, at the place the draft's config keeps its text settings). Asked by
    validate's SRG618 (questions.py) and by the probe's own RoPE comparison (rope_question)."""
    d_prefix, d_text = _text(draft.raw)
    _, t_text = _text(target.raw)
    edits = []
    for key in ROPE_KEYS:
        if key in t_text:
            edits.append((d_prefix + key, copy.deepcopy(t_text[key])))
        elif key in d_text:
            edits.append((d_prefix + key, DROP))
    return Question(code, "rope", "was the head trained with its own RoPE or the target's?",
                    (Answer("the draft's own RoPE (as written)", (), as_served=True),
                     Answer("the target's RoPE", tuple(edits))), message)


# ---------------------------------------------------------------- DFlash causal, DSpark layout

def served_causal(raw: dict) -> bool:
    """What vLLM's qwen3_dflash.py builds for layer 0 (_dflash_layer_causal)."""
    if raw.get("is_causal") is not None:
        return bool(raw["is_causal"])
    override = (raw.get("dflash_config") or {}).get("causal") if isinstance(raw.get("dflash_config"), dict) else None
    if override is not None:
        return bool(override)
    types = raw.get("layer_types")
    return bool(types) and types[0] == "sliding_attention"


def causal_question(draft, message: str) -> Question:
    key = data()["dflash_causal"]["key"]
    served = served_causal(draft.raw)
    return Question("SRG801", key, "was the DFlash draft trained causal or not?",
                    tuple(Answer(f"causal {str(v).lower()}", ((key, v),), as_served=v == served) for v in (False, True)),
                    message, check=True)


def causal_own(draft, method: str | None) -> tuple[Any, Question | None]:
    """DFlash causal where the config states it (validate's SRG801 asks where it does not): the flag is
    asked for every DFlash draft (probe.yaml `dflash_causal.asked`)."""
    if method != "dflash" and not any("DFlash" in a for a in draft.architectures or ()):
        return None, None
    key = data()["dflash_causal"]["key"]
    served = served_causal(draft.raw)
    text = f"the DFlash draft is served {'causal' if served else 'non-causal'}; no tensor says how it was trained"
    finding = diag(OWN, text, Location(draft.source, key_path=key), severity="info")
    return finding, Question(OWN, key, "was the DFlash draft trained causal or not?",
                             tuple(Answer(f"causal {str(v).lower()}", ((key, v),), as_served=v == served)
                                   for v in (False, True)), text, check=True)


def dspark_layout_question(draft, method: str | None) -> tuple[Any, Question | None]:
    if not is_dspark(method, draft.architectures):
        return None, None
    said, agreed = stated_layout(draft.raw)
    if agreed is not None and len(said) == len(LAYOUT_KEYS):
        return None, None
    text = (f"the DSpark layout is stated by {sorted(said) or 'no key'}"
            + (" and the keys disagree" if said and agreed is None else "")
            + ": releases read different keys (0.25-0.26 dspark_bonus_anchor, 0.27+ sample_from_anchor)")
    answers = tuple(Answer(f"{name} layout", tuple(sorted(keys.items())), as_served=False)
                    for name, keys in data()["dspark_layout"]["answers"].items())
    return (diag(OWN, text, Location(draft.source), severity="warning"),
            Question(OWN, "dspark_layout", "which block layout was the DSpark draft trained in?", answers, text))
