"""The built-in miniature pairs per recipe family (surgery/data/pairs/index.yaml).

The index is data: recipe -> target / draft folders (relative to surgery/data/pairs), vLLM's
speculative method, sizes, the seed and builder that made them, the held-out prompts the
acceptance is measured on, and the wrong-wiring ablation rows of that family. Built by
tools/build_family_pairs.py; the Gemma 4 pair (surgery/data/tiny, surgery.hf.pair) is listed too.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

PAIRS_DIR = Path(__file__).resolve().parent / "data" / "pairs"
INDEX = PAIRS_DIR / "index.yaml"


@dataclass(frozen=True)
class Ablation:
    """A wrong-wiring variant: the draft folder with config keys removed or replaced."""

    name: str
    drop_config_keys: tuple[str, ...] = ()
    set_config: dict = field(default_factory=dict)
    because: str = ""


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
    from .yamlload import load_yaml_text

    return load_yaml_text(path.read_text(encoding="utf-8"), str(path)).data or {}


def builtin_pair(recipe: str, path: Path = INDEX) -> BuiltinPair | None:
    """The pair listed for ``recipe`` (a shipped recipe name), or None when there is none."""
    entry = (load_index(path).get("pairs") or {}).get(recipe)
    if not entry:
        return None
    base = path.parent
    abl = tuple(Ablation(name=a["name"], drop_config_keys=tuple(a.get("drop_config_keys") or ()),
                         set_config=dict(a.get("set_config") or {}), because=a.get("because", ""))
                for a in entry.get("ablations") or ())
    return BuiltinPair(recipe=recipe, target=(base / entry["target"]).resolve(), draft=(base / entry["draft"]).resolve(),
                       method=entry.get("method"), prompts=tuple(entry.get("prompts") or ()), ablations=abl,
                       info={k: v for k, v in entry.items() if k not in ("prompts", "ablations")})
