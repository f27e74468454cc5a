"""SGLang's own functions, taken from the pinned wheel's source, for oracle tests without SGLang.

SGLang cannot be installed beside surgery's torch / transformers (it pins CUDA packages and
transformers 5.12), and its model modules import GPU kernels at import time. Its wiring rules are
small methods, though: this module reads the wheel that `scripts/setup.sh --test` downloads
(`.cache/sglang/`, never installed), cuts one function or statement out of a file with `ast`, and
executes that code, unchanged, on stand-in objects. A wheel that is missing fails the test that
needs it (never a skip): CI downloads it.
"""
from __future__ import annotations

import ast
import os
import textwrap
import zipfile
from functools import lru_cache
from pathlib import Path

import pytest

from testpaths import ROOT


def release() -> str:
    from surgery.engine.cards import card

    return card("sglang").release


def wheel_path(version: str | None = None) -> Path:
    """The pinned release's wheel (SURGERY_SGLANG_WHEEL overrides it; missing: the test fails), or with
    `version` another release's, from .cache/sglang/ or the folder SURGERY_SGLANG_WHEELS (missing: the
    test skips, saying how to fetch it)."""
    env = os.environ.get("SURGERY_SGLANG_WHEEL")
    if env and version is None:
        return Path(env)
    folders = [ROOT / ".cache" / "sglang"] + [Path(p) for p in os.environ.get("SURGERY_SGLANG_WHEELS", "").split(":") if p]
    want = version or release()
    found = sorted(w for f in folders for w in f.glob(f"sglang-{want}-*.whl"))
    if not found:
        if version is None or version == release():
            pytest.fail(f"the sglang {want} wheel is not in .cache/sglang/: run `bash scripts/setup.sh --test` "
                        f"(it downloads it with pip download --no-deps), or set SURGERY_SGLANG_WHEEL")
        pytest.skip(f"the sglang {want} wheel is not in .cache/sglang/ (`bash scripts/setup.sh --test` fetches the "
                    "releases it names) nor in SURGERY_SGLANG_WHEELS (folders, `:`-separated)")
    return found[0]


@lru_cache(maxsize=None)
def source(relpath: str, version: str | None = None) -> str:
    """The text of sglang/srt/<relpath> in the pinned wheel (or `version`'s)."""
    with zipfile.ZipFile(wheel_path(version)) as zf:
        return zf.read(f"sglang/srt/{relpath}").decode("utf-8")


@lru_cache(maxsize=None)
def _tree(relpath: str, version: str | None = None) -> ast.Module:
    return ast.parse(source(relpath, version))


def _node(relpath: str, qualname: str, version: str | None = None):
    tree = _tree(relpath, version)
    body, node = tree.body, None
    for part in qualname.split("."):
        node = next((n for n in body if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == part), None)
        if node is None:
            raise AssertionError(f"sglang {release()} {relpath} has no {qualname} (stopped at {part})")
        body = node.body
    return node


def function(relpath: str, qualname: str, namespace: dict | None = None, version: str | None = None):
    """`Class.method`, `function` or `Class` from the file, compiled from its own source text."""
    node = _node(relpath, qualname, version)
    text = textwrap.dedent(ast.get_source_segment(source(relpath, version), node))
    ns = dict(namespace or {})
    exec(compile(text, f"sglang/srt/{relpath}:{node.lineno}", "exec"), ns)  # noqa: S102 - SGLang's own code
    return ns[node.name]


def statements(relpath: str, qualname: str, first: str, last: str | None = None) -> str:
    """The statements of a function body from the one whose source starts with `first` to the one
    starting with `last` (inclusive; default: only the first), as dedented source."""
    node = _node(relpath, qualname)
    text = source(relpath)
    segs = [ast.get_source_segment(text, s) for s in node.body]
    start = next(i for i, s in enumerate(segs) if s.lstrip().startswith(first))
    end = start if last is None else next(i for i, s in enumerate(segs) if i >= start and s.lstrip().startswith(last))
    lines = text.splitlines()
    return textwrap.dedent("\n".join(lines[node.body[start].lineno - 1:node.body[end].end_lineno]))


def find_in_function(relpath: str, qualname: str, first: str, version: str | None = None) -> str:
    """The first statement at any depth of the function whose source starts with `first`."""
    node = _node(relpath, qualname, version)
    text = source(relpath, version)
    for sub in ast.walk(node):
        if isinstance(sub, ast.stmt) and sub is not node:
            seg = ast.get_source_segment(text, sub) or ""
            if seg.startswith(first):
                lines = text.splitlines()
                return textwrap.dedent("\n".join(lines[sub.lineno - 1:sub.end_lineno]))
    raise AssertionError(f"sglang {release()} {relpath} {qualname}: no statement starting {first!r}")
