"""Built-in tiny pairs, by recipe name, and `surgery pair export NAME DIR`.

The registry is data (surgery/data/pairs.yaml), so a family's tiny pair registers without code.
`export` writes DIR/target and DIR/draft as ordinary model folders (config.json, model.safetensors,
tokenizer files): what `vllm ... --model DIR/target --speculative-config '{"model": "DIR/draft", ...}'`
and `transformers.AutoModelForCausalLM.from_pretrained` read. Each folder is written in a temporary
folder next to it and renamed into place, so an interrupted export never leaves a folder that looks
complete.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from .diagnostics import Location, SurgeryError, diag

DATA_DIR = Path(__file__).resolve().parent / "data"
REGISTRY = DATA_DIR / "pairs.yaml"
SIDES = ("target", "draft")


def _rebuild_tiny_gemma4():
    from .hf.pair import ensure_tiny_pair

    return ensure_tiny_pair()


# builders a registry entry may name under `rebuild` (for pairs whose weights are not committed)
_REBUILDERS = {"tiny-gemma4": _rebuild_tiny_gemma4}


def builtin_pairs() -> dict[str, dict]:
    import yaml

    with open(REGISTRY, encoding="utf-8") as fh:
        return yaml.safe_load(fh) or {}


def _complete(folder: Path) -> bool:
    return (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()


def _unknown(name: str) -> SurgeryError:
    from .resources import shipped_recipes

    pairs = sorted(builtin_pairs())
    others = sorted(p.stem for p in shipped_recipes() if p.stem not in pairs)
    msg = f"no built-in pair for {name!r}; built-in pairs: {', '.join(pairs) or 'none'}"
    if others:
        msg += f" (shipped recipes without one yet: {', '.join(others)})"
    return SurgeryError(diag("SRG034", msg, Location(name)))


def source_folders(name: str) -> tuple[Path, Path, dict]:
    """(target_dir, draft_dir, entry) of a built-in pair; rebuilt into the cache if not committed."""
    entry = builtin_pairs().get(name)
    if entry is None:
        raise _unknown(name)
    target, draft = DATA_DIR / entry["target"], DATA_DIR / entry["draft"]
    if not (_complete(target) and _complete(draft)):
        ref = entry.get("rebuild")
        if not ref:
            raise SurgeryError(diag("SRG001", f"the built-in pair {name} is missing from {target.parent}",
                                    hint="reinstall spec-surgery; the tiny weights travel inside the wheel"))
        if ref not in _REBUILDERS:  # the registry names a builder; code is never looked up from data
            raise ValueError(f"pairs.yaml {name}.rebuild: unknown builder {ref!r} (known: {', '.join(_REBUILDERS)})")
        target, draft = _REBUILDERS[ref]()
    return Path(target), Path(draft), entry


def export(name: str, dest: str | Path, force: bool = False) -> dict:
    """Write the built-in pair `name` as DEST/target and DEST/draft; returns what was written."""
    from .hf.pair import _replace_dir
    from .hf.tokenizer import FILES as TOKENIZER_FILES
    from .hf.tokenizer import write_tokenizer

    target, draft, entry = source_folders(name)
    dest = Path(dest)
    outs = {side: dest / side for side in SIDES}
    busy = [str(p) for p in outs.values() if p.exists() and (not p.is_dir() or any(p.iterdir()))]
    if busy and not force:
        raise SurgeryError(diag("SRG035", f"would overwrite {', '.join(busy)}", Location(str(dest))))
    dest.mkdir(parents=True, exist_ok=True)
    written: dict[str, list[str]] = {}
    for side, src in zip(SIDES, (target, draft)):
        tmp = Path(tempfile.mkdtemp(prefix=f".{side}-", dir=dest))
        try:
            for f in sorted(src.iterdir()):
                if f.is_file() and not f.name.startswith("."):
                    shutil.copyfile(f, tmp / f.name)
            if entry.get("tokenizer") == "byte" and not all((tmp / f).is_file() for f in TOKENIZER_FILES):
                write_tokenizer(tmp)
            written[side] = sorted(f.name for f in tmp.iterdir())
            _replace_dir(tmp, outs[side])
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return {"pair": name, "target": str(outs["target"]), "draft": str(outs["draft"]), "files": written}
