"""The probe's open questions and candidates (surgery/probe/questions.py, candidates.py), from
validate's findings on mislabelled copies of the built-in heads: config only, no model is loaded."""
from __future__ import annotations

from pathlib import Path

import pytest

from surgery.commands.probe import validate_findings
from surgery.probe.candidates import MAX_CANDIDATES, candidates
from surgery.probe.draftcopy import edited_config
from surgery.probe.questions import DROP, Answer, Question
from surgery.probe.runner import ProbeInput, ask
from surgery.probe.stats import rank
from surgery.probe.status import decide
from surgery.recipe import load_recipe

from .heads import HEADS, build

BY_ID = {h.id: h for h in HEADS}


def one(q, code):
    """The one open question of `code`."""
    (found,) = [x for x in q.open if x.code == code]
    return found


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
    only = one(q, "SRG659")
    names = {a.name: a for a in only.answers}
    served = [a for a in only.answers if a.as_served]
    assert len(names) == 2 and served[0].edits == (("eagle_aux_hidden_state_layer_ids", [0, 6, 7]),)
    assert any("[1, 7, 8]" in n for n in names)
    cands, _ = candidates([only])
    assert len(cands) == 2 and cands[0].as_served


def test_a_reading_past_the_last_layer_settles_the_shipped_head(tmp_path):
    q = questions_of("eagle3-shipped", tmp_path)
    assert not [x for x in q.open if x.key == "eagle_aux_hidden_state_layer_ids"]
    assert q.settled and "[0, 7, 8]" in q.settled[0] and q.fixed[0].answer.as_served and not q.base_edits


def test_ids_dropped_is_unanswerable_never_confirmed(tmp_path):
    """Every producer default of an 8-layer target is vLLM [2, 4, 5]: one answer, nothing to compare."""
    q = questions_of("eagle3-ids-dropped", tmp_path)
    assert not [x for x in q.open if x.code in ("SRG640", "SRG659")]
    assert q.unanswerable and q.unanswerable[0].startswith("SRG640")
    row = {"name": "as served", "as_served": True, "error": None, "prompts": 2, "prompt_acceptance": [0.4, 0.4],
           "mean_prompt_acceptance": 0.4, "answer_dicts": {}}
    assert decide([row], rank({}), q, None)["status"] == "undecided"


def test_norm_dropped_from_a_speculators_export(tmp_path):
    (only,) = questions_of("eagle3-speculators-norm-dropped", tmp_path).open
    assert only.code == "SRG658"  # validate's question: the probe does not ask the same key again
    assert [a.as_served for a in only.answers] == [False, True]  # vLLM builds true when the key is absent


@pytest.mark.parametrize("head_id", ["gemma4-shipped", "eagle-shipped"])
def test_a_head_whose_configs_settle_everything_asks_nothing(head_id, tmp_path):
    q = questions_of(head_id, tmp_path)
    assert not q.open and not q.unanswerable


@pytest.mark.parametrize("head_id,key", [("eagle3-speculators-shipped", "norm_before_residual"),
                                         ("eagle3-shipped", "norm_before_residual"),
                                         ("dflash-shipped", "dflash_config.causal")])
def test_a_stated_answer_is_checked_only_for_the_flags_the_field_gets_wrong(head_id, key, tmp_path):
    """issue 66: a flipped norm_before_residual was confirmed (67 % against 79 %): the probe asks it for every
    head class that reads it (surgery/data/probe.yaml), and DFlash's causal flag where the config states none
    (SRG801); nothing else a config states becomes a candidate."""
    q = questions_of(head_id, tmp_path)
    assert [x.key for x in q.open] == [key] and not q.unanswerable


@pytest.mark.parametrize("head_id", ["gemma4-rope-dropped", "eagle3-rope-linear", "dflash-rope-theta",
                                     "peagle-rope-linear"])
def test_rope_question_copies_the_targets(head_id, tmp_path):
    only = one(questions_of(head_id, tmp_path), "SRG618")
    own, targets = only.answers
    assert own.as_served and not own.edits and targets.edits


def test_gemma4_rope_answer_writes_the_nested_text_config(tmp_path):
    h = BY_ID["gemma4-rope-dropped"]
    only = one(questions_of(h.id, tmp_path), "SRG618")
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


