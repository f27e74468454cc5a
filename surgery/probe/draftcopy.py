"""A candidate's draft folder: a copy of the draft whose config.json carries the candidate's answers.
The weights are linked, never changed (they are the truth the probe measures against), except
where an answer is about a tensor (a d2t read in the other convention, the draft's own embedding
dropped so the engine shares the target's): the safetensors file holding it is rewritten in the
copy (EAGLE heads are one file of at most a few GB; the other files stay linked)."""
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


def _holder(draft: Path, name: str) -> str | None:
    """The safetensors file (name in the folder) that holds tensor `name`."""
    index = Path(draft) / "model.safetensors.index.json"
    if index.exists():
        return json.loads(index.read_text()).get("weight_map", {}).get(name)
    from safetensors import safe_open

    for f in sorted(Path(draft).glob("*.safetensors")):
        with safe_open(str(f), "pt") as h:
            if name in h.keys():
                return f.name
    return None


def rewrite_tensors(draft: Path, dest: Path, tensors) -> None:
    """Write into `dest` the draft's files holding `tensors` ((name, values | DROP)), edited; the
    index (if any) is rewritten without the dropped names."""
    import torch
    from safetensors.torch import load_file, save_file

    by_file: dict[str, list] = {}
    for name, value in tensors:
        f = _holder(draft, name)
        if f is None:
            raise ValueError(f"no tensor {name} in {draft}")
        by_file.setdefault(f, []).append((name, value))
    for f, edits in by_file.items():
        data = load_file(str(Path(draft) / f))
        for name, value in edits:
            if value is DROP:
                data.pop(name)
            else:
                data[name] = torch.tensor(value, dtype=data[name].dtype).reshape(data[name].shape)
        target = dest / f
        if target.is_symlink() or target.exists():
            target.unlink()
        save_file(data, str(target), metadata={"format": "pt"})
    index = Path(draft) / "model.safetensors.index.json"
    dropped = {n for n, v in tensors if v is DROP}
    if index.exists() and dropped:
        doc = json.loads(index.read_text())
        doc["weight_map"] = {k: v for k, v in doc.get("weight_map", {}).items() if k not in dropped}
        (dest / index.name).unlink()
        (dest / index.name).write_text(json.dumps(doc, indent=2))


def candidate_folder(draft: Path, edits, dest: Path, tensors=()) -> Path:
    """`dest` holding the draft's files (weights linked, those holding `tensors` rewritten) and the
    edited config.json."""
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
    if tensors:
        rewrite_tensors(Path(draft), dest, tensors)
    return dest
