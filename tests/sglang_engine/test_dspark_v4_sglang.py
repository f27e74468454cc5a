"""`--engine sglang` on DeepSeek-V4's own DSpark drafter (DeepSeek-V4-Flash-DSpark: its stages in the target
checkpoint, one config is both --target and --draft), judged by what SGLang 0.5.16-0.5.23 read.

The branch point (31a0274) gave the published config two errors on every release: SRG776 (the dense form's rule:
a top-level `markov_rank`, which the V4 config does not have) and SRG362 (aux id 43 of a 43-layer target, judged by
the generic input-of-layer capture). Every wheel instead:

- rewrites a DeepseekV4ForCausalLM draft whose config carries a dspark_* key to DeepseekV4ForCausalLMDSpark under
  DSPARK (configs/model_config.py _config_draft_model), whose constructor reads the rank through
  speculative/dspark_components/dspark_config.py parse_dspark_draft_config: `dspark_markov_rank`, else
  `dspark_config.markov_rank`, else the (text) config's `markov_rank`; refused only when that is not > 0 ("DSpark V4
  draft requires markov_rank > 0", models/deepseek_v4_dspark.py);
- captures that drafter's features in the target itself: DeepseekV4ForCausalLM.set_dspark_layers_to_capture takes
  the ids as-is (model_runner_components/spec_aux_hidden_state.py) and the forward takes layer i's output after the
  layer, i in 0..L-1: the plan's ids (vLLM's numbering, +1) 41, 42, 43 are layers 40, 41, 42's outputs.

SGLang 0.5.23's own code agrees (tests/sglang_oracle/grid.py `deepseek-v4-dspark*`); `test_the_wheels_read_it_so`
reads each wheel again.
"""
from __future__ import annotations

import json
import os
import re
import zipfile
from pathlib import Path

import pytest

from testpaths import ROOT

DSPARK_V4 = ROOT / "tests" / "data" / "catalogue4" / "DeepSeek-V4-Flash-DSpark.config.json"
WHEELS = ROOT / ".cache" / "wheels" / "sglang"
ALL = ["0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"]


def validate(run_cli, tmp_path, release: str, **changes) -> tuple[int, dict]:
    cfg = {k: v for k, v in json.loads(DSPARK_V4.read_text()).items() if not k.startswith("_")}
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    rc, out, err = run_cli("validate", "dspark", "--target", path, "--draft", path, "--engine", "sglang",
                           "--engine-version", release, "--json")
    assert out.strip(), err
    return rc, json.loads(out)


def found(out: dict, code: str) -> list[dict]:
    return [d for d in out["diagnostics"] if d["code"] == code and d["severity"] in ("error", "warning")]


@pytest.mark.parametrize("release", ALL)
def test_the_published_config_is_served(run_cli, tmp_path, release):
    rc, out = validate(run_cli, tmp_path, release)
    assert not [d for d in out["diagnostics"] if d["severity"] == "error"] and rc == 0, out["diagnostics"]
    assert [o["layers"] for o in out["operations"] if o["op"] == "capture_hidden_states"] == [[41, 42, 43]]


def test_the_dense_forms_key_is_read_after_dspark_markov_rank(run_cli, tmp_path):
    """parse_dspark_draft_config falls back to markov_rank (unlike vLLM's class, which reads dspark_markov_rank
    alone): SGLang 0.5.23 builds the drafter (the oracle's deepseek-v4-dspark-dense-rank-key)."""
    rc, out = validate(run_cli, tmp_path, "0.5.23", dspark_markov_rank=None, markov_rank=256)
    assert found(out, "SRG776") == [] and rc == 0, out["diagnostics"]


@pytest.mark.parametrize("release", ["0.5.16", "0.5.23"])
def test_no_rank_at_all_is_the_v4_classs_refusal(run_cli, tmp_path, release):
    from surgery.engine.releases import release_data

    rc, out = validate(run_cli, tmp_path, release, dspark_markov_rank=None)
    got = found(out, "SRG776")
    assert len(got) == 1 and got[0]["severity"] == "error" and rc == 1, out["diagnostics"]
    msg = got[0]["message"]
    where = release_data("sglang")["releases"][release]["start"]["limits"]["dspark_v4_markov_rank"]
    assert where.startswith("sglang/srt/models/deepseek_v4_dspark.py:") and where.removeprefix("sglang/") in msg
    assert "DeepseekV4ForCausalLMDSpark" in msg and "none of them is set (0)" in msg
    assert '"DSpark V4 draft requires markov_rank > 0"' in msg
    assert "dspark_markov_rank" in got[0]["hint"]


@pytest.mark.parametrize("rank,said", [(0, "dspark_markov_rank: 0"), ("abc", "int() of it fails"),
                                       (-4, "must be >= 0")])
def test_a_rank_sglang_cannot_use_is_refused(run_cli, tmp_path, rank, said):
    _, out = validate(run_cli, tmp_path, "0.5.23", dspark_markov_rank=rank)
    got = found(out, "SRG776")
    assert len(got) == 1 and said in got[0]["message"], out["diagnostics"]


def test_a_string_rank_is_what_sglangs_int_takes(run_cli, tmp_path):
    _, out = validate(run_cli, tmp_path, "0.5.23", dspark_markov_rank="256")
    assert found(out, "SRG776") == []