def test_catalogue_covers_every_open_question():
    """Each question of issue 57 has mislabelled heads (weights or config), over at least 4 families."""
    kinds = {"aux": [h for h in HEADS if "ids" in h.id and not h.healthy],
             "norm": [h for h in HEADS if "norm" in h.id], "rope": [h for h in HEADS if "rope" in h.id],
             "embedding": [h for h in HEADS if "embed" in h.id or "lm-head" in h.id],
             "d2t": [h for h in HEADS if "d2t" in h.id]}
    assert all(kinds.values()), {k: len(v) for k, v in kinds.items()}
    assert len({h.recipe for h in kinds["embedding"]}) >= 4
    assert sum(1 for h in HEADS if not h.healthy) >= 20


@pytest.mark.parametrize("head_id,role", [("eagle3-embed-perturbed", "input_embeddings"),
                                          ("eagle-embed-finetune", "input_embeddings"),
                                          ("peagle-lm-head-perturbed", "lm_head")])
def test_own_module_question_keeps_or_drops_the_tensor(head_id, role, tmp_path):
    """SRG613 (validate --weights: the draft's own differs from the target's) asks keep vs the target's;
    the target's answer drops the tensor in the copy and names the recipe override that says the same."""
    q = questions_of(head_id, tmp_path)
    only = one(q, "SRG613")
    assert only.key == role
    own, targets = only.answers
    assert own.as_served and not own.tensors
    ((name, value),) = targets.tensors
    assert value is DROP and name.endswith("weight")
    assert targets.override == {"share_module": {"role": role, "if_draft_has_own": "share"}}


def test_shipped_heads_ask_no_weight_question(tmp_path):
    for hid in ("eagle3-shipped", "peagle-shipped", "dflash-shipped"):
        q = questions_of(hid, tmp_path / hid)
        assert not [x for x in q.open if x.code in ("SRG613", "SRG495")]


@pytest.mark.parametrize("head_id", ["eagle3-d2t-absolute", "eagle3-d2t-offsets-both-valid"])
def test_d2t_valid_both_ways_is_a_question(head_id, tmp_path):
    """The shipped d2t (offsets with repeats) is not a valid absolute map: no question; one rewritten
    as absolute ids, or offsets that grow strictly, reads both ways (SRG495)."""
    from safetensors.torch import load_file

    q = questions_of(head_id, tmp_path)
    only = one(q, "SRG495")
    offsets, absolute = only.answers
    assert offsets.as_served and not offsets.tensors
    ((name, values),) = absolute.tensors
    written = load_file(str(tmp_path / head_id / "model.safetensors"))["d2t"].tolist()
    assert name == "d2t" and values == [v - i for i, v in enumerate(written)]


def test_d2t_readings():
    from surgery.probe.weights import d2t_readings

    assert set(d2t_readings([0, 0, 1, 1], 10)) == {"offsets"}  # repeats: not absolute
    assert set(d2t_readings([0, 2, 4, 6], 10)) == {"offsets", "absolute"}
    assert set(d2t_readings([3, 5, 7, 9], 10)) == {"absolute"}  # as offsets 9 + 3 = 12 > vocab


def test_candidate_folder_rewrites_only_the_edited_tensor(tmp_path):
    from safetensors.torch import load_file

    from surgery.probe.draftcopy import candidate_folder

    h = BY_ID["eagle3-embed-perturbed"]
    src = build(h, tmp_path / "src")
    out = candidate_folder(src, (), tmp_path / "c", (("embed_tokens.weight", DROP), ("d2t", list(range(128)))))
    before, after = load_file(str(src / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert set(before) - set(after) == {"embed_tokens.weight"}
    assert after["d2t"].tolist() == list(range(128)) and after["d2t"].dtype == before["d2t"].dtype
    assert (after["fc.weight"] == before["fc.weight"]).all()
    assert "embed_tokens.weight" in load_file(str(src / "model.safetensors"))  # the source is untouched


def test_patch_names_tensor_edits_and_the_recipe_override(tmp_path):
    from surgery.probe.write import patch_of

    q = one(questions_of("eagle3-embed-random", tmp_path), "SRG613")
    patch = patch_of({"SRG613": q.answers[1].to_dict()})
    assert patch["tensors"] == {"embed_tokens.weight": "dropped: the engine shares the target's"}
    assert patch["tensor_ops"] == {"embed_tokens.weight": "drop"}  # what `--patch` does again (patch.py)
    assert patch["recipe_override"] == [{"share_module": {"role": "input_embeddings", "if_draft_has_own": "share"}}]
    assert patch_of({"SRG613": q.answers[0].to_dict()}) == {"set": {}, "drop": []}
