"""`surgery convert DRAFT_DIR --to FORMAT OUT_DIR`: the folder side of a conversion. The config is
translated by `convert.py`; every other file (the safetensors, tokenizer files) is copied byte for
byte, tensor names unchanged: vLLM's llama_eagle3 loader reads the same names in every format
(`midlayer.*` or `layers.0.*`, `d2t`, `t2d` skipped). The result is written in a temporary folder next
to OUT_DIR and renamed into place (surgery/folders.py), so a refusal leaves OUT_DIR untouched.
`surgery-provenance.json` records the source digests, the tool version and every field written, and why."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from ..diagnostics import Location, fail
from ..folders import staged_dir
from .convert import converted
from .recognise import recognise

PROVENANCE = "surgery-provenance.json"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def convert_folder(src: str, to: str, out: str, target: str | None = None, producer: str | None = None,
                   k: int | None = None, force: bool = False) -> dict:
    from ..facts import read_config, read_facts  # facts imports this package: read at call time only
    from ..version import __version__

    from ..modelref import local_snapshot
    from ..modelsource import is_hub_ref

    if is_hub_ref(src):  # a hub head: its files are copied byte for byte, so they are fetched whole
        src = local_snapshot(src, "convert", download=True)
    src_dir, out_dir = Path(src), Path(out)
    if not src_dir.is_dir():
        raise fail("SRG001", f"{src} is not a model folder", Location(src))
    cfg, source = read_config(src_dir)
    cfg = {k2: v for k2, v in cfg.items() if not k2.startswith("_") or k2 == "_name_or_path"}
    target_facts = read_facts(target) if target else None
    layers = target_facts.num_layers if target_facts else None
    written, why = converted(cfg, to, layers, producer=producer, verifier=target, k=k,
                             verifier_architectures=tuple(target_facts.architectures) if target_facts else ())
    if out_dir.exists() and not force:
        raise fail("SRG661", f"{out} exists", Location(out))
    if out_dir.resolve() == src_dir.resolve():
        raise fail("SRG661", "OUT_DIR is DRAFT_DIR", Location(out))
    fmt = recognise(cfg, source, producer)
    files = sorted(p for p in src_dir.iterdir() if p.is_file() and p.name not in ("config.json", PROVENANCE))
    provenance = {
        "tool": f"spec-surgery {__version__}", "command": "surgery convert",
        "source": {"folder": str(src_dir), "format": fmt.name, "producer": fmt.producer,
                   "producer_from": fmt.producer_from,
                   "sha256": {p.name: sha256(p) for p in [src_dir / "config.json", *files]}},
        "to": to, "target": target,
        "fields": why,
        "files": {p.name: "copied byte for byte (tensor names unchanged)" for p in files},
    }
    with staged_dir(out_dir) as tmp:
        for p in files:
            shutil.copyfile(p, tmp / p.name)
        # written as transformers' save_pretrained writes config.json (sorted keys, indent 2): a round
        # trip of a head saved by transformers gives back its config.json byte for byte
        (tmp / "config.json").write_text(json.dumps(written, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        (tmp / PROVENANCE).write_text(json.dumps(provenance, indent=2) + "\n", encoding="utf-8")
    return {"ok": True, "out": str(out_dir), "format": to, "from": fmt.name, "fields": why,
            "files": sorted(provenance["files"])}
