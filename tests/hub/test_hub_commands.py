"""The other commands that take a model take a hub id too (issue 33): new, convert, doctor and
apply with transformers; each names the commit it read."""
from __future__ import annotations

import json
from pathlib import Path

from hub.hubserver import HubServer, Repo, RepoFile  # noqa: F401
from hub.repos import EAGLE3, LLAMA, TINY_HEAD, TINY_TARGET


def test_new_takes_hub_ids(run_cli, hubenv):
    code, out, err = run_cli("new", "--target", TINY_TARGET, "--draft", TINY_HEAD, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["recipe"] == "eagle3"
    assert data["target"]["pin"]["commit"] == hubenv.repos[TINY_TARGET].main
    code, out, err = run_cli("new", "--target", TINY_TARGET, "--draft", TINY_HEAD)
    assert code == 0 and f"{TINY_TARGET}@{hubenv.repos[TINY_TARGET].main}" in err


def test_convert_takes_a_hub_head_and_names_the_hub_target(run_cli, hubenv, tmp_path):
    out_dir = tmp_path / "converted"
    code, out, err = run_cli("convert", TINY_HEAD, "--to", "speculators", str(out_dir), "--target", TINY_TARGET,
                             "--producer", "eagle", "--json")
    assert code == 0, err
    cfg = json.loads((out_dir / "config.json").read_text())
    assert cfg["speculators_config"]["verifier"]["name_or_path"] == TINY_TARGET
    # the hub id, with the commit it was read at in the provenance, and no local-verifier warning (SRG024)
    prov = json.loads((out_dir / "surgery-provenance.json").read_text())
    assert prov["target_pin"]["commit"] == hubenv.repos[TINY_TARGET].main
    assert hubenv.repos[TINY_TARGET].main in prov["fields"]["speculators_config.verifier.name_or_path"]
    assert "SRG024" not in err and not json.loads(out)["diagnostics"]
    assert (out_dir / "model.safetensors").read_bytes() == \
        hubenv.repos[TINY_HEAD].files["model.safetensors"].read(0, hubenv.repos[TINY_HEAD].files["model.safetensors"].size)


def test_doctor_resolves_and_pins_the_servers_models(run_cli, hubenv, monkeypatch):
    code, out, err = run_cli("doctor", "--target", LLAMA, "--draft", EAGLE3, "--json")
    data = json.loads(out)
    models = [c for c in data["checks"] if c["check"] == "model"]
    assert len(models) == 2 and all(c["status"] == "ok" for c in models), models
    assert hubenv.repos[LLAMA].main in models[0]["message"] and "engine downloads them" in models[0]["message"]
    assert run_cli("validate", "eagle3", "--target", LLAMA, "--draft", EAGLE3)[0] == 0  # configs now cached
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a server started offline: the weights are not cached
    code, out, err = run_cli("doctor", "--target", LLAMA, "--json")
    data = json.loads(out)
    assert code == 1 and [c["code"] for c in data["checks"] if c["check"] == "model"] == ["SRG061"]


def _tiny_gemma_repos() -> list[Repo]:
    from surgery.tinymodels import tinypair as pair

    target_dir, draft_dir = pair.ensure_tiny_pair()
    out = []
    for repo_id, folder in (("test-org/tiny-gemma4", Path(target_dir)), ("test-org/tiny-gemma4-assistant", Path(draft_dir))):
        out.append(Repo(repo_id, {p.name: RepoFile(p.read_bytes(), lfs=p.suffix == ".safetensors")
                                  for p in folder.iterdir() if p.is_file()}))
    return out


def test_apply_hf_takes_hub_ids(run_cli, tmp_path, monkeypatch):
    repos = _tiny_gemma_repos()
    with HubServer(repos, token=None) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        code, out, err = run_cli("apply", "gemma4-mtp", "--target", repos[0].repo_id, "--draft", repos[1].repo_id,
                                 "--json", "--no-progress", "--prompts", "2", "--max-new-tokens", "8")
        assert code == 0, (out[-1500:], err[-1500:])
        result = json.loads(out)
        assert result["ok"]
        assert any(r["path"].endswith("model.safetensors") and r["status"] == 200 for r in server.log)
