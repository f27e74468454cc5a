"""The acceptance guard on a finished decode run: surgery/guard/judge.py's rules over every draft of the run,
judged once, with a stated support bound. Used where no server window exists: `surgery apply --engine
hf` (our MTP loop and transformers' assisted generation) and each of its `--ablate` rows, and the HF /
SGLang bench runs of the miniature pairs.

Why not the live defaults (settings.py): they are sized for a server that sees thousands of drafts (min_drafts
200, window 1000, check_every 50). `surgery apply --engine hf` decodes 8 prompts x 48 tokens, about 115
drafts of k = 3 on the tiny Gemma 4 pair: under the server defaults no rule would ever be judged, and a
guard that says nothing reads as a pass. So a finished run is one window (window = check_every = its
drafts), judged once when it holds at least `min_drafts` drafts (surgery/data/guard_runs.yaml: 30, the
binomial bound is written there); under that the verdict is "not judged", with the count, never
"silent". The drift rule needs an earlier window and is not judged on one run.

What comes in is per-draft counts, the engines' own: one (drafted, accepted) pair per draft (one
request's proposal in one step), in order: exactly what vLLM's `SpecDecodingStats.observe_draft` and
surgery/guard/counts.py `Counts.observe` take, so per-position acceptance means the same here as on a vLLM server.

An expectation may carry `source` (where it comes from: {kind: measured, engine, release, card, ...},
the shared format of docs/vllm.md): it is split off before the settings are checked (expectation.py
`split_source`) and named in the verdict and in the SRG474 trip's message.

A run's `guard:` settings are merged by surgery/guard/precedence.py `resolve`, as every engine's are; `verdict`
reads a live guard's record (Guard.to_dict) the same way, for the vLLM ablation table."""
from __future__ import annotations

from typing import Any, Iterable

from ..resources import load_data
from ..text.diagnostics import SurgeryError
from .counts import Counts
from .expectation import describe_source, split_source
from .judge import Guard
from .precedence import Settings
from .settings import parse_config


STATUSES = ("tripped", "silent", "not judged")


def run_defaults() -> dict[str, Any]:
    return dict(load_data("data/guard_runs.yaml")["defaults"])


def ignored_keys() -> tuple[str, ...]:
    return tuple(load_data("data/guard_runs.yaml")["ignored"])


def judge(drafts: Iterable[tuple[int, int]], raw: Any = None, num_spec: int | None = None, method: str | None = None,
          parallel: bool = False) -> dict:
    """The guard's verdict on a finished run: `drafts` are (drafted tokens, accepted tokens) per draft, in
    order; `raw` the `guard:` settings, a mapping or the `Settings` that `resolve` merged (then SRG475 names
    the layer that wrote the bad key), SRG475 when they are invalid; `num_spec` the drafter's k (default: the
    most tokens any draft proposed).

    Returns {"status": tripped | silent | not judged, "drafts", "min_drafts", "trips": [Trip.to_dict()],
    "codes", "per_position", "mean_length", "acceptance", "break_even", "cost", "expect", "reference",
    "why"}: JSON-ready, what the CLI prints and the ablation rows carry."""
    if not isinstance(raw, Settings):
        return _judge(drafts, raw, num_spec, method, parallel)
    try:
        return _judge(drafts, raw.raw, num_spec, method, parallel)
    except SurgeryError as exc:
        raise raw.relocate(exc) from None


