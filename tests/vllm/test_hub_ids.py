"""Engine runs take hub ids (issue 33): `surgery apply --engine vllm` and `surgery audit` hand
`org/name` to vLLM with the commit the facts were pinned at, vLLM downloads through huggingface_hub
from the local hub (tests/hub/hubserver.py), and the plugin reads the same commit's config."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from hub.hubserver import HubServer, Repo, RepoFile

TARGET, DRAFT = "test-org/eagle3-target", "test-org/eagle3-head"


def _repo(repo_id: str, folder: Path) -> Repo:
    files = {p.name: RepoFile(p.read_bytes(), lfs=p.suffix == ".safetensors")
             for p in sorted(folder.iterdir()) if p.is_file()}
    return Repo(repo_id, files)


@pytest.fixture
def pair_hub(tmp_path, monkeypatch):
    from surgery.pairs import builtin_pair

    pair = builtin_pair("eagle3")
    repos = [_repo(TARGET, pair.target), _repo(DRAFT, pair.draft)]
    with HubServer(repos, token="hf_test_token") as server:
        monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
        monkeypatch.setenv("HF_TOKEN", "hf_test_token")
        for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
            monkeypatch.delenv(var, raising=False)
        # huggingface_hub reads its environment once, at import (an earlier test imported it): what vLLM
        # downloads through it follows these module attributes, surgery follows the environment
        from huggingface_hub import constants

        monkeypatch.setattr(constants, "ENDPOINT", server.endpoint)
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                            server.endpoint + "/{repo_id}/resolve/{revision}/{filename}")
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        yield server


def test_apply_vllm_takes_hub_ids(run_cli, pair_hub):
    code, out, err = run_cli("apply", "eagle3", "--engine", "vllm", "--target", TARGET, "--draft", DRAFT, "--json",
                             "--no-progress")
    result = json.loads(out)
    assert code == 0 and result["ok"] and result["verified"], (out[-2000:], err[-3000:])
    assert result["decode"]["identical"] and result["decode"]["accepted"] > 0
    for side, repo in (("target", TARGET), ("draft", DRAFT)):
        assert result["models"][side]["repo_id"] == repo
        assert result["models"][side]["commit"] == pair_hub.repos[repo].main
    weights = [r for r in pair_hub.log if r["path"].endswith(".safetensors") and r["status"] == 200]
    assert weights, "vLLM downloaded the weights from the local hub"


@pytest.mark.slow  # a second engine process (24 s): opt-in, CI keeps the apply test above within its budget
def test_audit_takes_hub_ids(run_cli, pair_hub):
    code, out, err = run_cli("audit", "eagle3", "--target", TARGET, "--draft", DRAFT, "--json", "--max-model-len", "128",
                             "--engine-arg", "kv_cache_memory_bytes=33554432", "--engine-arg", "max_num_seqs=4",
                             "--engine-arg", "max_num_batched_tokens=256", "--engine-arg", "enable_prefix_caching=false")
    result = json.loads(out)
    assert "findings" in result, (out[-2000:], err[-3000:])
    assert result["generated_tokens"] > 0
    assert {side: p["commit"] for side, p in result["models"].items()} == \
        {"target": pair_hub.repos[TARGET].main, "draft": pair_hub.repos[DRAFT].main}
    # vLLM was handed the pinned commits: every file it asked for is at that commit
    resolves = [r["path"] for r in pair_hub.log if "/resolve/" in r["path"]]
    assert resolves and all(pair_hub.repos[TARGET].main in p or pair_hub.repos[DRAFT].main in p for p in resolves)
