"""The tiny Gemma 4 target/assistant pair used by the HF demo and the tests.

A real miniature of google/gemma-4-E2B-it + its MTP assistant: same classes, same structural
features (mixed sliding/full attention, KV-shared tail, per-layer inputs, global_head_dim !=
head_dim, a fully KV-shared assistant reading the target's K/V), scaled down to ~1.5M parameters.

Nothing is ever downloaded. The pair lives in a cache folder (``~/.cache/spec-surgery/tiny-gemma4``,
override with ``SURGERY_CACHE``) as two ordinary HF folders. When missing they are copied from the
weights committed in ``surgery/data/tiny/weights/`` or, failing that, rebuilt by
``tools/build_tiny_pair.py`` (train the target as a byte-level LM, distil the assistant from it).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "tiny"
TARGET_CONFIG_JSON = DATA_DIR / "target_config.json"
DRAFT_CONFIG_JSON = DATA_DIR / "draft_config.json"
WEIGHTS_DIR = DATA_DIR / "weights"

# Byte-level vocabulary: Gemma's special ids (pad 0, eos 1, bos 2) are kept so the configs read
# like the real ones; byte b is token b + BYTE_OFFSET. Ids 3 and 260..263 are unused padding.
PAD_ID, EOS_ID, BOS_ID = 0, 1, 2
BYTE_OFFSET = 4
VOCAB_SIZE = 264

# Generic openings of Python code: prompts for pairs the user brings. The built-in pair was trained
# on text that contains 11 of them verbatim (hundreds of times), so its acceptance is measured on
# held_out_prompts() instead.
DEFAULT_PROMPTS: tuple[str, ...] = (
    "def __init__(self, ",
    "import os\nimport sys\n\n",
    "    def __repr__(self):\n        return ",
    "class ",
    "    if not isinstance(",
    "        raise ValueError(",
    "for i in range(",
    "    return self.",
    "        try:\n            ",
    "from collections import ",
    "# Copyright ",
    "def get(self, key, default=None):\n    ",
)

Progress = Callable[[str], None] | None
PAIR_RECIPE = "gemma4-mtp"  # the pair's entry in surgery/data/pairs/index.yaml


def held_out_prompts() -> tuple[str, ...]:
    """The built-in pair's measurement prompts: line starts of the stdlib files its builder kept
    out of training (``tools/build_tiny_pair.py`` records them in surgery/data/pairs/index.yaml),
    so an acceptance measured on them is not the pair reciting its training text. Empty when the
    index lists none (callers fall back to ``DEFAULT_PROMPTS`` and say so)."""
    from ..pairs import builtin_pair

    entry = builtin_pair(PAIR_RECIPE)
    return entry.prompts if entry is not None else ()


def encode(text: str, bos: bool = True) -> list[int]:
    """Byte-level encoding; prepends BOS by default (the pair was trained with it)."""
    ids = [b + BYTE_OFFSET for b in text.encode("utf-8")]
    return [BOS_ID, *ids] if bos else ids


def decode(ids) -> str:
    """Inverse of :func:`encode`; special and unused ids are dropped."""
    data = bytes(int(i) - BYTE_OFFSET for i in ids if BYTE_OFFSET <= int(i) < BYTE_OFFSET + 256)
    return data.decode("utf-8", errors="replace")


def cache_root() -> Path:
    """Folder holding ``target/`` and ``draft/`` (``$SURGERY_CACHE`` or ~/.cache/spec-surgery)."""
    base = os.environ.get("SURGERY_CACHE")
    root = Path(base) if base else Path.home() / ".cache" / "spec-surgery"
    return root / "tiny-gemma4"


def _is_complete(folder: Path) -> bool:
    return (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()


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


def write_hf_folder(model, dest: Path, extra_config: dict | None = None) -> None:
    """Save ``model`` as an HF folder at ``dest`` atomically (temp dir in the same parent, then
    ``os.replace``), so a crash never leaves a half-written folder that looks complete.

    ``extra_config`` keys are merged into config.json: transformers 5.19 serialises the full-layer
    head size only as ``per_layer_config``; we also keep ``global_head_dim`` (what the public
    configs and older transformers use) so both readers understand the folder.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        if extra_config:
            _merge_config(tmp / "config.json", extra_config)
        _replace_dir(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _merge_config(path: Path, extra: dict) -> None:
    cfg = json.loads(path.read_text())
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(cfg.get(key), dict):
            cfg[key].update(value)
        else:
            cfg[key] = value
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def _replace_dir(src: Path, dest: Path) -> None:
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


def _digest(path: Path) -> str:
    import hashlib

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
    if not _is_complete(src):
        return False
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        for f in ("config.json", "model.safetensors"):
            shutil.copyfile(src / f, tmp / f)
        _replace_dir(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return True


def _ready(target_dir: Path, draft_dir: Path) -> bool:
    try:
        return _is_complete(target_dir) and _is_complete(draft_dir) and not _stale(target_dir, draft_dir)
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

    Order: cache hit → copy committed weights → rebuild (~25 min on one CPU thread). Never downloads.
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
        say(f"building the tiny pair into {root} (trains for about 25 minutes)")
        return _load_builder().build(root, progress=say if progress else None)


def _load_builder():
    """``tools/build_tiny_pair.py`` of this checkout (the build recipe is not part of the wheel)."""
    import importlib.util

    script = DATA_DIR.parents[2] / "tools" / "build_tiny_pair.py"
    if not script.is_file():
        raise FileNotFoundError(
            f"tiny pair missing from {cache_root()} and from {WEIGHTS_DIR}, and no build script at {script}"
        )
    spec = importlib.util.spec_from_file_location("surgery_build_tiny_pair", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_pair(target_dir, draft_dir, device="cpu", dtype=None):
    """Load (target, draft) from HF folders: safetensors only, no remote code, eval mode."""
    import torch
    from transformers import Gemma4AssistantForCausalLM, Gemma4ForCausalLM

    dtype = dtype or torch.float32
    kwargs = dict(use_safetensors=True, trust_remote_code=False, dtype=dtype, output_loading_info=True)
    models = []
    for cls, folder in ((Gemma4ForCausalLM, target_dir), (Gemma4AssistantForCausalLM, draft_dir)):
        model, info = cls.from_pretrained(str(folder), **kwargs)
        # what the checkpoint did not bring (read by `keep ... must_exist` and `if_draft_has_own`)
        model._surgery_missing_keys = frozenset(info.get("missing_keys", ()))
        models.append(model.to(device).eval())
    return models[0], models[1]
