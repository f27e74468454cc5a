"""DeepSeek-V4's own DSpark drafter judged by the keys the release reads (the fourth catalogue's outside
check, bench/catalogue4_outside.py: every DeepSeek-V4 DSpark case of vllm#41834 / vllm#48381 /
SpecForge#800 had SRG204 and SRG674 errors besides its own finding).

With method dspark every wheel 0.25.0-0.34.0 rewrites a draft of a class its SpeculativeConfig does not keep
to model_type deepseek_v4 and `DSparkDraftModel` (0.30+: a deepseek_v41 target's to `DSparkV41DraftModel`),
registered as DSparkDeepseekV4ForCausalLM (vllm.models.deepseek_v4 / deepseek_v41), whose model reads
`config.dspark_target_layer_ids` and `config.dspark_markov_rank` with no default and never Qwen3DSparkModel's
`markov_rank`. So the published config (tests/data/catalogue4/DeepSeek-V4-Flash-DSpark.config.json,
reconstructed: its _source says how) is served, and the recipe must not refuse it; a config that lacks one of
those keys is refused at model build, and surgery says so (surgery/checks/dspark_layout.py `V4_DRAFTER`, each
row derived again here from its wheel where .cache/wheels/vllm has it).
"""
from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest

from testpaths import ROOT, VLLM_WHEELS_WHERE, vllm_wheels

DSPARK_V4 = ROOT / "tests" / "data" / "catalogue4" / "DeepSeek-V4-Flash-DSpark.config.json"
NVFP4 = ROOT / "tests" / "data" / "catalogue3" / "deepseek-v4-flash-nvfp4.config.json"  # bench/catalogue4_outside.py's
DSPARK_FIELDS = {"dspark_block_size": 5, "dspark_noise_token_id": 128799, "dspark_target_layer_ids": [40, 41, 42],
                 "dspark_markov_rank": 256}  # as DeepSeek-V4-Flash-DSpark publishes them
ALL = ["0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0",
       "0.34.0"]


def load(path: Path, **changes) -> dict:
    cfg = {k: v for k, v in json.loads(path.read_text()).items() if not k.startswith("_")}
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    return cfg


