"""What `surgery validate --weights` costs on hub ids, against what a download would move.

    python bench/hub_validate.py [--rtt-ms 0,30,100] [--json bench/results/hub_validate.json]

Serves the real-size repos of tests/hub/repos.py from the local hub (tests/hub/hubserver.py: real
configs and safetensors headers, sparse bulk data) and times, per pair and per round-trip delay
added to every answer (a network's latency; loopback alone has none):
  cold     an empty HF cache: what a user pays before downloading anything;
  offline  HF_HUB_OFFLINE=1 right after: the same answer from the cache, no request.
Bytes are what the server sent (its own count) next to what the two repos declare, i.e. what
`vllm serve` would download first. Each run is a fresh `python -m surgery` process.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from hub.hubserver import HubServer  # noqa: E402
from hub.repos import EAGLE3, GEMMA, GEMMA_ASSISTANT, LLAMA, all_repos  # noqa: E402

PAIRS = [("Llama 3.1 8B + EAGLE-3 (speculators)", "eagle3", LLAMA, EAGLE3, ["--engine", "vllm"]),
         ("Gemma 4 31B + assistant", "gemma4-mtp", GEMMA, GEMMA_ASSISTANT, [])]


def run_once(server: HubServer, recipe: str, target: str, draft: str, extra: list[str], home: str,
             offline: bool) -> dict:
    env = {**os.environ, "HF_ENDPOINT": server.endpoint, "HF_HOME": home, "HF_TOKEN": "hf_test_token"}
    env.pop("HF_HUB_CACHE", None)
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    else:
        env.pop("HF_HUB_OFFLINE", None)
    server.reset_log()
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "surgery", "validate", recipe, "--target", target, "--draft", draft,
                           "--weights", "--json", *extra], cwd=REPO, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t
    data = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return {"exit": proc.returncode, "seconds": round(seconds, 3), "served_bytes": server.served_bytes(),
            "requests": len(server.log), "ok": data.get("ok"),
            "commits": {s: (data.get(s) or {}).get("pin", {}).get("commit") for s in ("target", "draft")}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rtt-ms", default="0,30,100", help="round-trip delays to add, comma-separated")
    ap.add_argument("--json", default=str(REPO / "bench" / "results" / "hub_validate.json"))
    args = ap.parse_args()
    rows = []
    for rtt in [float(x) for x in args.rtt_ms.split(",")]:
        with HubServer(all_repos(), rtt_s=rtt / 1000) as server:
            for label, recipe, target, draft, extra in PAIRS:
                declared = server.declared_bytes(target, draft)
                with tempfile.TemporaryDirectory() as home:
                    cold = run_once(server, recipe, target, draft, extra, home, offline=False)
                    offline = run_once(server, recipe, target, draft, extra, home, offline=True)
                rows.append({"pair": label, "target": target, "draft": draft, "rtt_ms": rtt, "declared_bytes": declared,
                             "cold": cold, "offline": offline,
                             "fraction_fetched": cold["served_bytes"] / declared})
    print("| pair | RTT | exit | fetched | requests | seconds (cold) | seconds (offline, 0 requests) | "
          "a download would move | fetched / download |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        c, o = r["cold"], r["offline"]
        print(f"| {r['pair']} | {r['rtt_ms']:.0f} ms | {c['exit']} | {c['served_bytes'] / 1e3:,.0f} kB | {c['requests']} | "
              f"{c['seconds']:.2f} | {o['seconds']:.2f} ({o['requests']} req, exit {o['exit']}) | "
              f"{r['declared_bytes'] / 1e9:.2f} GB | {r['fraction_fetched']:.1e} |")
    Path(args.json).write_text(json.dumps({"python": sys.version.split()[0], "rows": rows}, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0 if all(r["cold"]["exit"] == 0 and r["offline"]["exit"] == 0 and r["offline"]["requests"] == 0
                    for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