def _judge(drafts, raw, num_spec, method, parallel) -> dict:
    raw, source = split_source(raw)
    base = run_defaults()
    expect_min = base.pop("expect_min_drafts")
    settings = {**base, **{k: v for k, v in (raw if isinstance(raw, dict) else {}).items()
                           if k not in ignored_keys()}}
    if isinstance(settings, dict):
        expect_min = settings.pop("expect_min_drafts", expect_min)
    if raw is not None and not isinstance(raw, dict):
        settings = raw  # parse_config refuses it with the type named
    rows = [(int(d), int(a)) for d, a in drafts if d]
    k = num_spec or max((d for d, _ in rows), default=1)
    counts = Counts.sized(k)
    for d, a in rows:
        counts.observe(d, a)
    n = len(rows)
    min_drafts = settings.get("min_drafts", base["min_drafts"]) if isinstance(settings, dict) else base["min_drafts"]
    # validated whatever the run's size: a bad guard mapping is an error even on a short run
    probe = parse_config(settings if not isinstance(settings, dict) else
                         {**settings, "window": max(n, min_drafts), "check_every": max(n, min_drafts)})
    out = {"status": "not judged", "drafts": n, "min_drafts": probe.min_drafts, "trips": [], "codes": [],
           "per_position": [round(p, 4) for p in counts.per_position()],
           "mean_length": round(counts.mean_length(), 4) if n else None,
           "acceptance": round(counts.acceptance(), 4) if n else None,
           "expect": probe.expectations or None, "reference": source, "action": probe.action}
    if n < probe.min_drafts:
        out["why"] = (f"{n} drafts, under the support bound min_drafts {probe.min_drafts} "
                      f"(surgery/data/guard_runs.yaml): decode more prompts or tokens")
        guard = Guard(probe, k, method, parallel)
        out.update(break_even=guard.break_even, cost=guard.cost_source)
        return out
    judged = dict(settings)
    if probe.expect and n < expect_min:
        judged.pop("expect", None)
        out["expect_not_judged"] = (f"{n} drafts, under expect_min_drafts {expect_min} "
                                    "(surgery/data/guard_runs.yaml): per-position rates that close are noise")
    config = parse_config({**judged, "window": n, "check_every": n})
    guard = Guard(config, k, method, parallel)
    for d, a in rows:
        guard.observe(d, a)
    trips = []
    for t in guard.trips:
        row = t.to_dict()
        if t.kind == "expectation" and source:
            row["message"] += f"; reference: {describe_source(source)}"
        trips.append(row)
    out.update(status="tripped" if trips else "silent", trips=trips, codes=sorted({t["code"] for t in trips}),
               break_even=guard.break_even, cost=guard.cost_source,
               why=f"judged once on all {n} drafts of the run (support bound {config.min_drafts})")
    return out


def line(verdict: dict | None) -> str:
    """One line for a table: 'silent (115 drafts)', 'SRG470 collapse, SRG471 break_even (112 drafts)',
    'not judged (12 drafts < 30)'."""
    if not verdict:
        return "-"
    n = verdict["drafts"]
    if verdict["status"] == "not judged":
        return f"not judged ({n} drafts < {verdict['min_drafts']})"
    if verdict["status"] == "silent":
        return f"silent ({n} drafts)"
    return ", ".join(f"{t['code']} {t['kind']}" for t in verdict["trips"]) + f" ({n} drafts)"


def verdict(record: dict | None) -> dict:
    """One run's guard verdict from its record (Guard.to_dict): `trips` (the codes), `silent` (judged, no
    rule held), `not judged` (fewer drafts than min_drafts), or `off`; with a short text for tables."""
    if not record:
        return {"verdict": "off", "codes": [], "text": "guard off"}
    seen = (record.get("streams") or {}).get("all", {}).get("drafts_seen", 0)
    judged = ((record.get("streams") or {}).get("all", {}).get("last") or {}).get("drafts")
    codes = list(dict.fromkeys(t["code"] for t in record.get("trips") or ()))
    if codes:
        kinds = list(dict.fromkeys(t["kind"] for t in record["trips"]))
        return {"verdict": "trips", "codes": codes, "kinds": kinds, "drafts": seen,
                "text": "trips " + ", ".join(f"{c} {k}" for c, k in zip(codes, kinds))}
    if judged is None:
        return {"verdict": "not judged", "codes": [], "drafts": seen,
                "text": f"not judged ({seen} drafts < min_drafts {record.get('min_drafts')})"}
    return {"verdict": "silent", "codes": [], "drafts": seen, "text": f"silent ({seen} drafts judged)"}