@pytest.mark.parametrize("release", ["0.5.16", "0.5.23"])
def test_an_id_past_the_last_layer_is_still_refused_with_the_v4_range(run_cli, tmp_path, release):
    """dspark_target_layer_ids [41, 42, 43]: layer 43 does not exist (the plan's 44): the target's loop never
    reaches it; said with the range this class captures (1..L in the plan's numbering)."""
    _, out = validate(run_cli, tmp_path, release, dspark_target_layer_ids=[41, 42, 43])
    got = found(out, "SRG362")
    assert len(got) == 1, out["diagnostics"]
    assert "aux ids [44]" in got[0]["message"] and "captures ids 1..43" in got[0]["message"]
    assert "models/deepseek_v4.py" in got[0]["message"] and "set_dspark_layers_to_capture" in got[0]["message"]


def test_a_dense_dspark_draft_keeps_the_top_level_markov_rank_rule(run_cli):
    """Qwen3DSparkModel's build_markov_head reads config.markov_rank only: SpecForge's nested rank is SRG776."""
    rc, out, _ = run_cli("validate", "dspark", "--target", ROOT / "tests" / "data" / "configs" / "Qwen3-8B.json",
                         "--draft", ROOT / "tests" / "verdicts" / "configs" / "specforge-qwen3-8b-dspark.json",
                         "--engine", "sglang", "--engine-version", "0.5.23", "--json")
    got = [d for d in json.loads(out)["diagnostics"] if d["code"] == "SRG776"]
    assert got and "reads a top-level markov_rank" in got[0]["message"], got


# ------------------------------------------------------------------ each wheel reads it so

def _wheel(release: str) -> Path | None:
    """The release's wheel from .cache/wheels/sglang, or where `setup.sh --test` fetches SGLang's (.cache/sglang/,
    so CI reads the releases it pins), or the folders of SURGERY_SGLANG_WHEELS."""
    extra = [Path(p) for p in os.environ.get("SURGERY_SGLANG_WHEELS", "").split(":") if p]
    for folder in [WHEELS, ROOT / ".cache" / "sglang", *extra]:
        found_ = sorted(folder.glob(f"sglang-{release}-*.whl")) if folder.is_dir() else []
        if found_:
            return found_[0]
    return None


@pytest.mark.parametrize("release", ALL)
def test_the_wheels_read_it_so(release):
    from surgery.checks.sglang_start import rules

    wheel = _wheel(release)
    if wheel is None:
        pytest.skip(f"no SGLang {release} wheel under {WHEELS}")
    z = zipfile.ZipFile(wheel)
    read = lambda rel: z.read(f"sglang/srt/{rel}").decode()  # noqa: E731
    rule = rules()["dspark_v4_markov_rank"]
    # the rewrite: a DeepseekV4ForCausalLM draft with a bundle key, under DSPARK (or no algorithm)
    mc = read("configs/model_config.py")
    assert re.search(r'and self\.hf_config\.architectures\[0\] == "DeepseekV4ForCausalLM"\s*\):.*?'
                     r'checkpoint_bundles_dspark_draft\(self\.hf_config\) and \(\s*self\.speculative_algorithm in '
                     r'\(None, "DSPARK"\)\s*\):\s*self\.hf_config\.architectures\[0\] = "DeepseekV4ForCausalLMDSpark"',
                     mc, re.S), release
    cfg = read("speculative/dspark_components/dspark_config.py")
    bundles = re.search(r"def checkpoint_bundles_dspark_draft.*?for key in \((.*?)\)", cfg, re.S).group(1)
    assert re.findall(r'"(\w+)"', bundles) == rule["bundle_keys"]
    # the rank: dspark_markov_rank, else dspark_config's, else the text config's, else the config's markov_rank, else 0
    parse = cfg[cfg.index("def parse_dspark_draft_config"):]
    assert re.search(r'prefixed_markov_rank = _cfg_get\(draft_hf_config, "dspark_markov_rank", None\)', parse)
    assert re.search(r'raw_markov_rank = \(\s*prefixed_markov_rank\s*if prefixed_markov_rank is not None\s*else '
                     r'dspark_cfg\.get\(\s*"markov_rank",\s*_cfg_get\(\s*text_config, "markov_rank", '
                     r'_cfg_get\(draft_hf_config, "markov_rank", 0\)\s*\),?\s*\)\s*\)', parse), release
    assert rule["rank_keys"] == ["dspark_markov_rank", "dspark_config.markov_rank", "text_config.markov_rank",
                                 "markov_rank"]
    v4 = read("models/deepseek_v4_dspark.py")
    assert re.search(r"dspark_config = parse_dspark_draft_config\(draft_hf_config=config\)\s*"
                     r"if not dspark_config\.require_markov\(\):\s*raise ValueError\(\s*\"DSpark V4 draft requires "
                     r"markov_rank > 0, \"", v4), release
    assert "EntryClass = [DeepseekV4ForCausalLMDSpark]" in v4
    # the capture: the drafter's ids as-is, each layer's output taken after the layer runs
    aux = read("model_executor/model_runner_components/spec_aux_hidden_state.py")
    assert "target_layer_ids = list(dspark_draft_config.target_layer_ids)" in aux
    target = read("models/deepseek_v4.py")
    assert "self.model.dspark_layers_to_capture = list(layer_ids)" in target
    loops = [m.start() for m in re.finditer(r"for i in range\(self\.start_layer, self\.end_layer\):", target)]
    takes = [m.start() for m in re.finditer(r"if capture_dspark and i in self\.dspark_layers_to_capture:", target)]
    assert loops and takes and any(lo < t for lo in loops for t in takes)
    # the last capture site of the plain (deepseek_v4) forward follows its layer call in the same loop
    last = takes[-1]
    assert "= layer(" in target[max(lo for lo in loops if lo < last):last], release
