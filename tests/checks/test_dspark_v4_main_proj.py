"""SRG609 under `--weights` for DeepSeek-V4's own DSpark drafter: judged by the tensor its loader reads.

The branch point (31a0274) judged every DSpark plan that captures target states as an EAGLE-3 head and looked for
`fc.weight` / `model.fc.weight`: DeepSeek-V4's drafter has none, so every V4 DSpark checkpoint had a false
"EAGLE-3 head without an fc layer" error (bench/catalogue4_outside.py, the SpecForge#800 rows). vLLM's
DSparkDeepseekV4ForCausalLM (every wheel 0.25.0-0.34.0, every platform's dspark.py) fuses the captured states in
`model.main_proj`, a ReplicatedLinear(hidden x len(dspark_target_layer_ids) -> hidden) that `load_weights` fills
from the checkpoint's `mtp.{i}.main_proj.*` alone (`_remap_dspark_name`): that is the tensor judged now, present
and sized for the captured layers. `test_every_wheels_drafter_reads_main_proj` reads that again from each wheel.

Tiny headers (as tests/checks/test_dspark_v4_own_vocab.py): the names and the width in units of the tensor's own
hidden size are what the check reads.
"""
from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest

import tiny_checkpoints as tc
from testpaths import ROOT, VLLM_WHEELS_WHERE, vllm_wheels

DSPARK_V4 = ROOT / "tests" / "data" / "catalogue4" / "DeepSeek-V4-Flash-DSpark.config.json"
HIDDEN, VOCAB = 4, 8


def config(**changes) -> dict:
    cfg = {k: v for k, v in json.loads(DSPARK_V4.read_text()).items() if not k.startswith("_")}
    cfg.update(changes)
    return cfg


def tensors(main_proj: list[int] | None = (HIDDEN, 3 * HIDDEN), name: str = "mtp.0.main_proj.weight") -> dict:
    """The target's pair and a few DSpark stage tensors, as DeepSeek-V4-Flash-DSpark names them."""
    t = {"embed.weight": tc.rand([VOCAB, HIDDEN], 1), "head.weight": tc.rand([VOCAB, HIDDEN], 2),
         "layers.0.attn.wkv.weight": tc.rand([HIDDEN, HIDDEN], 3),
         "mtp.0.main_norm.weight": tc.rand([HIDDEN], 5), "mtp.1.attn.wkv.weight": tc.rand([HIDDEN, HIDDEN], 6)}
    if main_proj is not None:
        t[name] = tc.rand(list(main_proj), 4)
    return t


def srg609(run_cli, tmp_path, cfg: dict, tens: dict, *args) -> tuple[int, list[dict], dict]:
    folder = tc.write_folder(tmp_path / "dspark-v4", cfg, tens)
    rc, out, err = run_cli("validate", "dspark", "--target", folder, "--draft", folder, "--method", "dspark",
                           "--weights", "--json", *args)
    assert out.strip(), err
    doc = json.loads(out)
    return rc, [d for d in doc["diagnostics"] if d["code"] == "SRG609"], doc


@pytest.mark.parametrize("release", ["0.25.0", "0.26.0", "0.34.0"])
def test_the_published_layout_has_no_fc_error(run_cli, tmp_path, release):
    """The branch point: SRG609 "EAGLE-3 head without an fc layer (fc.weight / model.fc.weight)"."""
    rc, found, doc = srg609(run_cli, tmp_path, config(), tensors(), "--engine-version", release)
    assert found == [], found
    assert not [d for d in doc["diagnostics"] if "fc layer" in d["message"]]


def test_the_v41_drafter_is_judged_alike(run_cli, tmp_path):
    """0.30+ give a deepseek_v41 target's drafter DSparkV41DraftModel: the same main_proj (ids as-is)."""
    _, found, _ = srg609(run_cli, tmp_path, config(model_type="deepseek_v41"), tensors(), "--engine-version", "0.34.0")
    assert found == [], found


