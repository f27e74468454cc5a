"""The built-in miniature pairs per recipe (surgery/data/pairs/index.yaml), and `surgery pair export`.

The index is data: recipe -> target / draft folders (relative to surgery/data/pairs), vLLM's
speculative method, sizes, the seed and builder that made them, the held-out prompts the
acceptance is measured on, the wrong-wiring ablation rows of that family, and for serving the
tokenizer kind and a one-line summary. Built by tools/build_family_pairs.py; the Gemma 4 pair
(surgery/data/tiny, tools/build_tiny_pair.py) is listed too, so a family's pair registers without code.
The prompts a pair is measured on live here as well: the index's held-out prompts, and
``DEFAULT_PROMPTS`` for pairs the user brings.

`export` writes DIR/target and DIR/draft as ordinary model folders (config.json, model.safetensors,
tokenizer files): what `vllm ... --model DIR/target --speculative-config '{"model": "DIR/draft", ...}'`
and `transformers.AutoModelForCausalLM.from_pretrained` read. Each folder is written in a temporary
folder next to it and renamed into place, so an interrupted export never leaves a folder that looks
complete.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .text.diagnostics import Location, SurgeryError, diag
from .folders import is_complete, staged_dir
from .text.yamlload import load_yaml_text
from .tinymodels.tinypair import ensure_tiny_pair
from .resources import shipped_recipes
from .tinymodels.bytetokenizer import FILES as TOKENIZER_FILES, write_tokenizer

PAIRS_DIR = Path(__file__).resolve().parent / "data" / "pairs"
INDEX = PAIRS_DIR / "index.yaml"
ABLATIONS = PAIRS_DIR / "ablations.yaml"  # hand-written rows; index.yaml is the builders' output
SIDES = ("target", "draft")
GEMMA_PAIR = "gemma4-mtp"  # the tiny Gemma 4 pair's entry (surgery/data/tiny, surgery/tinymodels/tinypair.py)

# Generic openings of Python code: prompts for pairs the user brings. The Gemma 4 pair was trained
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


@dataclass(frozen=True)
class Ablation:
    """A wrong-wiring variant (surgery/data/pairs/ablations.yaml): the draft folder with config keys
    removed or replaced, and / or roles rewired on the live draft (surgery/vllm/ablation.py:
    role -> ``target`` or ``random``), and / or speculative_config keys the engine gets instead of the
    pair's (``speculative``: a P-EAGLE head served without ``parallel_drafting``). ``draft``: a row that
    needs another head than the pair's (the aux-id convention rows: the shipped head reads vLLM id 0,
    which one layer earlier does not exist) names it; the same target serves it."""

    name: str
    drop_config_keys: tuple[str, ...] = ()
    set_config: dict = field(default_factory=dict)
    rewire: dict = field(default_factory=dict)
    because: str = ""
    speculative: dict = field(default_factory=dict)
    draft: Path | None = None  # another head folder (relative to the pairs folder) the row serves instead


@dataclass(frozen=True)
class BuiltinPair:
    recipe: str
    target: Path
    draft: Path
    method: str | None
    prompts: tuple[str, ...]
    ablations: tuple[Ablation, ...]
    info: dict


def load_index(path: Path = INDEX) -> dict:
    return load_yaml_text(path.read_text(encoding="utf-8"), str(path)).data or {}


def load_ablations(path: Path = ABLATIONS) -> dict:
    """recipe name -> its ablation rows (empty when the file is absent)."""
    if not path.is_file():
        return {}
    return (load_index(path).get("ablations") or {})


def builtin_pair(recipe: str, path: Path = INDEX, engine: str | None = None) -> BuiltinPair | None:
    """The pair listed for ``recipe`` (a shipped recipe name), or None when there is none.

    ``engine``: an entry's ``engines: {NAME: {draft, because, ...}}`` replaces the draft (and the keys
    it names) for that engine. The built-in EAGLE-3 head reads ids SGLang cannot capture (SRG362), so
    SGLang gets a head of the same recipe trained on ids it can; ``info["engine_variant"]`` says why."""
    entry = (load_index(path).get("pairs") or {}).get(recipe)
    if not entry:
        return None
    variant = (entry.get("engines") or {}).get(engine) if engine else None
    entry = {k: v for k, v in entry.items() if k != "engines"}
    if variant:
        entry = {**entry, **{k: v for k, v in variant.items() if k != "because"},
                 "engine_variant": {"engine": engine, "draft": variant["draft"], "because": variant.get("because", "")}}
    base = path.parent
    rows = list(entry.get("ablations") or ()) + list(load_ablations(base / ABLATIONS.name).get(recipe) or ())
    abl = tuple(Ablation(name=a["name"], drop_config_keys=tuple(a.get("drop_config_keys") or ()),
                         set_config=dict(a.get("set_config") or {}), rewire=dict(a.get("rewire") or {}),
                         because=a.get("because", ""), speculative=dict(a.get("speculative") or {}),
                         draft=(base / a["draft"]).resolve() if a.get("draft") else None)
                for a in rows)
    return BuiltinPair(recipe=recipe, target=(base / entry["target"]).resolve(), draft=(base / entry["draft"]).resolve(),
                       method=entry.get("method"), prompts=tuple(entry.get("prompts") or ()), ablations=abl,
                       info={k: v for k, v in entry.items() if k not in ("prompts", "ablations")})


def held_out_prompts() -> tuple[str, ...]:
    """The Gemma 4 pair's measurement prompts: line starts of the stdlib files its builder kept
    out of training (``tools/build_tiny_pair.py`` records them in the index), so an acceptance
    measured on them is not the pair reciting its training text. Empty when the index lists none
    (callers fall back to ``DEFAULT_PROMPTS`` and say so)."""
    entry = builtin_pair(GEMMA_PAIR)
    return entry.prompts if entry is not None else ()


def _tiny_gemma4_cache():
    return ensure_tiny_pair()


# where a registry entry's `rebuild` finds a pair whose weights are not committed (an install without
# them): the tiny Gemma 4 pair's cache, which tools/build_tiny_pair.py writes
_REBUILDERS = {"tiny-gemma4": _tiny_gemma4_cache}


def builtin_pairs() -> dict[str, dict]:
    """recipe name -> its index entry (paths relative to PAIRS_DIR)."""
    return dict(load_index().get("pairs") or {})


def _unknown(name: str) -> SurgeryError:
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
    target, draft = (PAIRS_DIR / entry["target"]).resolve(), (PAIRS_DIR / entry["draft"]).resolve()
    if not (is_complete(target) and is_complete(draft)):
        ref = entry.get("rebuild")
        if not ref:
            raise SurgeryError(diag("SRG001", f"the built-in pair {name} is missing from {target.parent}",
                                    hint="reinstall spec-surgery; the tiny weights travel inside the wheel"))
        if ref not in _REBUILDERS:  # the registry names a builder; code is never looked up from data
            raise ValueError(f"pairs/index.yaml {name}.rebuild: unknown builder {ref!r} (known: {', '.join(_REBUILDERS)})")
        target, draft = _REBUILDERS[ref]()
    return Path(target), Path(draft), entry


def export(name: str, dest: str | Path, force: bool = False) -> dict:
    """Write the built-in pair `name` as DEST/target and DEST/draft; returns what was written."""
    target, draft, entry = source_folders(name)
    dest = Path(dest)
    outs = {side: dest / side for side in SIDES}
    busy = [str(p) for p in outs.values() if p.exists() and (not p.is_dir() or any(p.iterdir()))]
    if busy and not force:
        raise SurgeryError(diag("SRG035", f"would overwrite {', '.join(busy)}", Location(str(dest))))
    dest.mkdir(parents=True, exist_ok=True)
    written: dict[str, list[str]] = {}
    for side, src in zip(SIDES, (target, draft)):
        with staged_dir(outs[side]) as tmp:
            for f in sorted(src.iterdir()):
                if f.is_file() and not f.name.startswith("."):
                    shutil.copyfile(f, tmp / f.name)
            if entry.get("tokenizer") == "byte" and not all((tmp / f).is_file() for f in TOKENIZER_FILES):
                write_tokenizer(tmp)
            written[side] = sorted(f.name for f in tmp.iterdir())
    return {"pair": name, "target": str(outs["target"]), "draft": str(outs["draft"]), "files": written}
