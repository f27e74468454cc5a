"""SRG671 reads two checkpoints' tokenizer files: content from outside (issue 54). A tokenizer.json
not in the shape the tokenizers library writes is "not checked", said with why (never a traceback),
and a token quoted in the message is escaped and cut: a 40 MB vocabulary key once became 41.9 MB of
output. Local folders here; over the hub: tests/hub/test_hostile_round2.py."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "surgery" / "data" / "tiny" / "weights"


def srg671(run_cli, draft: Path) -> tuple[list[dict], str]:
    rc, out, err = run_cli("validate", "gemma4-mtp", "--target", TINY / "target", "--draft", draft, "--json")
    assert "Traceback" not in err, err
    return [d for d in json.loads(out)["diagnostics"] if d["code"] == "SRG671"], out + err


def draft_with(tmp_path: Path, edit) -> Path:
    draft = tmp_path / "draft"
    shutil.copytree(TINY / "draft", draft)
    tok = json.loads((draft / "tokenizer.json").read_text())
    edit(tok)
    (draft / "tokenizer.json").write_text(json.dumps(tok))
    return draft


@pytest.mark.parametrize("added", [7, {"a": 1}, [[1, "a"]], [{"id": "x", "content": "a"}, {"id": 1, "content": "b"}],
                                   [{"id": None}, {"id": 1}], [{"id": True, "content": "a"}]])
def test_malformed_added_tokens_in_a_folder_are_not_checked_said_so(run_cli, tmp_path, added):
    """A TypeError traceback while sorting ids of mixed types, or an int where a list belongs."""
    draft = draft_with(tmp_path, lambda tok: tok.__setitem__("added_tokens", added))
    hit, _ = srg671(run_cli, draft)
    assert [d["severity"] for d in hit] == ["info"] and "added_tokens" in hit[0]["message"], hit


def test_a_huge_token_is_quoted_escaped_and_cut(run_cli, tmp_path):
    """A vocabulary key of 2 MB (the campaign's was 40 MB) with terminal escapes in it: the message
    quotes its first 80 characters, escaped, and says how long it was; the output stays small."""
    token = "\x1b[2J" + "z" * (2 << 20)

    def edit(tok):
        tok["model"]["vocab"] = {token: 0, **{k: v for k, v in tok["model"]["vocab"].items() if v != 0}}

    hit, text = srg671(run_cli, draft_with(tmp_path, edit))
    assert [d["severity"] for d in hit] == ["error"], hit
    message = hit[0]["message"]
    assert "\\x1b[2J" in message and "\x1b" not in message
    assert f"({len(token)} characters in all)" in message and len(message) < 1000
    assert len(text) < 64 << 10
