"""The probe's loop end to end on real catalogue heads with a stand-in measurer (surgery/probe/runner.py): the
questions from the configs, every candidate validated before it is measured, the status and what it covers.
The stand-in reads each candidate's config.json and answers with the acceptance its truth implies: no engine."""
from __future__ import annotations

import json

import pytest

from surgery.commands.probe import validate_findings
from surgery.pairs import builtin_pair
from surgery.probe import runner as probe_runner
from surgery.probe.expected import expected_for
from surgery.probe.runner import ProbeInput, probe
from surgery.probe.stats import Measured, PromptResult
from surgery.recipe import load_recipe

from .catalogue import BY_ID
from .heads import build, verdict


class Stand_in:
    """Acceptance per prompt from the candidate's config: `good(cfg)` -> 0.8, else 0.6 (8 prompts)."""
    engine, release = "vllm", "stand-in"

    def __init__(self, good):
        self.good, self.configs = good, []  # each measured candidate's config.json (its folder goes with the probe)

    def measure(self, folder, prompts, tokens, k, keep_going):
        cfg = json.loads((folder / "config.json").read_text())
        self.configs.append(cfg)
        rate = 0.8 if self.good(cfg) else 0.6
        m = Measured(verified=True)
        for i, _ in enumerate(prompts):
            m.prompts.append(PromptResult(drafted=30, accepted=round(30 * (rate + 0.01 * (i % 3))), rounds=10))
        return m


def run_head(head_id, good, tmp_path):
    h = BY_ID[head_id]
    folder = build(h, tmp_path)
    recipe, pair = load_recipe(h.recipe), builtin_pair(h.recipe)
    inp = ProbeInput(recipe, h.target, folder, [[5, 6, 7]] * 8, "stand-in", 8, 3,
                     validate_findings(recipe, folder, h.target, "cpu"),
                     validate=lambda f: validate_findings(recipe, f, h.target, "cpu"), method=pair.method,
                     expected=expected_for(recipe, pair, "vllm"))
    m = Stand_in(good)
    return h, probe(inp, m), m


def test_a_flipped_norm_is_changed_and_the_patch_answer_named(tmp_path):
    h, r, _ = run_head("eagle3-norm-flipped", lambda c: c.get("norm_before_residual") is False, tmp_path)
    assert verdict(h, r) == "recovered" and r["decision"]["outcome"] == "changed"
    assert "SRG499 norm_before_residual" in r["decision"]["covers"]


def test_the_served_ids_refused_by_validate_are_never_started(tmp_path):
    """dflash [1, 7, 8]: the served reading names layer 9 (SRG317): no candidate carries it; the one-late ids
    [0, 6, 7] are measured against their neighbours and win where they lead beyond the noise (the stand-in's
    0.8 against 0.6); the causal check stands at the expectation."""
    h, r, m = run_head("dflash-ids-capture-late",
                       lambda c: c["dflash_config"]["target_layer_ids"] == [0, 6, 7] and not c["dflash_config"].get("causal"),
                       tmp_path)
    assert verdict(h, r) == "recovered", r["decision"]
    assert m.configs and all(c["dflash_config"]["target_layer_ids"] != [1, 7, 8] for c in m.configs)
    assert {tuple(c["dflash_config"]["target_layer_ids"]) for c in m.configs} >= {(0, 6, 7), (1, 6, 7), (0, 5, 7)}
    assert r["decision"]["answers"]["SRG499 dflash_config.target_layer_ids"]["name"].startswith("ids [0, 6, 7]")


def test_every_reading_refused_is_cannot_probe_without_measuring(tmp_path):
    h, r, m = run_head("dflash-ids-duplicated", lambda c: True, tmp_path)
    assert r["status"] == "cannot probe" and m.configs == [] and verdict(h, r) == "cannot probe"
    assert {c["stage"] for c in r["candidates"]} == {"validate"}


