"""Model folders written so that no reader ever sees a partial one.

A folder is written in a temporary sibling (``.<name>-xxxx``) and renamed into place; the
temporary names are what the tiny-pair cache cleans up after a writer that died mid-copy
(surgery/hf/pair.py). Used by the cache, `surgery pair export` (surgery/pairs.py) and the pair
builders in tools/.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path


def is_complete(folder: Path) -> bool:
    """A model folder with both of the files every loader needs."""
    return (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()


def replace_dir(src: Path, dest: Path) -> None:
    """Move ``src`` onto ``dest``; an existing (stale or partial) ``dest`` is moved aside first
    because ``os.replace`` cannot overwrite a non-empty directory."""
    src.chmod(0o755)  # mkdtemp creates 0700
    for f in src.iterdir():
        f.chmod(0o644)
    if dest.exists():
        stale = Path(tempfile.mkdtemp(prefix=f".{dest.name}-old-", dir=dest.parent))
        os.replace(dest, stale / dest.name)
        shutil.rmtree(stale, ignore_errors=True)
    os.replace(src, dest)


@contextlib.contextmanager
def staged_dir(dest: Path):
    """Yield an empty temporary folder next to ``dest``; when the block ends without an error it
    replaces ``dest`` (:func:`replace_dir`). The temporary folder is removed either way."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        yield tmp
        replace_dir(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
