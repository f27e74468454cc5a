"""Issue 65: the built-in pairs agree with their own numbers. Each pair's measured vLLM row (surgery/data/pairs/
index.yaml `expect.vllm.source`: the release and the result file; the README's and docs/numbers.md's family
figures are these runs) is held to `surgery validate <pair> --engine-version <that release>`:

- a row measured on the pair as shipped: the release validates the pair (no error);
- a row measured on the pair plus keys the run added for that release (bench `older_vllm_spelling`, carried
  into the row as `source.config_added` by tools/pair_expectations.py): the release refuses the pair as
  shipped, and validates the pair with those keys, which is what the row measured.

So a verdict that refuses a pair its row says the release served (the DSpark pair on 0.26 was refused by
SRG676 with the legacy runner's mask-token reader, which never serves dspark), or a row that silently
measured another config than the shipped one, fails here.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
PAIRS = REPO / "surgery" / "data" / "pairs"


def measured_rows() -> list[tuple[str, dict, dict]]:
    pairs = yaml.safe_load((PAIRS / "index.yaml").read_text())["pairs"]
    out = []
    for name, pair in pairs.items():
        source = ((pair.get("expect") or {}).get("vllm") or {}).get("source") or {}
        if source.get("kind") == "measured" and source.get("engine") == "vllm":
            out.append((name, pair, source))
    return out


def errors(run_cli, name: str, pair: dict, release: str, k: int, draft: Path) -> list[str]:
    rc, out, err = run_cli("validate", name, "--target", PAIRS / pair["target"], "--draft", draft, "--engine", "vllm",
                           "--engine-version", release, "--num-speculative-tokens", k, "--json")
    assert rc in (0, 1) and "Traceback" not in err, err[-2000:]
    return sorted(d["code"] for d in json.loads(out)["diagnostics"] if d["severity"] == "error")


def test_every_measured_pair_is_judged():
    names = [name for name, _, _ in measured_rows()]
    assert len(names) >= 9 and {"dspark", "peagle", "eagle3"} <= set(names), names


@pytest.mark.parametrize("name", [name for name, _, _ in measured_rows()])
def test_row_and_verdict_agree(run_cli, tmp_path, name):
    _, pair, source = next(row for row in measured_rows() if row[0] == name)
    release, run = source["release"], json.loads((REPO / source["file"]).read_text())
    k = run.get("num_speculative_tokens") or 3
    shipped = errors(run_cli, name, pair, release, k, PAIRS / pair["draft"])
    added = json.loads(source.get("config_added") or "{}")
    if not added:
        assert shipped == [], f"{name}: measured on vLLM {release} as shipped, and validate says {shipped}"
        return
    assert shipped, f"{name}: the row added {added} for vLLM {release}, but the pair as shipped validates: re-measure"
    folder = tmp_path / "draft"
    folder.mkdir()
    cfg = json.loads((PAIRS / pair["draft"] / "config.json").read_text())
    for key, value in added.items():
        cfg[key] = {**cfg[key], **value} if isinstance(value, dict) and isinstance(cfg.get(key), dict) else value
    (folder / "config.json").write_text(json.dumps(cfg))
    assert errors(run_cli, name, pair, release, k, folder) == [], f"{name}: the config the row measured"
