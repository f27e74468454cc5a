"""A candidate's draft folder: a copy of the draft whose config.json carries the candidate's answers
(the weights are linked, never changed: the weights are the truth the probe measures against)."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from .questions import DROP


def edited_config(cfg: dict, edits) -> dict:
    """`cfg` with each (dotted key, value | DROP) edit made; intermediate mappings are created."""
    out = json.loads(json.dumps(cfg))
    for key, value in edits:
        *path, last = key.split(".")
        node = out
        for part in path:
            node = node.setdefault(part, {})
        if value is DROP:
            node.pop(last, None)
        else:
            node[last] = value
    return out


def candidate_folder(draft: Path, edits, dest: Path) -> Path:
    """`dest` holding the draft's files (weights linked) and the edited config.json."""
    dest.mkdir(parents=True, exist_ok=False)
    for f in Path(draft).iterdir():
        if f.name == "config.json" or f.is_dir():
            continue
        try:
            os.symlink(f.resolve(), dest / f.name)
        except OSError:
            shutil.copy2(f, dest / f.name)
    cfg = json.loads((Path(draft) / "config.json").read_text())
    (dest / "config.json").write_text(json.dumps(edited_config(cfg, edits), indent=2))
    return dest
