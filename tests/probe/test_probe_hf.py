"""`surgery probe` on the HF engine with the built-in Gemma 4 pair (default run: one mislabelled head
and the shipped one, six held-out prompts of 24 tokens). Counts are asserted, never times."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from surgery.tinymodels.bytevocab import encode
from surgery.guard.settings import parse_config
from surgery.pairs import held_out_prompts
from surgery.commands.probe import validate_findings
from surgery.probe.measure_hf import HFMeasurer
from surgery.probe.runner import ProbeInput, probe
from surgery.probe.write import document
from surgery.recipe import load_recipe

from .heads import HEADS, build, verdict

pytestmark = pytest.mark.usefixtures("one_torch_thread")
BY_ID = {h.id: h for h in HEADS}
PROMPTS, TOKENS, K = 6, 24, 3


def run_probe(head, folder):
    recipe = load_recipe(head.recipe)
    prompts = [encode(t) for t in held_out_prompts()[:PROMPTS]]
    inp = ProbeInput(recipe, head.target, folder, prompts, "builtin", TOKENS, K,
                     validate_findings(recipe, folder, head.target))
    return probe(inp, HFMeasurer(recipe, head.target, threads=1))


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("probe_hf")
    out = {}
    for hid in ("gemma4-rope-sliding-theta", "gemma4-shipped"):
        h = BY_ID[hid]
        folder = build(h, tmp)
        out[hid] = (h, folder, run_probe(h, folder))
    return out


def test_mislabelled_rope_is_recovered(results):
    head, _, r = results["gemma4-rope-sliding-theta"]
    assert verdict(head, r) == "recovered"
    assert r["decision"]["status"] == "decided" and r["decision"]["outcome"] == "changed"
    assert r["decision"]["answers"]["SRG618 rope"]["name"] == "the target's RoPE"
    assert r["decision"]["covers"] == ["SRG618 rope"]
    served, fixed = r["candidates"]
    assert served["as_served"] and fixed["mean_prompt_acceptance"] > served["mean_prompt_acceptance"]
    assert served["verified"] and fixed["verified"]
    c = r["ranking"]["comparisons"][served["name"]]
    assert c["prompts_agreeing"] == PROMPTS and c["interval"][0] > 0


def test_counts_are_reported(results):
    _, _, r = results["gemma4-rope-sliding-theta"]
    c = r["counts"]
    assert c["candidates"] == 2 and c["prompts_decoded"] == 2 * PROMPTS
    # one prefill per prompt, then at most one verify forward per token and at least one per K + 1 tokens
    rounds = sum(row["rounds"] for row in r["candidates"])
    assert c["target_forwards"] == rounds + 2 * PROMPTS
    assert 2 * PROMPTS * TOKENS // (K + 1) <= rounds <= 2 * PROMPTS * TOKENS
    assert c["draft_forwards"] == sum(row["drafted"] for row in r["candidates"])


def test_shipped_pair_is_confirmed_covering_no_question(results):
    """issue 66: one status: "nothing to decide" is decided (confirmed) and says it covers no question."""
    head, _, r = results["gemma4-shipped"]
    assert verdict(head, r) == "confirmed" and r["status"] == r["decision"]["status"] == "decided"
    assert r["decision"]["outcome"] == "confirmed" and r["decision"]["covers"] == []
    assert r["counts"]["candidates"] == 1 and r["candidates"][0]["as_served"]


def test_write_emits_the_patch_and_the_expectation(results, tmp_path):
    head, folder, r = results["gemma4-rope-sliding-theta"]
    doc = document(r, folder, head.target, {"target": {"path": str(head.target)}, "draft": {"path": str(folder)}})
    text = yaml.safe_dump(doc, sort_keys=False)
    back = yaml.safe_load(text)
    target_cfg = json.loads((head.target / "config.json").read_text())
    assert back["config_patch"]["set"] == {"text_config.rope_parameters": target_cfg["rope_parameters"]}
    expect = back["guard"]["expect"]
    assert expect["source"]["kind"] == "measured" and expect["source"]["engine"] == "hf"
    assert set(expect["source"]) >= {"engine", "release", "card", "prompts", "date", "by"}
    figures = {k: v for k, v in expect.items() if k != "source"}
    assert all(isinstance(v, str) for v in expect["source"].values())  # the shared format: free strings
    if hasattr(parse_config({}), "expect_source"):  # a guard that reads expect.source (guard55v): all of it
        cfg = parse_config({"expect": expect})
        assert cfg.source["kind"] == "measured" and cfg.source["engine"] == "hf"
    else:  # before it: the figures, which the guard's own parser accepts
        parse_config({"expect": figures})
    assert 1 <= figures["mean_length"] <= 1 + K and 0 < figures["acceptance"] <= 1
    assert back["probe"]["answers"] == {"SRG618 rope": "the target's RoPE"} and back["probe"]["pins"]["target"]
    assert back["probe"]["covers"] == ["SRG618 rope"] and Path(back["config_patch"]["file"]).is_absolute()


def test_undecided_writes_nothing():
    r = {"decision": {"status": "undecided", "why": "x", "answers": {}}, "candidates": []}
    assert document(r, ".", ".", {}) is None
