"""Issue 42 class 9: a standard published pair validates with no warning, unless the warning names a real
risk for that pair. The pairs, the settings and the allowed warnings (each with why) are the table of
docs/recipes.md "Reference pairs", parsed here: a row added there is tested, a warning allowed there
must have its reason written there, and a new warning on a reference pair fails this test.

Configs: tests/data/configs (real public values, each file's `_hf_repo` / `_source`)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from verdictline import without_release as NOREL  # noqa: E402  (the judged release, issue 53)

HERE = Path(__file__).resolve().parent
CONFIGS = HERE / "data" / "configs"
RECIPES_MD = HERE.parent / "docs" / "recipes.md"
# every row at these settings (docs/recipes.md says the same); "fp8" in a row's last column names the codes
# allowed with --kv-cache-dtype fp8 only
SETTINGS = {"default": [], "tp2": ["--tp", "2"], "cuda": ["--device", "cuda"], "fp8": ["--kv-cache-dtype", "fp8"]}


def _rows() -> list[dict]:
    text = RECIPES_MD.read_text(encoding="utf-8")
    table = text.split("<!-- reference-pairs:begin -->")[1].split("<!-- reference-pairs:end -->")[0]
    rows = []
    for line in table.strip().splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        recipe, target, draft, also, allowed = cells
        target_file = re.match(r"`([^`]+)`", target).group(1)
        draft_file = target_file if draft == "the same" else re.match(r"`([^`]+)`", draft).group(1)
        always, _, fp8 = allowed.partition("fp8:")
        rows.append({"recipe": recipe.strip("`"), "target": target_file, "draft": draft_file,
                     "also": also.strip("`").split() if also else [],
                     "always": set(re.findall(r"SRG\d{3}", always)), "fp8": set(re.findall(r"SRG\d{3}", fp8))})
    return rows


ROWS = _rows()
CASES = [pytest.param(row, name, id=f"{row['recipe']}-{row['target'].removesuffix('.json')}-{name}")
         for row in ROWS for name in [*SETTINGS, *(["extra"] if row["also"] else [])]]


def test_the_table_is_read():
    assert len(ROWS) >= 9 and {r["recipe"] for r in ROWS} >= {"gemma4-mtp", "eagle3", "eagle", "draft-model",
                                                              "deepseek-mtp", "mtp"}


def test_every_allowed_warning_has_its_reason_written():
    text = RECIPES_MD.read_text(encoding="utf-8").split("<!-- reference-pairs:end -->")[1].split("\n## ")[0]
    allowed = set().union(*(r["always"] | r["fp8"] for r in ROWS))
    for code in allowed:
        assert re.search(rf"^- `{code}`: \S", text, re.M), f"{code} is allowed without a reason under the table"


@pytest.mark.parametrize("row, setting", CASES)
def test_reference_pair_has_no_warning_but_the_listed_real_risks(row, setting, run_cli):
    argv = row["also"] if setting == "extra" else SETTINGS[setting]
    rc, out, _ = run_cli("validate", row["recipe"], "--target", CONFIGS / row["target"], "--draft",
                         CONFIGS / row["draft"], *argv, "--json")
    diagnostics = json.loads(out)["diagnostics"]
    assert rc == 0 and not [d for d in diagnostics if d["severity"] == "error"], diagnostics
    warned = {d["code"] for d in diagnostics if d["severity"] == "warning"}
    allowed = row["always"] | (row["fp8"] if setting == "fp8" else set())
    assert warned <= allowed, f"warnings beyond the real risks docs/recipes.md lists: {warned - allowed}"
    # the three that warned on every standard run (issue 42 class 9) are notes here
    assert not warned & {"SRG334", "SRG351", "SRG644"}


def test_text_output_of_a_reference_pair_is_one_line(run_cli):
    """What a user sees for the Gemma 4 E2B pair at --tp 2: the verdict alone on stdout, nothing on stderr
    (the device note is behind --verbose)."""
    rc, out, err = run_cli("validate", "gemma4-mtp", "--target", CONFIGS / "gemma-4-E2B-it.json", "--draft",
                           CONFIGS / "gemma-4-E2B-it-assistant.json", "--tp", "2")
    assert rc == 0 and err == "" and NOREL(out).startswith("valid: gemma4-mtp") and out.count("\n") == 1, (out, err)
    assert "1 note (--verbose)" in out
