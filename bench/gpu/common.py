"""Shared helpers for the GPU runs (bench/gpu/*.py): result files under $OUT, timing, the tiny pair."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
OUT = Path(os.environ.get("OUT", "/tmp/surgery-out"))
OUT.mkdir(parents=True, exist_ok=True)

from rowlog import Rows, failure, failure_from_text, no_nan, run_row  # noqa: E402,F401  (bench/gpu is the scripts' sys.path[0])


def log(*parts) -> None:
    print(time.strftime("%H:%M:%S"), *parts, flush=True)


def save(name: str, data) -> None:
    path = OUT / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    log("wrote", path)


ROWS: Rows | None = None  # start_rows(name): every guarded part is also a line of $OUT/<name>.rows.jsonl


def start_rows(name: str) -> Rows:
    """Write each guarded part to $OUT/<name>.rows.jsonl as it finishes (rowlog.Rows): a call cut short
    by its time limit, or a part that raises, keeps every row measured before it."""
    global ROWS
    ROWS = Rows(OUT / f"{name}.rows.jsonl")
    log("rows go to", ROWS.path)
    return ROWS


def guarded(results: dict, key: str, fn, *args, row_key: str | None = None, **kwargs):
    """Run one part; record its result or its failure (type, message, library, symbol: rowlog.failure),
    never stop the whole run. The part is written as a row the moment it finishes (start_rows)."""
    t = time.perf_counter()
    results[key], _ok = run_row(ROWS, row_key or key, fn, *args, **kwargs)
    results.setdefault("_seconds", {})[key] = round(time.perf_counter() - t, 2)
    return results[key]


def tiny_pair_dirs(dest: Path, strip_per_layer_config: bool = True) -> tuple[Path, Path]:
    """The committed tiny pair, copied with configs every transformers release here can read
    (vLLM 0.25's bundled transformers 5.14.1 chokes on `per_layer_config`, derived anyway)."""
    import shutil

    src = ROOT / "surgery" / "data" / "tiny" / "weights"
    for name in ("target", "draft"):
        d = dest / name
        d.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / name / "model.safetensors", d / "model.safetensors")
        shutil.copyfile(src / name / "config.json", d / "config.json")
    if not strip_per_layer_config:
        return dest / "target", dest / "draft"
    return readable_pair(dest / "target", dest / "draft")


def readable_pair(target: Path, draft: Path) -> tuple[Path, Path]:
    """A Gemma 4 pair folder made readable in place for the bundle's transformers 5.14.1 and vLLM
    0.25/0.26: `per_layer_config` dropped (derived anyway), the KV-shared layers' k_norm added."""
    for d in (target, draft):
        cfg = json.loads((d / "config.json").read_text())
        cfg.pop("per_layer_config", None)
        if isinstance(cfg.get("text_config"), dict):
            cfg["text_config"].pop("per_layer_config", None)
        (d / "config.json").write_text(json.dumps(cfg, indent=2))
        if d == target:
            _add_shared_layer_norms(d, cfg)
    return target, draft


def _add_shared_layer_norms(folder: Path, cfg: dict) -> None:
    """transformers 5.19 builds no k_norm for KV-shared layers (they compute no K), so the
    checkpoint has none; vLLM 0.25's Gemma 4 still declares one and refuses to start without it.
    The value is never used (those layers read another layer's cache): ones."""
    import torch
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    tensors = load_file(str(path))
    n, shared = cfg["num_hidden_layers"], cfg.get("num_kv_shared_layers", 0) or 0
    for i in range(n - shared, n):
        key = f"model.layers.{i}.self_attn.k_norm.weight"
        if key not in tensors:
            full = cfg["layer_types"][i] == "full_attention"
            dim = cfg.get("global_head_dim", cfg["head_dim"]) if full else cfg["head_dim"]
            tensors[key] = torch.ones(dim, dtype=tensors["model.layers.0.self_attn.q_norm.weight"].dtype)
    save_file(tensors, str(path), metadata={"format": "pt"})
