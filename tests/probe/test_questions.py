"""The probe's open questions and candidates (surgery/probe/questions.py, candidates.py), from
validate's findings on mislabelled copies of the built-in heads: config only, no model is loaded."""
from __future__ import annotations

from pathlib import Path

import pytest

from surgery.commands.probe import validate_findings
from surgery.probe.candidates import MAX_CANDIDATES, candidates
from surgery.probe.draftcopy import edited_config
from surgery.probe.questions import DROP, Answer, Question
from surgery.probe.runner import ProbeInput, ask, decision
from surgery.probe.stats import rank
from surgery.recipe import load_recipe

from .heads import HEADS, build

BY_ID = {h.id: h for h in HEADS}


def questions_of(head_id, tmp_path):
    h = BY_ID[head_id]
    folder = build(h, tmp_path)
    recipe = load_recipe(h.recipe)
    return ask(ProbeInput(recipe, h.target, folder, [], "", 1, 1, validate_findings(recipe, folder, h.target)),
               h.engine)


def test_the_catalogue_covers_four_families_and_twenty_heads():
    assert len(HEADS) >= 20
    assert len({h.recipe for h in HEADS}) >= 4


def test_ids_in_the_other_convention_give_both_readings(tmp_path):
    q = questions_of("eagle3-ids-specforge", tmp_path)
    (only,) = q.open
    assert only.code == "SRG659"
    names = {a.name: a for a in only.answers}
    served = [a for a in only.answers if a.as_served]
    assert len(names) == 2 and served[0].edits == (("eagle_aux_hidden_state_layer_ids", [0, 6, 7]),)
    assert any("[1, 7, 8]" in n for n in names)
    cands, _ = candidates(q.open)
    assert len(cands) == 2 and cands[0].as_served


def test_a_reading_past_the_last_layer_settles_the_shipped_head(tmp_path):
    q = questions_of("eagle3-shipped", tmp_path)
    assert not q.open and q.settled and "[0, 7, 8]" in q.settled[0]


def test_ids_dropped_is_unanswerable_never_confirmed(tmp_path):
    """Every producer default of an 8-layer target is vLLM [2, 4, 5]: one answer, nothing to compare."""
    q = questions_of("eagle3-ids-dropped", tmp_path)
    assert not q.open and q.unanswerable and q.unanswerable[0].startswith("SRG640")
    cands, _ = candidates(q.open)
    assert decision(cands, rank({}), q)["status"] == "undecided"


def test_norm_dropped_from_a_speculators_export(tmp_path):
    (only,) = questions_of("eagle3-speculators-norm-dropped", tmp_path).open
    assert only.code == "SRG658"
    assert [a.as_served for a in only.answers] == [False, True]  # vLLM builds true when the key is absent


@pytest.mark.parametrize("head_id", ["eagle3-speculators-shipped", "gemma4-shipped", "eagle-shipped",
                                     "dflash-shipped"])
def test_a_stated_answer_is_never_a_question(head_id, tmp_path):
    q = questions_of(head_id, tmp_path)
    assert not q.open and not q.unanswerable


@pytest.mark.parametrize("head_id", ["gemma4-rope-dropped", "eagle3-rope-linear", "dflash-rope-theta",
                                     "peagle-rope-linear"])
def test_rope_question_copies_the_targets(head_id, tmp_path):
    (only,) = questions_of(head_id, tmp_path).open
    assert only.code == "SRG618"
    own, targets = only.answers
    assert own.as_served and not own.edits and targets.edits


def test_gemma4_rope_answer_writes_the_nested_text_config(tmp_path):
    h = BY_ID["gemma4-rope-dropped"]
    (only,) = questions_of(h.id, tmp_path).open
    keys = [k for k, _ in only.answers[1].edits]
    assert keys == ["text_config.rope_parameters"]
    import json

    cfg = json.loads((h.draft / "config.json").read_text())
    target = json.loads((h.target / "config.json").read_text())
    fixed = edited_config(json.loads(json.dumps(cfg)), only.answers[1].edits)
    want = (target.get("text_config") or target)["rope_parameters"]
    assert fixed["text_config"]["rope_parameters"] == want


def test_interacting_questions_are_crossed_then_varied_alone():
    qs = [Question(f"Q{i}", "k", "?", tuple(Answer(f"q{i}a{j}", (("k", j),), as_served=j == 0) for j in range(3)))
          for i in range(2)]
    cands, how = candidates(qs)
    assert len(cands) == 9 and cands[0].as_served and "product" in how
    many = [Question(f"Q{i}", "k", "?", tuple(Answer(f"q{i}a{j}", (), as_served=j == 0) for j in range(3)))
            for i in range(3)]
    cands, how = candidates(many)
    assert 27 > MAX_CANDIDATES and len(cands) == 1 + 3 * 2 and "one question varied at a time" in how


def test_edited_config_drops_and_sets_nested_keys():
    cfg = {"a": 1, "t": {"b": 2}}
    assert edited_config(cfg, (("a", DROP), ("t.b", 3), ("t.c.d", 4))) == {"t": {"b": 3, "c": {"d": 4}}}
    assert cfg == {"a": 1, "t": {"b": 2}}
