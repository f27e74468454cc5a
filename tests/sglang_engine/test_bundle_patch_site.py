"""bench/gpu/sglang_bundle/patch_site.sh: the bundle carries no `cutlass` (nvidia-cutlass-dsl), and
SGLang 0.5.23's `DualGemm._select_mode` (run by every Llama / Qwen2 MLP on CUDA) imports the CuTe-DSL
dual GEMM, whose module level is `import cutlass`: the H100 run of 2026-12-06 died there. The patched
method returns None (the unfused MLP) without that import; a source the edit no longer fits stops the
build. The stand-in below is 0.5.23's own text of the method's head (sglang/srt/layers/dual_gemm.py
lines 1-44) with the rest of the body cut."""
import importlib.util
import subprocess
import sys
import types
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[2] / "bench/gpu/sglang_bundle/patch_site.sh"

HEAD_0523 = '''"""Reusable model-layer integration for the small-batch dual GEMM kernel."""

from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.runtime_context import get_forward, get_parallel
from sglang.srt.utils import is_cuda

if TYPE_CHECKING:
    from sglang.kernels.ops.gemm.cutedsl_dual_gemm import DualGemmQuantMode


class DualGemm:
    """Dispatch fused gate/up projection and activation for compatible layers."""

    def __init__(self, gate_up_proj, down_proj, hidden_size: int) -> None:
        self.down_proj = down_proj
        self.tp_size = get_parallel().tp_size
        self.max_tokens = 0
        self.mode = self._select_mode(gate_up_proj, hidden_size)

    def _select_mode(
        self,
        gate_up_proj: "MergedColumnParallelLinear",
        hidden_size: int,
    ) -> Optional["DualGemmQuantMode"]:
        if not is_cuda():
            return None

        from sglang.kernels.ops.gemm.cutedsl_dual_gemm import (
            MAX_DUAL_GEMM_DECODE_TOKENS,
            DualGemmQuantMode,
            can_use_dual_gemm,
        )
        return DualGemmQuantMode.UNQUANT
'''


def _site(tmp_path, text):
    f = tmp_path / "site/sglang/srt/layers/dual_gemm.py"
    f.parent.mkdir(parents=True)
    f.write_text(text)
    return f


def _patch(tmp_path):
    return subprocess.run(["bash", str(TOOL), str(tmp_path / "site")], capture_output=True, text=True)


def _dual_gemm(monkeypatch, path):
    """DualGemm from the file, on CUDA as far as it can tell, with no sglang.kernels and no cutlass."""
    for name, attrs in {"sglang": {}, "sglang.srt": {},
                        "sglang.srt.runtime_context": {"get_forward": None, "get_parallel": None},
                        "sglang.srt.utils": {"is_cuda": lambda: True}}.items():
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, name, mod)
    ns: dict = {"__name__": "dual_gemm_under_test"}
    exec(compile(path.read_text(), str(path), "exec"), ns)  # noqa: S102 - the patched file itself
    return ns["DualGemm"]


def test_select_mode_without_cutlass(tmp_path, monkeypatch):
    assert importlib.util.find_spec("cutlass") is None, "this test needs an environment without cutlass"
    f = _site(tmp_path, HEAD_0523)
    # unpatched: the import that killed the H100 engine
    with pytest.raises(ImportError):
        _dual_gemm(monkeypatch, f)._select_mode(object(), None, 4096)
    r = _patch(tmp_path)
    assert r.returncode == 0, r.stderr
    assert _dual_gemm(monkeypatch, f)._select_mode(object(), None, 4096) is None
    # the edit is the one line; a second run (REUSE_ARCH rebuild) leaves it as it is
    before = f.read_text()
    assert sum(a != b for a, b in zip(before.splitlines(), HEAD_0523.splitlines())) == 1
    assert _patch(tmp_path).returncode == 0 and f.read_text() == before


def test_stops_when_the_source_moved(tmp_path):
    _site(tmp_path, HEAD_0523.replace("        if not is_cuda():\n", "        if not _is_cuda:\n"))
    r = _patch(tmp_path)
    assert r.returncode == 1 and "did not apply" in r.stderr


def test_other_releases_untouched(tmp_path):
    f = _site(tmp_path, '"""0.5.21 has no dual GEMM."""\n')
    assert _patch(tmp_path).returncode == 0 and f.read_text() == '"""0.5.21 has no dual GEMM."""\n'
