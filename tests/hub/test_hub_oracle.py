"""Oracle tests against huggingface_hub itself:
- the local hub speaks the protocol the real client expects (model_info, hf_hub_download,
  get_safetensors_metadata), so what surgery is tested against is the hub's protocol;
- what surgery writes into the HF cache is what huggingface_hub's cache functions read, and what
  huggingface_hub downloaded is what surgery reads offline (no request);
- our settings (surgery/hub/settings.py) are huggingface_hub.constants' rules, under each environment.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hub.repos import EAGLE3, LLAMA, TINY_HEAD, TINY_TARGET


def test_real_client_reads_the_local_hub(hubenv):
    from huggingface_hub import HfApi, hf_hub_download

    api = HfApi(endpoint=hubenv.endpoint, token="hf_test_token")
    info = api.model_info(LLAMA, files_metadata=True)
    assert info.sha == hubenv.repos[LLAMA].main
    sizes = {s.rfilename: s.size for s in info.siblings}
    assert sizes["model-00001-of-00004.safetensors"] == hubenv.repos[LLAMA].files["model-00001-of-00004.safetensors"].size
    path = hf_hub_download(LLAMA, "config.json", token="hf_test_token", cache_dir=os.environ["HF_HOME"] + "/hub",
                           endpoint=hubenv.endpoint)
    assert json.loads(open(path).read())["num_hidden_layers"] == 32


def test_headers_equal_huggingface_hub_reader(hubenv):
    """Our range-request header reader against huggingface_hub's get_safetensors_metadata."""
    from huggingface_hub import HfApi

    from surgery.checks.safetensors_header import read_checkpoint
    from surgery.facts.modelref import open_model

    theirs = HfApi(endpoint=hubenv.endpoint, token="hf_test_token").get_safetensors_metadata(LLAMA)
    ours = read_checkpoint(open_model(LLAMA))
    expected = {name: (t.dtype, tuple(t.shape), fname) for fname, meta in theirs.files_metadata.items()
                for name, t in meta.tensors.items()}
    got = {name: (t.dtype, t.shape, t.file.rsplit("/", 1)[-1]) for name, t in ours.tensors.items()}
    assert got == expected and len(got) == 291


def test_cache_we_write_is_read_by_huggingface_hub(run_cli, hubenv):
    from huggingface_hub import scan_cache_dir, try_to_load_from_cache

    code, out, err = run_cli("validate", "eagle3", "--target", LLAMA, "--draft", EAGLE3, "--weights")
    assert code == 0, err
    cache = os.environ["HF_HOME"] + "/hub"
    for repo, name in ((LLAMA, "config.json"), (LLAMA, "model.safetensors.index.json"), (EAGLE3, "config.json")):
        path = try_to_load_from_cache(repo, name, cache_dir=cache)  # revision main, through refs/main
        assert isinstance(path, str) and hubenv.repos[repo].main in path
        assert open(path, "rb").read() == hubenv.repos[repo].files[name].content
    report = scan_cache_dir(cache)
    assert not report.warnings, report.warnings
    assert {r.repo_id for r in report.repos} == {LLAMA, EAGLE3}
    for r in report.repos:
        assert [rev.commit_hash for rev in r.revisions] == [hubenv.repos[r.repo_id].main]
        assert {ref for rev in r.revisions for ref in rev.refs} == {"main"}


def test_files_downloaded_by_huggingface_hub_are_read_offline(run_cli, hubenv, monkeypatch):
    """A cache filled by `hf download` (snapshot_download, weights included): we read it all
    offline, weights headers included, and make no request."""
    from huggingface_hub import snapshot_download

    cache = os.environ["HF_HOME"] + "/hub"
    for repo in (TINY_TARGET, TINY_HEAD):
        snapshot_download(repo, cache_dir=cache, endpoint=hubenv.endpoint, token="hf_test_token")
    hubenv.reset_log()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, out, err = run_cli("validate", "eagle3", "--target", TINY_TARGET, "--draft", TINY_HEAD, "--weights", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert hubenv.log == []
    assert data["target"]["pin"]["source"] == "hf-cache"
    assert data["weights"]["target"]["tensors"] > 0


ENVS = [
    {},
    {"HF_HOME": "/tmp/x-home"},
    {"HF_HOME": "/tmp/x-home", "HF_HUB_CACHE": "/tmp/y-cache"},
    {"XDG_CACHE_HOME": "/tmp/xdg"},
    {"HUGGINGFACE_HUB_CACHE": "/tmp/legacy"},
    {"HF_ENDPOINT": "http://127.0.0.1:9/"},
    {"HF_HUB_OFFLINE": "1"},
    {"HF_HUB_OFFLINE": "yes"},
    {"HF_HUB_OFFLINE": "0"},
    {"TRANSFORMERS_OFFLINE": "1"},
]


@pytest.mark.parametrize("env", ENVS, ids=[",".join(e) or "default" for e in ENVS])
def test_settings_follow_huggingface_hub_constants(env):
    probe = ("import json\nfrom huggingface_hub import constants as c\nfrom surgery.hub import settings as s\n"
             "print(json.dumps([[c.ENDPOINT, c.HF_HUB_CACHE, c.HF_HUB_OFFLINE, c.HF_HOME],"
             " [s.endpoint(), str(s.hub_cache()), s.offline(), str(s.hf_home())]]))")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "XDG_", "TRANSFORMERS_"))}
    proc = subprocess.run([sys.executable, "-c", probe], env={**clean, **env}, capture_output=True, text=True, timeout=60)
    theirs, ours = json.loads(proc.stdout)
    assert ours == theirs
