"""The tiny Gemma 4 target/assistant pair used by the HF demo and the tests: its files and its cache.

A real miniature of google/gemma-4-E2B-it + its MTP assistant: same classes, same structural
features (mixed sliding/full attention, KV-shared tail, per-layer inputs, global_head_dim !=
head_dim, a fully KV-shared assistant reading the target's K/V), scaled down to ~1.5M parameters.
Its vocabulary is surgery/tinymodels/bytevocab.py; its loader surgery/hf/loader.py; its prompts and index
entry surgery/pairs.py (``GEMMA_PAIR``).

Nothing is ever downloaded. The pair lives in a cache folder (``~/.cache/spec-surgery/tiny-gemma4``,
override with ``SURGERY_CACHE``) as two ordinary HF folders, copied from the weights committed in
``surgery/data/tiny/weights/``. An install without those weights uses a cache that
``tools/build_tiny_pair.py`` built (it trains the target as a byte-level LM and distils the
assistant from it). The package never runs that script itself: the build recipe is not part of the
wheel, and library code that executes a repository file found by path is a code-execution path an
installed package should not have; a missing pair is SRG001, whose hint names the command.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from ..text.diagnostics import Location, fail
from ..folders import is_complete, staged_dir

DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "tiny"
TARGET_CONFIG_JSON = DATA_DIR / "target_config.json"
DRAFT_CONFIG_JSON = DATA_DIR / "draft_config.json"
WEIGHTS_DIR = DATA_DIR / "weights"

Progress = Callable[[str], None] | None


def cache_root() -> Path:
    """Folder holding ``target/`` and ``draft/`` (``$SURGERY_CACHE`` or ~/.cache/spec-surgery)."""
    base = os.environ.get("SURGERY_CACHE")
    root = Path(base) if base else Path.home() / ".cache" / "spec-surgery"
    return root / "tiny-gemma4"


def load_config_json(path: Path) -> dict:
    """A shipped config, without the human-only ``_comment`` key."""
    data = json.loads(Path(path).read_text())
    data.pop("_comment", None)
    return data


def make_configs():
    """(Gemma4TextConfig, Gemma4AssistantConfig) built from the shipped JSON files."""
    from transformers import Gemma4AssistantConfig, Gemma4TextConfig

    target_cfg = Gemma4TextConfig.from_dict(load_config_json(TARGET_CONFIG_JSON))
    draft_cfg = Gemma4AssistantConfig.from_dict(load_config_json(DRAFT_CONFIG_JSON))
    return target_cfg, draft_cfg


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _stale(target_dir: Path, draft_dir: Path) -> bool:
    """True when committed weights exist and differ from the cached copy (weights were rebuilt)."""
    for name, folder in (("target", target_dir), ("draft", draft_dir)):
        shipped = WEIGHTS_DIR / name / "model.safetensors"
        if shipped.is_file() and _digest(shipped) != _digest(folder / "model.safetensors"):
            return True
    return False


def _copy_committed(name: str, dest: Path) -> bool:
    """Copy ``surgery/data/tiny/weights/<name>`` into the cache, atomically. False if absent."""
    src = WEIGHTS_DIR / name
    if not is_complete(src):
        return False
    with staged_dir(dest) as tmp:
        for f in ("config.json", "model.safetensors"):
            shutil.copyfile(src / f, tmp / f)
    return True


def _ready(target_dir: Path, draft_dir: Path) -> bool:
    try:
        return is_complete(target_dir) and is_complete(draft_dir) and not _stale(target_dir, draft_dir)
    except OSError:  # a folder being swapped by another process right now: take the locked path
        return False


@contextlib.contextmanager
def _cache_lock(root: Path):
    """Serialise writers of one cache across processes (POSIX ``flock`` on ``<root>/.lock``).

    Without it two processes materialising the pair at once raced: each moved the other's freshly
    installed folder aside (a reader in between found no ``config.json``) and ``os.replace`` onto a
    folder that had just reappeared failed with ENOTEMPTY. Where no lock can be taken (no ``fcntl``,
    read-only cache) we go on unlocked, as before."""
    try:
        import fcntl
    except ImportError:
        fcntl = None
    fh = None
    if fcntl is not None:
        try:
            root.mkdir(parents=True, exist_ok=True)
            fh = open(root / ".lock", "a+b")  # noqa: SIM115 - held for the block
        except OSError:
            fh = None
    try:
        if fh is not None:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        yield
    finally:
        if fh is not None:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
            fh.close()


def _remove_leftovers(root: Path) -> None:
    """Temp folders of writers that died mid-copy (``.target-xxxx``, ``.draft-old-xxxx``); called
    under the lock, when no other writer can own them."""
    for entry in root.iterdir() if root.is_dir() else ():
        if entry.is_dir() and entry.name.startswith((".target-", ".draft-")):
            shutil.rmtree(entry, ignore_errors=True)


def ensure_tiny_pair(progress: Progress = None) -> tuple[Path, Path]:
    """Return (target_dir, draft_dir), materialising them in the cache if needed.

    Order: cache hit → copy committed weights → SRG001 (never downloads, never trains: building the
    pair is ``python tools/build_tiny_pair.py``, about 25 minutes, which writes this very cache).
    Safe when several processes call it at once: writers take a file lock and re-check, every
    folder is written in a temporary folder and renamed into place, so no reader sees a partial one.
    """
    say = progress or (lambda _msg: None)
    root = cache_root()
    target_dir, draft_dir = root / "target", root / "draft"
    if _ready(target_dir, draft_dir):
        return target_dir, draft_dir
    with _cache_lock(root):
        if _ready(target_dir, draft_dir):  # another process finished it while we waited
            return target_dir, draft_dir
        _remove_leftovers(root)
        if _copy_committed("target", target_dir) and _copy_committed("draft", draft_dir):
            say(f"tiny pair copied from committed weights into {root}")
            return target_dir, draft_dir
    raise fail("SRG001", f"the tiny Gemma 4 pair is neither in {root} nor in {WEIGHTS_DIR} (committed weights)",
               Location(str(WEIGHTS_DIR)),
               hint="build it into the cache with `python tools/build_tiny_pair.py` (from a checkout, about 25 "
                    "minutes on one CPU thread), or reinstall spec-surgery: the tiny weights travel inside the wheel")