def test_two_groups_moved_are_measured_together(tmp_path):
    """norm flipped (inputs) and a random embedding (vocabulary): each group's winner alone is not the truth;
    the two winners together are measured and win."""
    def good(c):
        return c.get("norm_before_residual") is False
    h = BY_ID["eagle3-norm-flipped-embed-random"]

    class Both(Stand_in):
        def measure(self, folder, prompts, tokens, k, keep_going):
            from safetensors import safe_open

            with safe_open(str(folder / "model.safetensors"), "pt") as f:
                shares = "embed_tokens.weight" not in f.keys()
            cfg = json.loads((folder / "config.json").read_text())
            self.good = lambda _c: True
            rate = 0.5 + 0.15 * good(cfg) + 0.15 * shares
            m = Measured(verified=True)
            for i, _ in enumerate(prompts):
                m.prompts.append(PromptResult(drafted=30, accepted=round(30 * (rate + 0.01 * (i % 3))), rounds=10))
            return m

    folder = build(h, tmp_path)
    recipe, pair = load_recipe(h.recipe), builtin_pair(h.recipe)
    inp = ProbeInput(recipe, h.target, folder, [[5]] * 8, "s", 8, 3, validate_findings(recipe, folder, h.target, "cpu"),
                     validate=lambda f: validate_findings(recipe, f, h.target, "cpu"), method=pair.method,
                     expected=expected_for(recipe, pair, "vllm"))
    r = probe(inp, Both(good))
    assert any(c["stage_built"] == 2 for c in r["candidates"])
    assert verdict(h, r) == "recovered", r["decision"]


def test_a_copy_that_cannot_be_made_is_a_coded_row(tmp_path, monkeypatch):
    def broken(*a, **k):
        raise ValueError("no tensor embed_tokens.weight in the draft")

    monkeypatch.setattr(probe_runner, "candidate_folder", broken)
    _, r, _ = run_head("eagle3-norm-flipped", lambda c: True, tmp_path)
    failed = [c for c in r["candidates"] if c["error"]]
    assert failed and all(c["stage"] == "copy" and "no tensor" in c["error"] for c in failed)
    assert r["status"] in ("decided", "undecided", "cannot probe")


def test_the_leaders_answers_are_tested_in_its_own_context(tmp_path):
    """Ids one layer early and a YaRN scaling (the outside check): the RoPE question was measured only under the
    served (wrong) ids, where both RoPEs read alike; the leader (right ids, own RoPE) is measured against the
    target's RoPE under the right ids before anything is decided."""
    from .catalogue import OUTSIDE

    h = {x.id: x for x in OUTSIDE}["out-eagle3-specforge-ids-and-yarn"]
    folder = build(h, tmp_path)
    recipe, pair = load_recipe(h.recipe), builtin_pair(h.recipe)

    class Graded(Stand_in):
        """Right ids +0.2, norm false +0.05; the target's RoPE +0.1, but only under the right ids."""

        def measure(self, folder, prompts, tokens, k, keep_going):
            c = json.loads((folder / "config.json").read_text())
            ids = c.get("eagle_aux_hidden_state_layer_ids") == [1, 7, 8]
            rate = 0.5 + 0.2 * ids + 0.05 * (c.get("norm_before_residual") is False) \
                + 0.1 * (ids and (c.get("rope_parameters") or {}).get("rope_type") != "yarn")
            m = Measured(verified=True)
            for i, _ in enumerate(prompts):
                m.prompts.append(PromptResult(drafted=30, accepted=round(30 * (rate + 0.01 * (i % 3))), rounds=10))
            return m

    inp = ProbeInput(recipe, h.target, folder, [[5]] * 8, "s", 8, 3, validate_findings(recipe, folder, h.target, "cpu"),
                     validate=lambda f: validate_findings(recipe, f, h.target, "cpu"), method=pair.method,
                     expected=expected_for(recipe, pair, "vllm"))
    r = probe(inp, Graded(None))
    late = [c["name"] for c in r["candidates"] if c["stage_built"] == 2]
    assert any("[1, 7, 8]" in n and "the target's RoPE" in n for n in late), late
    assert verdict(h, r) == "recovered", r["decision"]