def write(tmp_path: Path, cfg: dict, name: str = "config.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(cfg))
    return p


def validate(run_cli, path: Path, release: str, *args) -> tuple[int, dict]:
    """The drafter ships in the target checkpoint: one config is both --target and --draft."""
    rc, out, err = run_cli("validate", "dspark", "--target", path, "--draft", path, "--method", "dspark",
                           "--engine-version", release, "--json", *args)
    assert out.strip(), err
    return rc, json.loads(out)


def codes(out: dict, severity: str = "error") -> list[str]:
    return [d["code"] for d in out["diagnostics"] if d["severity"] == severity]


# ------------------------------------------------------------------ the published layout is served

@pytest.mark.parametrize("release", ALL)
def test_the_published_v4_dspark_config_is_not_refused(run_cli, tmp_path, release):
    """The branch point gave SRG204 (DeepseekV4ForCausalLM not a draft architecture) and SRG674 (no
    `markov_rank`) on every release; vLLM builds DSparkDraftModel from it and reads dspark_markov_rank."""
    rc, out = validate(run_cli, write(tmp_path, load(DSPARK_V4)), release)
    assert codes(out) == [] and rc == 0, out["diagnostics"]
    assert not [d for d in out["diagnostics"] if d["code"] in ("SRG204", "SRG674", "SRG672")]
    capture = [o["layers"] for o in out["operations"] if o["op"] == "capture_hidden_states"]
    assert capture == [[41, 42, 43]]  # eagle3_utils.py: "v4's ids are in capture-after semantics and keep the +1"


@pytest.mark.parametrize("release", ["0.26.0", "0.34.0"])
def test_the_outside_checks_nvfp4_config_with_the_dspark_fields_is_not_refused(run_cli, tmp_path, release):
    """bench/catalogue4_outside.py's SpecForge#800 cases: NVIDIA's NVFP4 DeepSeek-V4 config with the fields."""
    _, out = validate(run_cli, write(tmp_path, load(NVFP4, **DSPARK_FIELDS)), release)
    assert not {"SRG204", "SRG674", "SRG672"} & set(codes(out)), out["diagnostics"]


def test_deepseek_v41_ids_are_captured_as_is(run_cli, tmp_path):
    """0.30+ give a deepseek_v41 target's drafter DSparkV41DraftModel and capture its ids as-is
    (eagle3_utils.py: "v4.1 reads the attention *inputs* of its target layers")."""
    rc, out = validate(run_cli, write(tmp_path, load(DSPARK_V4, model_type="deepseek_v41")), "0.34.0")
    assert codes(out) == [] and rc == 0, out["diagnostics"]
    assert [o["layers"] for o in out["operations"] if o["op"] == "capture_hidden_states"] == [[40, 41, 42]]


# ------------------------------------------------------------------ a key the class reads is missing

@pytest.mark.parametrize("release", ["0.25.0", "0.29.0", "0.30.0", "0.34.0"])
def test_without_dspark_markov_rank_the_release_refuses(run_cli, tmp_path, release):
    from surgery.checks.dspark_layout import V4_DRAFTER

    _, out = validate(run_cli, write(tmp_path, load(DSPARK_V4, dspark_markov_rank=None)), release)
    found = [d for d in out["diagnostics"] if d["code"] == "SRG674"]
    assert len(found) == 1 and found[0]["severity"] == "error", out["diagnostics"]
    name, where, line, _ = V4_DRAFTER[release]["deepseek_v4"]
    msg = found[0]["message"]
    assert f"vLLM {release}" in msg and name in msg and f"{where}:{line}" in msg and "config has none" in msg
    assert found[0]["location"].endswith("dspark_markov_rank") and "dspark_markov_rank" in found[0]["hint"]
    assert "SRG204" not in codes(out)


def test_qwen3s_markov_rank_is_not_the_key_deepseek_v4_reads(run_cli, tmp_path):
    """The branch point took `markov_rank` (Qwen3DSparkModel's key) as the rank: SRG674 held."""
    cfg = load(DSPARK_V4, dspark_markov_rank=None, markov_rank=256)
    _, out = validate(run_cli, write(tmp_path, cfg), "0.34.0")
    found = [d for d in out["diagnostics"] if d["code"] == "SRG674"]
    assert len(found) == 1 and found[0]["severity"] == "error", out["diagnostics"]
    assert "markov_rank: 256 is Qwen3DSparkModel's key" in found[0]["message"]


@pytest.mark.parametrize("rank", [0, -1, "256", True])
def test_a_rank_that_cannot_size_the_markov_head_is_refused(run_cli, tmp_path, rank):
    """Refused at the branch point too, but by the Qwen3 rule (no `markov_rank`): now by the key vLLM reads."""
    _, out = validate(run_cli, write(tmp_path, load(DSPARK_V4, dspark_markov_rank=rank)), "0.34.0")
    found = [d for d in out["diagnostics"] if d["code"] == "SRG674" and d["severity"] == "error"]
    assert len(found) == 1 and f"has dspark_markov_rank: {json.dumps(rank)}" in found[0]["message"], found


def test_target_layer_ids_without_the_dspark_spelling_are_refused(run_cli, tmp_path):
    """`target_layer_ids` (the dense form's key) satisfies the recipe's SRG672, but DeepSeek-V4's class reads
    dspark_target_layer_ids alone: the branch point said nothing of it (only SRG204)."""
    from surgery.checks.dspark_layout import V4_DRAFTER

    cfg = load(DSPARK_V4, dspark_target_layer_ids=None, target_layer_ids=[40, 41, 42])
    _, out = validate(run_cli, write(tmp_path, cfg), "0.26.0")
    found = [d for d in out["diagnostics"] if d["code"] == "SRG672"]
    assert len(found) == 1 and found[0]["severity"] == "error", out["diagnostics"]
    _, where, _, line = V4_DRAFTER["0.26.0"]["deepseek_v4"]
    assert f"{where}:{line}" in found[0]["message"] and "only as target_layer_ids" in found[0]["message"]
    # with no ids at all the recipe's own SRG672 says so, once
    _, out = validate(run_cli, write(tmp_path, load(DSPARK_V4, dspark_target_layer_ids=None), "none.json"), "0.26.0")
    assert codes(out).count("SRG672") == 1


def test_a_dense_qwen3_draft_keeps_the_recipes_markov_rank_rule(run_cli, tmp_path):
    """The Qwen3 form is unchanged: a DFlash checkpoint served as DSpark (no markov_rank) is SRG674 from the
    recipe, whatever the release."""
    draft = load(ROOT / "tests" / "verdicts" / "configs" / "specforge-qwen3-8b-dspark.json")
    draft.get("dflash_config", {}).pop("markov_rank", None)
    draft.pop("markov_rank", None)
    d = write(tmp_path, draft, "draft.json")
    rc, out, err = run_cli("validate", "dspark", "--target", ROOT / "tests" / "data" / "configs" / "Qwen3-8B.json",
                           "--draft", d, "--engine-version", "0.34.0", "--json")
    found = [x for x in json.loads(out)["diagnostics"] if x["code"] == "SRG674"]
    assert len(found) == 1 and "requirement `draft.markov_rank != null`" in found[0]["message"], found


def test_the_v4_types_are_release_rules(run_cli):
    from surgery.checks.dspark_layout import V4_TYPES
    from surgery.checks.release_rules import DSPARK_V4_TYPES
    from surgery.engine.releases import known

    assert V4_TYPES == DSPARK_V4_TYPES
    from surgery.checks.dspark_layout import V4_DRAFTER
    assert sorted(V4_DRAFTER, key=lambda v: tuple(map(int, v.split(".")))) == known("vllm")


# ------------------------------------------------------------------ each row is its wheel

def _wheel(release: str) -> Path | None:
    found = vllm_wheels(release)
    return found[0] if found else None


def derive(release: str) -> dict[str, tuple[str, str, int, int]]:
    """V4_DRAFTER's row from the wheel: the registry name SpeculativeConfig gives each model type, its module,
    and the lines of the nvidia class that read the two keys (amd / xpu: the same keys, checked)."""
    z = zipfile.ZipFile(_wheel(release))
    names = set(z.namelist())
    registry = z.read("vllm/model_executor/models/registry.py").decode()
    spec = "\n".join(z.read(n).decode() for n in ("vllm/config/speculative.py",
                                                  "vllm/v1/worker/gpu/spec_decode/dspark/config.py") if n in names)
    row = {}
    for model_type, arch in (("deepseek_v4", "DSparkDraftModel"), ("deepseek_v41", "DSparkV41DraftModel")):
        if model_type == "deepseek_v41" and '"DSparkV41DraftModel" if is_v41 else "DSparkDraftModel"' not in spec:
            continue  # this release rewrites every such draft to deepseek_v4
        m = re.search(rf'"{arch}":\s*\(\s*"([^"]+)",\s*"DSparkDeepseekV4ForCausalLM"', registry)
        assert m, (release, arch)
        package = m.group(1).replace(".", "/")
        where = f"{package}/nvidia/dspark.py"
        lines = z.read(where).decode().splitlines()
        rank = next(i for i, t in enumerate(lines, 1) if "config.dspark_markov_rank" in t)
        ids = next(i for i, t in enumerate(lines, 1) if "config.dspark_target_layer_ids" in t)
        for platform in ("nvidia", "amd", "xpu"):
            other = f"{package}/{platform}/dspark.py"
            if other in names:
                text = z.read(other).decode()
                assert "config.dspark_markov_rank" in text and "config.dspark_target_layer_ids" in text, other
                assert not re.search(r"config\.markov_rank\b|\"markov_rank\"", text), other  # never Qwen3's key
        row[model_type] = (arch, where, rank, ids)
    # the rewrite itself: model_type deepseek_v4 (0.30+: deepseek_v41 for a V4.1 target) and DSparkDraftModel
    assert re.search(r'model_type = \(?\s*(?:"deepseek_v41" if is_v41 else )?"deepseek_v4"', spec), release
    assert re.search(r'architectures = \[\s*(?:"DSparkV41DraftModel" if is_v41 else )?"DSparkDraftModel"', spec), release
    return row


@pytest.mark.parametrize("release", ALL)
def test_the_rows_are_the_wheels(release):
    from surgery.checks.dspark_layout import V4_DRAFTER

    if _wheel(release) is None:
        pytest.skip(f"no vLLM {release} wheel in {VLLM_WHEELS_WHERE}")
    assert derive(release) == V4_DRAFTER[release]