def test_main_proj_of_another_stage_is_what_vllm_loads(run_cli, tmp_path):
    """_remap_dspark_name sends main_proj.* of any stage to model.main_proj."""
    _, found, _ = srg609(run_cli, tmp_path, config(), tensors(name="mtp.2.main_proj.weight"), "--engine-version", "0.34.0")
    assert found == [], found


def test_a_drafter_without_main_proj_is_said_so(run_cli, tmp_path):
    rc, found, _ = srg609(run_cli, tmp_path, config(), tensors(main_proj=None), "--engine-version", "0.34.0")
    assert len(found) == 1 and found[0]["severity"] == "error" and rc == 1, found
    msg = found[0]["message"]
    assert "main_proj" in msg and "DSparkDeepseekV4ForCausalLM" in msg and "fc.weight" not in msg
    assert found[0]["location"].endswith("mtp.0.main_proj.weight")


def test_main_proj_sized_for_another_number_of_layers(run_cli, tmp_path):
    """Trained on two target layers, the config names three: vLLM builds main_proj for 3 x hidden and its loader
    refuses the checkpoint's [hidden, 2 x hidden]."""
    _, found, _ = srg609(run_cli, tmp_path, config(), tensors(main_proj=(HIDDEN, 2 * HIDDEN)), "--engine-version", "0.34.0")
    assert len(found) == 1 and found[0]["severity"] == "error", found
    msg = found[0]["message"]
    assert "mtp.0.main_proj.weight [4, 8]" in msg and "2 target layers" in msg and "captures 3 target layers" in msg
    assert found[0]["location"].endswith("mtp.0.main_proj.weight")


def test_a_dense_dspark_head_is_still_judged_by_its_fc(run_cli, tmp_path):
    """The Qwen3 form keeps the EAGLE-3 fc rule: no fc, SRG609 as before."""
    target = tc.write_folder(tmp_path / "t", tc.llama_config(), tc.target_tensors())
    draft_cfg = {k: v for k, v in json.loads((ROOT / "tests" / "verdicts" / "configs" /
                                              "specforge-qwen3-8b-dspark.json").read_text()).items()
                 if not k.startswith("_")}
    draft = tc.write_folder(tmp_path / "d", draft_cfg, {"model.layers.0.self_attn.q_proj.weight": tc.rand([4, 4], 1)})
    from surgery.checks.dspark_layout import is_v4_drafter
    from surgery.facts.fromconfig import facts_from_config

    assert not is_v4_drafter(facts_from_config(draft_cfg, "d"), "dspark")
    rc, out, err = run_cli("validate", "dspark", "--target", target, "--draft", draft, "--weights", "--json")
    found = [d for d in json.loads(out)["diagnostics"] if d["code"] == "SRG609"]
    assert found and "fc" in found[0]["message"], (found, err[-500:])


# ------------------------------------------------------------------ each wheel's drafter reads main_proj

def _wheels() -> list[Path]:
    return vllm_wheels()


@pytest.mark.parametrize("wheel", _wheels() or [None], ids=lambda w: w.name.split("-")[1] if w else "no-wheels")
def test_every_wheels_drafter_reads_main_proj(wheel):
    """Every DSpark class of DeepSeek-V4 / V4.1 in the wheel: main_proj built for hidden x len(target ids), and
    the checkpoint's main_proj.* of a stage mapped to model.main_proj (no fc anywhere)."""
    if wheel is None:
        pytest.skip(f"no vLLM wheel in {VLLM_WHEELS_WHERE}")
    z = zipfile.ZipFile(wheel)
    files = [n for n in z.namelist() if re.fullmatch(r"vllm/models/deepseek_v41?/(nvidia|amd|xpu)/dspark\.py", n)]
    assert any("/nvidia/" in n for n in files), wheel.name
    for name in files:
        text = z.read(name).decode()
        assert re.search(r"self\.main_proj = ReplicatedLinear\(\s*config\.hidden_size \* len\(self\.target_layer_ids\),"
                         r"\s*config\.hidden_size,", text), name
        assert re.search(r'rest\.startswith\(\("main_proj\.", "main_norm\."\)\)', text), name
        assert 'return f"model.{rest}"' in text, name
        assert not re.search(r"\bself\.fc\b", text), name
