"""The SGLang bundle keeps every flashinfer header folder SGLang's JIT kernels compile against.

SGLang's `kernels/jit/utils/deps.py` (`get_flashinfer_include_paths`) raises when any of its
candidate folders under `flashinfer/data` is missing, and every engine then stops at its first
forward (the first H200 run, 2026-12-04, with `data/` stripped: docs/sglang.md). The candidates are
read from the pinned SGLang wheel (0.5.16 / 0.5.17 have the same list), the removals from
make_bundle.sh itself: a later strip of one of them fails here, not on the GPU."""
from __future__ import annotations

import ast
import re
import zipfile
from itertools import product
from pathlib import PurePosixPath

from sglang_source import wheel_path
from testpaths import ROOT

MAKE_BUNDLE = ROOT / "bench/gpu/sglang_bundle/make_bundle.sh"


def jit_header_folders() -> list[PurePosixPath]:
    """`candidates` of get_flashinfer_include_paths, as paths under the flashinfer package."""
    with zipfile.ZipFile(wheel_path()) as zf:
        tree = ast.parse(zf.read("sglang/kernels/jit/utils/deps.py").decode("utf-8"))
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "get_flashinfer_include_paths")
    assign = next(n for n in ast.walk(fn) if isinstance(n, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == "candidates" for t in n.targets))

    def parts(node) -> list[str]:  # flashinfer_data / "cutlass" / "include" -> ["data", "cutlass", "include"]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            return parts(node.left) + parts(node.right)
        if isinstance(node, ast.Name) and node.id == "flashinfer_data":
            return ["data"]
        assert isinstance(node, ast.Constant), ast.dump(node)
        return [node.value]

    return [PurePosixPath(*parts(e)) for e in assign.value.elts]


def removed_from_flashinfer() -> list[PurePosixPath]:
    """Every path make_bundle.sh removes under the flashinfer package (brace lists expanded)."""
    out = []
    for line in MAKE_BUNDLE.read_text().splitlines():
        m = re.match(r'\s*rm -rf\s+"\$WORK/fi_site/flashinfer/([^"]*)"(\S*)', line)
        if not m:
            continue
        text = m.group(1) + m.group(2)
        pieces = [p.split(",") if p.startswith("{") else [p] for p in re.split(r"(\{[^}]*\})", text) if p]
        pieces = [[s.strip("{}") for s in alts] for alts in pieces]
        out += [PurePosixPath("".join(combo).rstrip("/")) for combo in product(*pieces)]
    return out


def test_no_jit_header_folder_is_stripped():
    needed, removed = jit_header_folders(), removed_from_flashinfer()
    assert PurePosixPath("data/csrc") in needed and PurePosixPath("data/cutlass/include") in needed
    assert removed, "make_bundle.sh removes nothing under flashinfer: this test reads the wrong lines"
    clashes = [(n, r) for n in needed for r in removed if n == r or r in n.parents]
    assert not clashes, f"make_bundle.sh strips folders SGLang's JIT compiles need: {clashes}"


def test_the_removal_reader_sees_a_strip_of_the_sources(tmp_path, monkeypatch):
    """The check fails when the first run's strip comes back (the reader is not blind)."""
    import sys

    bundle = tmp_path / "make_bundle.sh"
    bundle.write_text('rm -rf "$WORK/fi_site/flashinfer/data/"{cutlass,cccl,spdlog,csrc,include}\n')
    monkeypatch.setattr(sys.modules[__name__], "MAKE_BUNDLE", bundle)
    removed = removed_from_flashinfer()
    assert PurePosixPath("data/csrc") in removed
    assert any(r in n.parents or r == n for n in jit_header_folders() for r in removed)
