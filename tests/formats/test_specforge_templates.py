"""Issue 42 class 1: SpecForge's EAGLE-3 templates write explicit aux ids in the nested `eagle_config`
layout with no producer mark. Every producer of that layout (SpecForge, TorchSpec, ModelOpt; FIELD.md
"Aux-layer-id conventions") numbers layer outputs, so the ids' meaning is known: a runner that reads them as
layer inputs drafts from layers one early, the failure the miniature ablation puts at -22.4 points
(docs/formats.md). That is an error (SRG656), never `valid`, and the layout is not called ModelOpt's."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from testpaths import CONFIGS, ROOT  # noqa: E402

from surgery.facts import read_facts  # noqa: E402
from surgery.formats import format_of  # noqa: E402
from surgery.formats.conventions import trained_on  # noqa: E402

FORMATS = ROOT / "tests" / "data" / "formats"
CASES = {  # head folder -> (target config, ids vLLM should capture, runners that misread)
    "specforge-deepseek-v3-671b-eagle3": (CONFIGS / "DeepSeek-V3.json", (2, 30, 58), {"legacy"}),
    "specforge-gpt-oss-20b-eagle3": (CONFIGS / "gpt-oss-20b.json", (2, 12, 22), {"legacy", "v2"}),
    "specforge-gpt-oss-20b-eagle3-dense": (CONFIGS / "gpt-oss-20b.json", (2, 12, 22), {"legacy", "v2"}),
}


def _validate(draft: Path, target: Path, *extra: str) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, "-m", "surgery", "validate", "eagle3", "--target", str(target),
                           "--draft", str(draft), "--json", *extra], cwd=ROOT, capture_output=True, text=True)
    return proc.returncode, json.loads(proc.stdout)


@pytest.mark.parametrize("folder", sorted(CASES))
def test_specforge_nested_ids_are_read_as_layer_outputs(folder):
    target, trained, _ = CASES[folder]
    fmt = format_of(read_facts(FORMATS / folder))
    assert (fmt.name, fmt.producer) == ("nested", None)  # SpecForge's layout, not ModelOpt's (no next_layer_regular)
    assert set(fmt.writers) == {"specforge", "torchspec", "modelopt"}
    assert trained_on(fmt, read_facts(target).num_layers)[0] == trained


@pytest.mark.parametrize("folder", sorted(CASES))
def test_specforge_templates_with_explicit_ids_are_not_valid(folder):
    target, trained, misread = CASES[folder]
    rc, out = _validate(FORMATS / folder, target)
    assert rc == 1 and out["ok"] is False
    errors = [d for d in out["diagnostics"] if d["code"] == "SRG656"]
    assert {d["severity"] for d in errors} == {"error"}
    assert {m for d in errors for m in ("legacy", "v2") if f"the {m} runner" in d["message"]} == misread
    assert all(str(list(trained)) in d["message"] for d in errors)
    assert "SRG659" not in [d["code"] for d in out["diagnostics"]]


def test_the_modelopt_mark_still_names_modelopt():
    fmt = format_of(read_facts(FORMATS / "modelopt-llama3.1-8b-eagle3"))
    assert (fmt.name, fmt.producer, fmt.writers) == ("modelopt", "modelopt", ())


def test_ids_whose_writers_disagree_are_a_warning_not_a_silent_info(tmp_path):
    """Top-level ids in a plain EAGLE-3 config: SpecForge / SGLang number outputs, `surgery convert --to
    eagle` and hand-written configs vLLM's inputs. Ambiguous: SRG659 at warning (printed by validate)."""
    rc, out = _validate(FORMATS / "sglang-llama3.1-8b-eagle3-ids", CONFIGS / "Llama-3.1-8B-Instruct.json")
    found = [d for d in out["diagnostics"] if d["code"] == "SRG659"]
    assert [d["severity"] for d in found] == ["warning"]
    assert "[2, 16, 29]" in found[0]["message"] and "[1, 15, 28]" in found[0]["message"]


def test_convert_translates_specforge_nested_ids_without_producer():
    """The meaning known, `surgery convert` writes the ids in vLLM's convention at the top level (was
    refused: 'pass --producer')."""
    from surgery.formats.convert import converted

    cfg = json.loads((FORMATS / "specforge-deepseek-v3-671b-eagle3" / "config.json").read_text())
    out, why = converted(cfg, "speculators", 61, verifier="deepseek-ai/DeepSeek-V3",
                         verifier_architectures=("DeepseekV3ForCausalLM",))
    assert out["eagle_aux_hidden_state_layer_ids"] == [2, 30, 58]
    assert any("specforge" in str(v) for v in why.values())
