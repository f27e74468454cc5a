"""The acceptance guard on a finished decode run: surgery/guard.py's rules over every draft of the run,
judged once, with a stated support bound. Used where no server window exists: `surgery apply --engine
hf` (our MTP loop and transformers' assisted generation) and each of its `--ablate` rows, and the HF /
SGLang bench runs of the miniature pairs.

Why not guard.py's defaults: they are sized for a server that sees thousands of drafts (min_drafts
200, window 1000, check_every 50). `surgery apply --engine hf` decodes 8 prompts x 48 tokens, about 115
drafts of k = 3 on the tiny Gemma 4 pair: under the server defaults no rule would ever be judged, and a
guard that says nothing reads as a pass. So a finished run is one window (window = check_every = its
drafts), judged once when it holds at least `min_drafts` drafts (surgery/data/guard_runs.yaml: 30, the
binomial bound is written there); under that the verdict is "not judged", with the count, never
"silent". The drift rule needs an earlier window and is not judged on one run.

What comes in is per-draft counts, the engines' own: one (drafted, accepted) pair per draft (one
request's proposal in one step), in order: exactly what vLLM's `SpecDecodingStats.observe_draft` and
guard.Counts.observe take, so per-position acceptance means the same here as on a vLLM server.

An expectation may carry `source` (where it comes from: {kind: measured, engine, release, card, ...},
the shared format of docs/vllm.md): it is kept out of guard.py's check and named in the verdict and in
the SRG474 trip's message."""
from __future__ import annotations

from typing import Any, Iterable

from .guard import Counts, Guard, parse_config
from .resources import load_data

STATUSES = ("tripped", "silent", "not judged")


def run_defaults() -> dict[str, Any]:
    return dict(load_data("data/guard_runs.yaml")["defaults"])


def ignored_keys() -> tuple[str, ...]:
    return tuple(load_data("data/guard_runs.yaml")["ignored"])


def split_source(raw: Any) -> tuple[Any, dict | None]:
    """(the guard mapping without expect.source, the source mapping or None). Anything that is not a
    mapping is returned as it is: parse_config says what is wrong with it (SRG475)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("expect"), dict) or "source" not in raw["expect"]:
        return raw, None
    expect = dict(raw["expect"])
    source = expect.pop("source")
    out = dict(raw)
    if expect:
        out["expect"] = expect
    else:
        out.pop("expect")
    return out, source if isinstance(source, dict) else {"kind": str(source)}


def describe_source(source: dict | None) -> str:
    """'measured, hf 5.19.0 on cpu, bench/guard_hf.py' from a source mapping (None: '')."""
    if not source:
        return ""
    kind = source.get("kind", "given")
    where = " ".join(str(source[k]) for k in ("engine", "release") if source.get(k))
    card = f" on {source['card']}" if source.get("card") else ""
    by = f", {source['by']}" if source.get("by") else ""
    date = f", {source['date']}" if source.get("date") else ""
    return f"{kind}{', ' + where if where else ''}{card}{date}{by}"


def merge(*layers: Any) -> dict:
    """Guard mappings merged left to right, `expect` key by key (a pair's measured expectation under a
    recipe's own `guard:`); None and booleans ({enabled: b}) allowed."""
    out: dict = {}
    for layer in layers:
        if layer is None:
            continue
        if isinstance(layer, bool):
            layer = {"enabled": layer}
        if not isinstance(layer, dict):
            return layer  # parse_config's SRG475 names the type
        for key, value in layer.items():
            if key == "expect" and isinstance(value, dict) and isinstance(out.get("expect"), dict):
                out["expect"] = {**out["expect"], **value}
            else:
                out[key] = value
    return out


def judge(drafts: Iterable[tuple[int, int]], raw: Any = None, num_spec: int | None = None, method: str | None = None,
          parallel: bool = False) -> dict:
    """The guard's verdict on a finished run: `drafts` are (drafted tokens, accepted tokens) per draft, in
    order; `raw` the `guard:` mapping (recipe / pair / user), SRG475 when it is invalid; `num_spec` the
    drafter's k (default: the most tokens any draft proposed).

    Returns {"status": tripped | silent | not judged, "drafts", "min_drafts", "trips": [Trip.to_dict()],
    "codes", "per_position", "mean_length", "acceptance", "break_even", "cost", "expect", "reference",
    "why"}: JSON-ready, what the CLI prints and the ablation rows carry."""
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
