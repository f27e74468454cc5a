"""SRG675 for DeepSeek-V4's own DSpark drafter on a platform its release has no class for (`--device rocm` / `xpu`).

vLLM 0.25.0 / 0.25.1's models/deepseek_v4/__init__.py sets `DSparkDeepseekV4ForCausalLM = None` on ROCm and XPU
("DSpark is NVIDIA-only for now"; surgery/data/catalogue4.yaml `dspark_v4_own_vocab` rows `loads: absent`), yet its
SpeculativeConfig rewrites a method-dspark DeepSeek-V4 draft to DSparkDraftModel and inspects it: the registry's
inspection reads the None class's __name__ in its subprocess, finds nothing, and raises ValueError "Model
architectures ['DSparkDraftModel'] failed to be inspected. ...". The branch point (31a0274) never gave the release
rules the device (`layout_finding` took none), so such a draft validated clean (exit 0). 0.26.0+ have amd/ and xpu/
classes. `test_the_rows_are_the_wheels` derives dspark_layout.py `V4_NO_CLASS` again from each wheel.
"""
from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest

from testpaths import ROOT, VLLM_WHEELS_WHERE, vllm_wheels

DSPARK_V4 = ROOT / "tests" / "data" / "catalogue4" / "DeepSeek-V4-Flash-DSpark.config.json"
REFUSAL = "Model architectures ['DSparkDraftModel'] failed to be inspected. Please check the logs for more details."
ALL = ["0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0",
       "0.34.0"]


def validate(run_cli, tmp_path, release: str, *args, **changes) -> tuple[int, dict]:
    cfg = {k: v for k, v in json.loads(DSPARK_V4.read_text()).items() if not k.startswith("_")}
    cfg.update(changes)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    rc, out, err = run_cli("validate", "dspark", "--target", path, "--draft", path, "--method", "dspark",
                           "--engine-version", release, "--json", *args)
    assert out.strip(), err
    return rc, json.loads(out)


def srg675(out: dict) -> list[dict]:
    return [d for d in out["diagnostics"] if d["code"] == "SRG675"]


@pytest.mark.parametrize("release", ["0.25.0", "0.25.1"])
@pytest.mark.parametrize("device,name,line", [("rocm", "ROCm", 22), ("hip", "ROCm", 22), ("xpu", "XPU", 27)])
def test_no_class_on_that_platform_is_the_releases_refusal(run_cli, tmp_path, release, device, name, line):
    """The branch point: exit 0, no finding."""
    rc, out = validate(run_cli, tmp_path, release, "--device", device)
    found = srg675(out)
    assert len(found) == 1 and found[0]["severity"] == "error" and rc == 1, out["diagnostics"]
    msg = found[0]["message"]
    assert f"vLLM {release} has no DeepSeek-V4 DSpark class on {name}" in msg
    assert f"vllm/models/deepseek_v4/__init__.py:{line} sets DSparkDeepseekV4ForCausalLM = None" in msg
    assert f'ValueError "{REFUSAL}"' in msg and "registry.py:1061-1064" in msg
    assert found[0]["location"].endswith("--device")


def test_the_v41_type_is_rewritten_to_deepseek_v4_there_too(run_cli, tmp_path):
    """0.25-0.29 rewrite every such draft to deepseek_v4: the same package, the same refusal."""
    _, out = validate(run_cli, tmp_path, "0.25.0", "--device", "xpu", model_type="deepseek_v41")
    assert len(srg675(out)) == 1, out["diagnostics"]


@pytest.mark.parametrize("release,device", [("0.26.0", "rocm"), ("0.26.0", "xpu"), ("0.34.0", "rocm"),
                                            ("0.34.0", "xpu"), ("0.25.0", "cuda"), ("0.25.1", None)])
def test_a_release_with_the_class_or_another_device_is_not_refused(run_cli, tmp_path, release, device):
    rc, out = validate(run_cli, tmp_path, release, *(["--device", device] if device else []))
    assert srg675(out) == [] and rc == 0, out["diagnostics"]


def test_the_platform_refusal_comes_before_the_model_build(run_cli, tmp_path):
    """SpeculativeConfig refuses before any class is built: a missing dspark_markov_rank (SRG674, at model build)
    is not what this release meets first."""
    _, out = validate(run_cli, tmp_path, "0.25.0", "--device", "rocm", dspark_markov_rank=None)
    assert [d["code"] for d in out["diagnostics"] if d["code"] in ("SRG674", "SRG675")] == ["SRG675"]


def test_the_no_class_rows_are_catalogue4s_absent_rows():
    from surgery.checks.catalogue4 import data
    from surgery.checks.dspark_layout import V4_NO_CLASS

    rows = data()["dspark_v4_own_vocab"]["releases"]
    absent = {v for v, r in rows.items() for p, f in (r.get("deepseek_v4") or {}).items() if f["loads"] == "absent"}
    assert absent == set(V4_NO_CLASS)
    assert all({p for p, f in rows[v]["deepseek_v4"].items() if f["loads"] == "absent"} == {"rocm", "xpu"}
               for v in absent)


# ------------------------------------------------------------------ each row is its wheel

def _wheel(release: str) -> Path | None:
    found = vllm_wheels(release)
    return found[0] if found else None


def _line(text: str, needle: str) -> int:
    return next(i for i, t in enumerate(text.splitlines(), 1) if needle in t)


@pytest.mark.parametrize("release", ALL)
def test_the_rows_are_the_wheels(release):
    from surgery.checks.dspark_layout import V4_NO_CLASS

    wheel = _wheel(release)
    if wheel is None:
        pytest.skip(f"no vLLM {release} wheel in {VLLM_WHEELS_WHERE}")
    z = zipfile.ZipFile(wheel)
    init = z.read("vllm/models/deepseek_v4/__init__.py").decode()
    none = re.findall(r"DSparkDeepseekV4ForCausalLM = None", init)
    if release not in V4_NO_CLASS:
        assert not none, release
        return
    assert len(none) == 2 and "DSpark is NVIDIA-only for now" in init, release  # the rocm and the xpu branch
    row = V4_NO_CLASS[release]
    spec = z.read("vllm/config/speculative.py").decode()
    registry = z.read("vllm/model_executor/models/registry.py").decode()
    assert '"DSparkDraftModel": ("vllm.models.deepseek_v4", "DSparkDeepseekV4ForCausalLM")' in registry
    lines = spec.splitlines()
    start = _line(spec, 'if self.method == "dspark" and (')
    end = next(i for i in range(start, start + 12) if lines[i - 1].strip() == "self.update_arch_()")
    assert '"DSparkDraftModel"' in "\n".join(lines[start - 1:end]), release
    assert row["rewrite"] == f"vllm/config/speculative.py:{start}-{end}"
    assert row["inspect"] == f"vllm/config/speculative.py:{_line(spec, 'registry.inspect_model_cls(')}"
    assert row["name"] == f"vllm/model_executor/models/registry.py:{_line(registry, 'architecture=model.__name__')}"
    assert row["load"] == f"vllm/model_executor/models/registry.py:{_line(registry, 'return getattr(mod, self.class_name)')}"
    raised = _line(registry, 'f"Model architectures {architectures} failed "')
    assert row["raise"] == f"vllm/model_executor/models/registry.py:{raised - 1}-{raised + 2}"
    assert registry.splitlines()[raised].strip() == '"to be inspected. Please check the logs for more details."'
