"""The local hub (hubserver.py) with the real-size repos (repos.py), one per module, and an
environment per test: HF_ENDPOINT at the server, a fresh HF_HOME, the server's token (or none)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from hub.hubserver import HubServer
from hub.repos import all_repos, tiny_repos

TOKEN = "hf_test_token"


@pytest.fixture(scope="module")
def hub():
    with HubServer(all_repos() + tiny_repos(), token=TOKEN) as server:
        yield server


@pytest.fixture
def hubenv(hub, tmp_path, monkeypatch):
    """Point surgery and huggingface_hub at the local hub, with an empty cache and the token."""
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.delenv("SURGERY_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "5")
    hub.faults.clear()
    hub.reset_log()
    yield hub
    hub.faults.clear()


@pytest.fixture
def sandbox(hubenv, tmp_path):
    """(root, cache root, a file outside the cache that must stay as it is): HF_HOME is `<tmp>/hf`,
    the rest of `<tmp>` is "outside" (tests/hub/hostile.py lists it before and after)."""
    cache_root = Path(os.environ["HF_HOME"])
    cache_root.mkdir(parents=True, exist_ok=True)
    victim = tmp_path / "victim" / "file.txt"
    victim.parent.mkdir()
    victim.write_bytes(b"precious\n")
    return tmp_path, cache_root, victim
