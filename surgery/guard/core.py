"""The live acceptance guard's decisions: counter streams in, trips out. No engine, no clock.

Why: every other check looks at configs, headers or live wiring before the first request; the field's
remaining failures show only while serving (acceptance 1.2 % instead of 58.9 %, vllm#50170; a decay
to 0, vllm-ascend#13523; a cliff at position 1, vllm#42004). The engines count drafts and accepted
tokens per position but nothing reads those counts against an expectation. This module does, for any
engine: an integration feeds it the engine's own per-draft counts (vLLM: the scheduler's
`make_spec_decoding_stats`, surgery/vllm/guard.py) and logs / records / acts on what it returns.

It is pure (no vLLM, no torch, no time) so that every rule is tested on synthetic counter streams:
decisions depend on counts only (drafts in the window, accepted per position), never on seconds.

Terms (vLLM's, surgery/vllm/guard.py reads them where vLLM computes them):
- a *draft*: one request's proposal in one engine step (`SpecDecodingStats.num_drafts`);
- *per-position acceptance* p[i] = drafts whose token i was accepted / drafts (vLLM's "Per-position
  acceptance rate"); accepted tokens are a prefix, so p is non-increasing;
- *conditional acceptance* c[i] = accepted at i / accepted at i-1 (c[0] = p[0]): the draft's quality
  at depth i alone; the shape rule compares neighbours of c;
- *mean accepted length* = 1 + accepted / drafts (vLLM's "Mean acceptance length", bonus token in);
- *acceptance* = accepted / drafted tokens (vLLM's "Avg Draft acceptance rate").

Rules, judged on the rolling window (the last `window` drafts, in steps of `check_every`), once it holds
at least `min_drafts` drafts; each rule trips once per *episode*: it fires when it starts to hold and
not again until `clear_after` evaluations in a row find it no longer holding and clear of its
threshold (collapse: position 0 at 1.5 x the floor; break-even: 0.1 above it): the episode ends.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..text.diagnostics import Location, SurgeryError, diag
from ..resources import load_data

KINDS = ("collapse", "break_even", "shape", "drift", "expectation")
CODES = {"collapse": "SRG470", "break_even": "SRG471", "shape": "SRG472", "drift": "SRG473",
         "expectation": "SRG474"}
ACTIONS = ("warn", "fail")
EXPECT_KEYS = ("mean_length", "acceptance", "per_position")
# where an expectation comes from (docs: fmt of issue 55): a measured run (release, card), the head's model
# card, or the user's own figure; the SRG474 line names it, so a release regression reads as one
SOURCE_KINDS = ("measured", "model_card", "user")
WHERE = "additional_config.surgery.guard"


def defaults() -> dict[str, Any]:
    return dict(load_data("data/guard.yaml")["defaults"])


def cost_table() -> tuple[dict[str, float], dict[str, float]]:
    """(sequential draft cost per method, parallel draft cost per method), data/guard.yaml."""
    data = load_data("data/guard.yaml")
    return dict(data["draft_cost"]), dict(data["parallel_draft_cost"])


@dataclass(frozen=True)
class GuardConfig:
    """`additional_config.surgery.guard`, checked. `enabled` None: on when a recipe is selected."""

    enabled: bool | None = None
    action: str = "warn"
    floor: float = 0.10
    min_drafts: int = 200
    window: int = 1000
    check_every: int = 50
    shape_margin: float = 0.30
    cliff_ratio: float = 0.50
    min_support: int = 50
    drift_points: float = 20.0
    expect: tuple[tuple[str, Any], ...] = ()  # (key, value) pairs of EXPECT_KEYS
    expect_source: tuple[tuple[str, str], ...] = ()  # expect.source: (key, value) pairs, "kind" first
    expect_tolerance: float = 0.15
    expect_z: float = 2.576  # the support bound: Wilson upper end at this z (expectation, canary)
    clear_after: int = 3
    verify_cost: float = 0.05
    round_cost: float | None = None  # measured: a speculative round's time in plain decode steps
    draft_cost: float | None = None  # one draft forward in plain decode steps (overrides the method's)
    bands: tuple[int, ...] = ()
    # the start-up canary (surgery/vllm/canary.py): (prompts, tokens); prompts "builtin", a tuple of strings or
    # of token-id tuples; None: no canary
    canary: tuple | None = None

    @property
    def expectations(self) -> dict[str, Any]:
        return dict(self.expect)

    @property
    def source(self) -> dict[str, str]:
        return dict(self.expect_source)


_NUMBERS = {  # key -> (type, lowest, highest, lowest included)
    "floor": (float, 0.0, 1.0, True), "min_drafts": (int, 1, None, True), "window": (int, 1, None, True),
    "check_every": (int, 1, None, True), "shape_margin": (float, 0.0, 1.0, True),
    "cliff_ratio": (float, 0.0, 1.0, True), "min_support": (int, 1, None, True),
    "drift_points": (float, 0.0, 100.0, True), "expect_tolerance": (float, 0.0, 1.0, True),
    "expect_z": (float, 0.0, 10.0, True),
    "clear_after": (int, 1, None, True),
    "verify_cost": (float, 0.0, None, True), "round_cost": (float, 1.0, None, True),
    "draft_cost": (float, 0.0, None, True),
}
KEYS = ("enabled", "action", "expect", "bands", "canary") + tuple(_NUMBERS)
CANARY_KEYS = ("prompts", "tokens")


def _bad(key: str, message: str, hint: str | None = None) -> SurgeryError:
    return SurgeryError(diag("SRG475", message, Location(key_path=f"{WHERE}.{key}" if key else WHERE), hint))


def _number(key: str, value: Any):
    kind, low, high, _ = _NUMBERS[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not float(value).is_integer()):
        raise _bad(key, f"{key} must be {'an integer' if kind is int else 'a number'}, got {value!r}")
    value = kind(value)
    if not math.isfinite(value) or value < low or (high is not None and value > high):
        raise _bad(key, f"{key} must be in [{low}, {'inf' if high is None else high}], got {value!r}")
    return value


def _expect(value: Any) -> tuple[tuple[str, Any], ...]:
    if value is None:
        return ()
    if not isinstance(value, dict) or not value:
        raise _bad("expect", f"expect must be a mapping of {', '.join(EXPECT_KEYS)}, got {value!r}",
                   'e.g. {"mean_length": 2.8} from the head\'s model card, or vLLM\'s own log line numbers')
    out = []
    for key, v in value.items():
        if key == "source":
            continue  # _source
        if key not in EXPECT_KEYS:
            raise _bad(f"expect.{key}", f"unknown expectation {key!r} (known: {', '.join(EXPECT_KEYS)})")
        if key == "per_position":
            if not isinstance(v, (list, tuple)) or not v or any(
                    isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 <= x <= 1 for x in v):
                raise _bad("expect.per_position", f"per_position must be a list of rates in [0, 1], got {v!r}")
            if any(b > a for a, b in zip(v, v[1:])):
                raise _bad("expect.per_position", f"per_position {list(v)} rises: accepted tokens are a prefix, so "
                           "vLLM's per-position acceptance never does", "copy the rates from a vLLM "
                           "'SpecDecoding metrics' line or a model card")
            out.append((key, tuple(float(x) for x in v)))
        else:
            ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
            if not ok or (key == "acceptance" and not 0 <= v <= 1) or (key == "mean_length" and v < 1):
                raise _bad(f"expect.{key}", f"{key} must be {'a rate in [0, 1]' if key == 'acceptance' else 'a length >= 1 (bonus token included)'}, got {v!r}")
            out.append((key, float(v)))
    if not out:
        raise _bad("expect", "expect has a source but no figure (mean_length, acceptance or per_position)")
    return tuple(out)


def _source(value: Any) -> tuple[tuple[str, str], ...]:
    """expect.source: {kind: measured | model_card | user, other keys free strings}; () when absent."""
    source = value.get("source") if isinstance(value, dict) else None
    if source is None:
        return ()
    if not isinstance(source, dict) or source.get("kind") not in SOURCE_KINDS:
        raise _bad("expect.source", f"source must be a mapping with kind one of {', '.join(SOURCE_KINDS)}, got "
                   f"{source!r}", 'e.g. {kind: measured, engine: vllm, release: "0.26.0", card: H200}')
    out = [("kind", source["kind"])]
    for key, v in source.items():
        if key == "kind":
            continue
        if not isinstance(key, str) or isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise _bad(f"expect.source.{key}", f"source values are strings, got {key}: {v!r}")
        out.append((key, str(v)))
    return tuple(out)


def _canary(value: Any) -> tuple | None:
    """guard.canary: {prompts: builtin | [text, ...] | [[token id, ...], ...], tokens: int} -> (prompts, tokens)."""
    if value is None or value is False:
        return None
    if value is True:
        value = {}
    if not isinstance(value, dict):
        raise _bad("canary", f"canary must be a mapping {{prompts, tokens}}, got {value!r}",
                   'e.g. {"prompts": "builtin", "tokens": 48}')
    unknown = sorted(set(value) - set(CANARY_KEYS))
    if unknown:
        raise _bad(f"canary.{unknown[0]}", f"unknown canary key {unknown[0]!r} (known: {', '.join(CANARY_KEYS)})")
    prompts, tokens = value.get("prompts", "builtin"), value.get("tokens", 48)
    if isinstance(tokens, bool) or not isinstance(tokens, int) or not 1 <= tokens <= 4096:
        raise _bad("canary.tokens", f"tokens (generated per prompt) must be an integer in [1, 4096], got {tokens!r}")
    if prompts == "builtin":
        return ("builtin", tokens)
    ok = isinstance(prompts, (list, tuple)) and prompts and (
        all(isinstance(p, str) and p for p in prompts)
        or all(isinstance(p, (list, tuple)) and p and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0
                                                           for t in p) for p in prompts))
    if not ok:
        raise _bad("canary.prompts", f"prompts must be \"builtin\", a list of non-empty strings or a list of token-id "
                   f"lists, got {prompts!r}")
    return (tuple(p if isinstance(p, str) else tuple(p) for p in prompts), tokens)


def source_text(source: dict[str, str]) -> str:
    """'measured on vllm 0.26.0, H200 (bench/gpu/vllm_families_gpu.py, 2026-12-03)': what the SRG474 line
    says the expectation is; '' without a source."""
    if not source:
        return ""
    kind = source["kind"].replace("_", " ")
    where = " ".join(source[k] for k in ("engine", "release") if k in source)
    text = kind + (f" on {where}" if where else "") + (f", {source['card']}" if "card" in source else "")
    extra = [source[k] for k in ("by", "date", "reference") if k in source]
    return text + (f" ({', '.join(extra)})" if extra else "")


def parse_config(raw: Any) -> GuardConfig:
    """`guard:` as the user wrote it (None, a bool, or a mapping) -> GuardConfig; SRG475 on anything
    else, with the key path. Defaults from surgery/data/guard.yaml."""
    base = defaults()
    if raw is None:
        raw = {}
    elif isinstance(raw, bool):
        raw = {"enabled": raw}
    elif not isinstance(raw, dict):
        raise _bad("", f"guard must be true, false or a mapping, got {type(raw).__name__} {raw!r}")
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        import difflib

        close = difflib.get_close_matches(unknown[0], KEYS, n=1, cutoff=0.75)
        hint = f"did you mean {close[0]!r}?" if close else None
        raise _bad(unknown[0], f"unknown guard key {unknown[0]!r} (known: {', '.join(KEYS)})", hint)
    merged = {**base, **raw}
    enabled = merged.get("enabled")
    if enabled is not None and not isinstance(enabled, bool):
        raise _bad("enabled", f"enabled must be true or false, got {enabled!r}")
    action = merged.get("action")
    if action not in ACTIONS:
        raise _bad("action", f"action must be one of {', '.join(ACTIONS)}, got {action!r}",
                   "vLLM 0.32 has no switch that turns speculation off on a running engine (docs/vllm.md)")
    numbers = {k: (None if merged.get(k) is None else _number(k, merged[k])) for k in _NUMBERS}
    for k in _NUMBERS:
        if numbers[k] is None and k not in ("round_cost", "draft_cost"):
            raise _bad(k, f"{k} must be given")
    bands = merged.get("bands") or []
    if not isinstance(bands, (list, tuple)) or any(isinstance(b, bool) or not isinstance(b, int) or b < 1
                                                   for b in bands) or list(bands) != sorted(set(bands)):
        raise _bad("bands", f"bands must be rising batch sizes >= 1 (the upper edge of each band), got {bands!r}")
    if numbers["window"] < numbers["min_drafts"]:
        raise _bad("window", f"window ({numbers['window']} drafts) is smaller than min_drafts "
                   f"({numbers['min_drafts']}): no rule could ever be judged")
    if numbers["check_every"] > numbers["window"]:
        raise _bad("check_every", f"check_every ({numbers['check_every']}) is larger than the window "
                   f"({numbers['window']} drafts)")
    return GuardConfig(enabled=enabled, action=action, expect=_expect(merged.get("expect")),
                       expect_source=_source(merged.get("expect")), bands=tuple(bands),
                       canary=_canary(merged.get("canary")), **numbers)


def miniature_settings() -> dict[str, Any]:
    """The guard's settings for the built-in miniatures' short runs (`apply --ablate` rows), data/guard.yaml."""
    return dict(load_data("data/guard.yaml")["miniature"])


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


def round_cost(config: GuardConfig, method: str | None, num_spec: int, parallel: bool = False) -> tuple[float | None, str]:
    """(a speculative round's cost in plain decode steps, where it came from); (None, why) when the
    method has no documented default and none was given: the break-even rule is then off."""
    if config.round_cost is not None:
        return config.round_cost, "measured round_cost"
    sequential, parallel_table = cost_table()
    if config.draft_cost is not None:
        cost, source = config.draft_cost, "draft_cost"
    elif parallel and method in parallel_table:
        cost, source = parallel_table[method], f"default for parallel {method}"
    elif method in sequential:
        cost, source = sequential[method], f"default for {method}"
    elif method in parallel_table:
        cost, source, parallel = parallel_table[method], f"default for {method}", True
    else:
        return None, f"no default draft cost for method {method!r}"
    total = 1 + config.verify_cost + (cost if parallel else num_spec * cost)
    return total, f"{source}: 1 + {config.verify_cost:g} verify + {'1' if parallel else num_spec} x {cost:g} draft"


@dataclass
class Counts:
    """Counter totals over some drafts: what vLLM's SpecDecodingStats holds."""

    drafts: int = 0
    drafted: list[int] = field(default_factory=list)  # drafts that proposed a token at position i
    accepted: list[int] = field(default_factory=list)  # drafts whose token i was accepted

    @classmethod
    def sized(cls, positions: int) -> Counts:
        """Counts for a drafter of `positions` tokens (every position listed, drafted or not)."""
        return cls(0, [0] * positions, [0] * positions)

    def observe(self, num_draft_tokens: int, num_accepted: int) -> None:
        """One draft, as vLLM's SpecDecodingStats.observe_draft counts it."""
        need = max(num_draft_tokens, num_accepted)
        if need > len(self.drafted):
            grow = need - len(self.drafted)
            self.drafted.extend([0] * grow)
            self.accepted.extend([0] * grow)
        self.drafts += 1
        for i in range(num_draft_tokens):
            self.drafted[i] += 1
        for i in range(num_accepted):
            self.accepted[i] += 1

    def observe_n(self, num_draft_tokens: int, num_accepted: int, n: int) -> None:
        """`n` drafts alike (one step's histogram, surgery/vllm/guard.py): `observe` n times over."""
        self._fit(max(num_draft_tokens, num_accepted))
        self.drafts += n
        for i in range(num_draft_tokens):
            self.drafted[i] += n
        for i in range(num_accepted):
            self.accepted[i] += n

    def _fit(self, n: int) -> None:
        if n > len(self.drafted):
            self.drafted.extend([0] * (n - len(self.drafted)))
            self.accepted.extend([0] * (n - len(self.accepted)))

    def add(self, other: Counts, sign: int = 1) -> None:
        self._fit(len(other.drafted))
        self.drafts += sign * other.drafts
        for i, (d, a) in enumerate(zip(other.drafted, other.accepted)):
            self.drafted[i] += sign * d
            self.accepted[i] += sign * a

    # the window's numbers, in vLLM's conventions (module docstring)
    def per_position(self) -> list[float]:
        return [a / self.drafts for a in self.accepted] if self.drafts else []

    def conditional(self) -> list[float | None]:
        """c[i]: accepted at i / drafts that reached position i with i-1 accepted (None: none did)."""
        out: list[float | None] = []
        for i, (d, a) in enumerate(zip(self.drafted, self.accepted)):
            base = d if i == 0 else min(self.accepted[i - 1], d)
            out.append(a / base if base else None)
        return out

    def mean_length(self) -> float:
        return 1 + sum(self.accepted) / self.drafts if self.drafts else float("nan")

    def acceptance(self) -> float:
        drafted = sum(self.drafted)
        return sum(self.accepted) / drafted if drafted else float("nan")


NOTHING: list = []  # what most drafts produce (never appended to)


def _rates(values) -> str:
    return "[" + ", ".join("-" if v is None else f"{v:.3f}" for v in values) + "]"


@dataclass(frozen=True)
class Trip:
    """One rule starting to hold: the kind, its code, the stream it held on ("all" or a batch band),
    a sentence, and the numbers (named, for log lines, metrics and the report)."""

    kind: str
    stream: str
    message: str
    numbers: dict
    drafts_seen: int  # drafts the stream had seen in all when it tripped

    @property
    def code(self) -> str:
        return CODES[self.kind]

    def to_dict(self) -> dict:
        return {"kind": self.kind, "code": self.code, "stream": self.stream, "message": self.message,
                "numbers": self.numbers, "drafts_seen": self.drafts_seen}


@dataclass(frozen=True)
class Ended:
    """An episode ending: the rule no longer holds on the window."""

    kind: str
    stream: str
    drafts_seen: int


@dataclass
class Stream:
    """The rolling window and episodes of one stream of drafts (all drafts, or one batch-size band)."""

    name: str
    config: GuardConfig
    break_even: float | None
    positions: int = 0
    buckets: deque = field(default_factory=deque)
    window: Counts = field(default_factory=Counts)
    seen: int = 0
    reference: float | None = None  # acceptance of the first full window (drift)
    active: set = field(default_factory=set)
    clear: dict = field(default_factory=dict)  # kind -> evaluations in a row without it, while active
    last: dict | None = None  # the numbers of the last evaluation

    def __post_init__(self):
        self.window = Counts.sized(self.positions)
        # the current bucket as two histograms (drafts by drafted length, by accepted length): one
        # increment each per draft on the engine's path, per-position counts only when the bucket closes
        self.drafted_hist = [0] * (self.positions + 1)
        self.accepted_hist = [0] * (self.positions + 1)
        self.pending = 0
        self.step_counts: Counts | None = None  # drafts given as totals (observe_counts) since the last bucket

    def observe(self, num_draft_tokens: int, num_accepted: int) -> list[Trip | Ended]:
        try:
            self.drafted_hist[num_draft_tokens] += 1
            self.accepted_hist[num_accepted] += 1
        except IndexError:  # more tokens than the engine said it drafts: count it the slow way
            need = max(num_draft_tokens, num_accepted) + 1
            self.drafted_hist.extend([0] * (need - len(self.drafted_hist)))
            self.accepted_hist.extend([0] * (need - len(self.accepted_hist)))
            self.drafted_hist[num_draft_tokens] += 1
            self.accepted_hist[num_accepted] += 1
        self.seen += 1
        self.pending += 1
        if self.pending < self.config.check_every:
            return NOTHING
        return self._close()

    def observe_counts(self, counts: Counts) -> list[Trip | Ended]:
        """Many drafts at once, as per-position totals (one engine step's SpecDecodingStats): the same
        window and rules as `observe`, evaluated when at least `check_every` drafts are pending. Two feeds
        that pass the same steps make the same buckets, hence the same decisions (surgery/vllm/statlogger.py)."""
        if counts.drafts <= 0:
            return NOTHING
        self.seen += counts.drafts
        self.pending += counts.drafts
        if self.step_counts is None:
            self.step_counts = Counts.sized(self.positions)
        self.step_counts.add(counts)
        if self.pending < self.config.check_every:
            return NOTHING
        return self._close()

    def _close(self) -> list[Trip | Ended]:
        bucket = self.open_bucket()
        self.step_counts = None
        self.drafted_hist = [0] * len(self.drafted_hist)
        self.accepted_hist = [0] * len(self.accepted_hist)
        self.pending = 0
        self.buckets.append(bucket)
        self.window.add(bucket)
        while self.window.drafts - self.buckets[0].drafts >= self.config.window:
            self.window.add(self.buckets.popleft(), -1)
        return self.evaluate()

    def open_bucket(self) -> Counts:
        """The drafts since the last evaluation, as per-position counts (position i: drafts with more
        than i tokens drafted / accepted)."""
        n = len(self.drafted_hist) - 1
        out = Counts.sized(max(n, self.positions))
        out.drafts = self.pending
        drafted = accepted = 0
        for i in range(n, 0, -1):  # suffix sums
            drafted += self.drafted_hist[i]
            accepted += self.accepted_hist[i]
            out.drafted[i - 1], out.accepted[i - 1] = drafted, accepted
        if self.step_counts is not None:  # drafts given as totals: `pending` counts them already
            out.add(self.step_counts)
            out.drafts = self.pending
        return out

    def evaluate(self) -> list[Trip | Ended]:
        w, cfg = self.window, self.config
        if w.drafts < cfg.min_drafts:
            return []
        per_pos, cond = w.per_position(), w.conditional()
        mean_len, acc = w.mean_length(), w.acceptance()
        full = w.drafts >= cfg.window
        if full and self.reference is None:
            self.reference = acc
        self.last = {"drafts": w.drafts, "per_position": per_pos, "conditional": cond, "mean_length": mean_len,
                     "acceptance": acc, "seen": self.seen}
        holds: dict[str, tuple[str, dict] | None] = {k: None for k in KINDS}
        base = {"drafts": w.drafts, "per_position": _rates(per_pos), "mean_length": f"{mean_len:.2f}"}
        p0 = cond[0] if cond else None
        if p0 is not None and p0 < cfg.floor:
            holds["collapse"] = (f"position-0 acceptance {p0:.3f} is under the floor {cfg.floor:.3f} over the last "
                                 f"{w.drafts} drafts", {**base, "position0": f"{p0:.3f}", "floor": f"{cfg.floor:.3f}"})
        if self.break_even is not None and mean_len < self.break_even:
            holds["break_even"] = (f"speculation is costing throughput: mean accepted length {mean_len:.2f} is under "
                                   f"the break-even {self.break_even:.2f} over the last {w.drafts} drafts",
                                   {**base, "break_even": f"{self.break_even:.2f}"})
        holds["shape"] = self._shape(w, cond, base)
        if full and self.reference is not None and (self.reference - acc) * 100 > cfg.drift_points:
            points = (self.reference - acc) * 100
            holds["drift"] = (f"acceptance {acc:.3f} over the last {w.drafts} drafts is {points:.1f} points below the "
                              f"first full window's {self.reference:.3f} (limit {cfg.drift_points:g} points)",
                              {**base, "acceptance": f"{acc:.3f}", "reference": f"{self.reference:.3f}",
                               "points": f"{points:.1f}", "limit": f"{cfg.drift_points:g}"})
        holds["expectation"] = self._expectation(w, per_pos, mean_len, acc, base)
        out: list[Trip | Ended] = []
        for kind in KINDS:
            if holds[kind] is not None and kind not in self.active:
                self.active.add(kind)
                message, numbers = holds[kind]
                out.append(Trip(kind, self.name, message, numbers, self.seen))
            elif holds[kind] is None and kind in self.active and self._judged(kind, cond, full) \
                    and self._clear_of(kind, p0, mean_len):
                # an episode ends after `clear_after` evaluations in a row without the rule: a value
                # hovering at a threshold (position 0 at 9.8 % against a 10 % floor) is one episode
                self.clear[kind] = self.clear.get(kind, 0) + 1
                if self.clear[kind] >= cfg.clear_after:
                    self.active.discard(kind)
                    self.clear[kind] = 0
                    out.append(Ended(kind, self.name, self.seen))
            else:
                self.clear[kind] = 0
        return out

    def _clear_of(self, kind: str, p0, mean_len) -> bool:
        """Whether a rule that no longer holds is also clear of its threshold (hysteresis): collapse ends
        at position-0 acceptance >= 1.5 x the floor, below break-even at a mean accepted length >= the
        break-even + 0.1; the other rules at their threshold."""
        if kind == "collapse":
            return p0 is not None and p0 >= self.config.floor * 1.5
        if kind == "break_even":
            return self.break_even is not None and mean_len >= self.break_even + 0.1
        return True

    def _judged(self, kind: str, cond, full: bool) -> bool:
        """Whether this evaluation could see the rule at all (an episode ends only on a real 'no')."""
        if kind == "drift":
            return full
        if kind == "break_even":
            return self.break_even is not None
        if kind == "shape":  # no neighbours with enough support: not seen, the episode goes on
            w = self.window
            return any(min(w.accepted[i], w.drafted[i + 1]) >= self.config.min_support
                       for i in range(len(w.accepted) - 1))
        return True

    def _shape(self, w: Counts, cond, base) -> tuple[str, dict] | None:
        cfg = self.config
        for i in range(len(cond) - 1):
            a, b = cond[i], cond[i + 1]
            support = min(w.accepted[i], w.drafted[i + 1])
            if a is None or b is None or support < cfg.min_support:
                continue
            if b > a + cfg.shape_margin:
                what, rule = "inversion", f"more than {cfg.shape_margin:.2f} above"
            elif b < a * cfg.cliff_ratio:
                what, rule = "cliff", f"under {cfg.cliff_ratio:.2f} x"
            else:
                continue
            return (f"a {what} between positions {i} and {i + 1}: conditional acceptance {b:.3f} at position {i + 1} "
                    f"is {rule} position {i}'s {a:.3f} over the last {w.drafts} drafts ({support} drafts reached "
                    f"position {i + 1}); the signature of a wiring fault at depth {i + 1}",
                    {**base, "shape": what, "position": i + 1, "conditional": _rates(cond), "rate": f"{b:.3f}",
                     "previous": f"{a:.3f}"})
        return None

    def _expectation(self, w: Counts, per_pos, mean_len, acc, base) -> tuple[str, dict] | None:
        cfg = self.config
        misses = expectation_misses(w, cfg)
        if not misses:
            return None
        source = source_text(cfg.source)
        detail = "; ".join(misses) + (f", expected as {source}" if source else "")
        return (f"{detail} (tolerance {cfg.expect_tolerance:g}) over the last {w.drafts} drafts",
                {**base, "detail": detail, "tolerance": f"{cfg.expect_tolerance:g}"})


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def wilson_upper(successes: float, n: int, z: float) -> float:
    """The upper end of the Wilson score interval of a rate seen as `successes` of `n`, at `z` (1.0 when n is 0).

    Why: the expectation rule and the canary judge small supports (a miniature's 64-draft window, a canary's
    ~100 drafts), where a healthy rate reads well under its long-run value by chance (the healthy mtp pair's
    position 2 at 44/64 = 0.688 against 0.824 x 0.85 = 0.700). A rule trips only when even the upper end of
    the interval is under the threshold: the more drafts, the tighter the bound. Wilson rather than the
    normal interval: it stays inside [0, 1] and keeps its width at rates near 0 or 1 and small n."""
    if n <= 0:
        return 1.0
    p = min(max(successes / n, 0.0), 1.0)
    z2 = z * z
    centre = p + z2 / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return min(1.0, (centre + spread) / (1 + z2 / n))


def length_upper(mean_len: float, k: int, n: int, z: float) -> float:
    """The Wilson upper end of a mean accepted length (bonus token in) over `n` drafts of `k` tokens: that of the
    mean of each draft's accepted tokens / k, a value in [0, 1] (expectation_misses says why it is a bound)."""
    return 1 + k * wilson_upper((mean_len - 1) / k * n, n, z)


def _miss(said: str, upper: float, want: float, factor: float, z: float, show=None, show_want=None) -> str | None:
    """'<said> under expected <want> x <factor> = <limit> (upper bound <upper> at z <z>)' when even the support
    bound's upper end is under expected x factor; None when it is not (one rule for every figure)."""
    limit = want * factor
    if upper >= limit:
        return None
    show = show or _pct
    return (f"{said} under expected {(show_want or show)(want)} x {factor:g} = {show(limit)} (upper bound "
            f"{show(upper)} at z {z:g})")


def expectation_misses(w: Counts, cfg: GuardConfig) -> list[str]:
    """The expectations (cfg.expect) the drafts in `w` miss beyond the support bound: observed under expected x
    (1 - expect_tolerance) with the Wilson upper end (z = expect_z) for the support still under it. Counts only.

    The support of each figure, as a rate in [0, 1] over `w.drafts` drafts:
    - per_position[i]: drafts accepted at position i of all drafts (a binomial count);
    - acceptance: accepted / drafted tokens, as the mean of each draft's accepted fraction over the drafts (a
      draft's tokens are not independent: the drafts, not the tokens, are the support);
    - mean_length: (mean length - 1) / k, the mean of each draft's accepted tokens / k over the drafts.
    For the last two the Wilson bound is that of a mean of values in [0, 1] (variance at most p (1 - p)):
    wider than needed, never narrower. Drafts of one request are correlated, so the bound is a floor on the
    noise, not a test level: the tolerance keeps covering what differs between runs (prompts, dtype, card)."""
    factor, z, n = 1 - cfg.expect_tolerance, cfg.expect_z, w.drafts
    if n <= 0:
        return []
    misses = []
    for key, want in cfg.expect:
        if key == "per_position":
            for i, target in enumerate(want[:len(w.accepted)]):
                a = w.accepted[i]
                miss = _miss(f"position {i} accepted {_pct(a / n)} ({a}/{n})", wilson_upper(a, n, z), target, factor, z)
                if miss:
                    misses.append(miss)
                    break
        elif key == "acceptance" and sum(w.drafted):
            drafted = sum(w.drafted)
            acc = sum(w.accepted) / drafted
            miss = _miss(f"acceptance {_pct(acc)} ({sum(w.accepted)}/{drafted} drafted tokens in {n} drafts)",
                         wilson_upper(acc * n, n, z), want, factor, z)
            misses += [miss] if miss else []
        elif key == "mean_length" and w.accepted:
            mean_len = 1 + sum(w.accepted) / n
            upper = length_upper(mean_len, len(w.accepted), n, z)
            miss = _miss(f"mean accepted length {mean_len:.2f} over {n} drafts", upper, want, factor, z,
                         show=lambda x: f"{x:.2f}", show_want=lambda x: f"{x:g}")
            misses += [miss] if miss else []
    return misses


def judge_once(guard: "Guard", counts: Counts, stream: str = "canary") -> list[Trip]:
    """One judgement of a fixed set of drafts (the start-up canary, `surgery audit --guard`): no window, no
    episodes, and no min_drafts: the support bound stands in for it, so a few dozen drafts are judged, but only
    a clear miss trips. Rules:
    - collapse: position 0's Wilson upper end (z = expect_z) under the floor;
    - break_even: the mean length's upper end under the break-even (when the rule is on);
    - expectation: `expectation_misses`, as on the live window.
    Shape and drift need a window (support per position, a first full window): not judged here."""
    cfg, n = guard.config, counts.drafts
    if n <= 0:
        return []
    z, k = cfg.expect_z, len(counts.accepted)
    per_pos = counts.per_position()
    mean_len = counts.mean_length()
    base = {"drafts": n, "per_position": _rates(per_pos), "mean_length": f"{mean_len:.2f}"}
    out = []
    if k:
        a0 = counts.accepted[0]
        upper = wilson_upper(a0, n, z)
        if upper < cfg.floor:
            out.append(Trip("collapse", stream, f"position 0 accepted {_pct(a0 / n)} ({a0}/{n}) under the floor "
                            f"{_pct(cfg.floor)} (upper bound {_pct(upper)} at z {z:g}) over {n} drafts",
                            {**base, "position0": f"{a0 / n:.3f}", "floor": f"{cfg.floor:.3f}"}, n))
        if guard.break_even is not None:
            upper = length_upper(mean_len, k, n, z)
            if upper < guard.break_even:
                out.append(Trip("break_even", stream, f"mean accepted length {mean_len:.2f} under the break-even "
                                f"{guard.break_even:.2f} (upper bound {upper:.2f} at z {z:g}) over {n} drafts",
                                {**base, "break_even": f"{guard.break_even:.2f}"}, n))
    misses = expectation_misses(counts, cfg)
    if misses:
        source = source_text(cfg.source)
        detail = "; ".join(misses) + (f", expected as {source}" if source else "")
        out.append(Trip("expectation", stream, f"{detail} over {n} drafts",
                        {**base, "detail": detail, "tolerance": f"{cfg.expect_tolerance:g}"}, n))
    return out


def band_name(batch: int, bands: tuple[int, ...]) -> str:
    low = 1
    for edge in bands:
        if batch <= edge:
            return f"batch {low}" if low == edge else f"batch {low}-{edge}"
        low = edge + 1
    return f"batch {low}+"


class Guard:
    """All streams of one engine: "all" plus one per batch-size band (config.bands).

    `observe(num_draft_tokens, num_accepted, batch)` per draft, as the engine counts it; returns the
    trips and episode ends that draft's evaluation produced (usually none: evaluations run every
    `check_every` drafts)."""

    def __init__(self, config: GuardConfig, num_spec: int, method: str | None = None, parallel: bool = False):
        self.config, self.num_spec, self.method = config, num_spec, method
        self.break_even, self.cost_source = round_cost(config, method, num_spec, parallel)
        expect = config.expectations.get("per_position")
        if expect is not None and len(expect) > num_spec:
            raise _bad("expect.per_position", f"per_position has {len(expect)} rates but the engine drafts "
                       f"{num_spec} tokens per step")
        self.streams: dict[str, Stream] = {"all": self._stream("all")}
        self.band_streams: dict[int, Stream] = {}  # batch size -> its band's stream
        self.trips: list[Trip] = []

    def _stream(self, name: str) -> Stream:
        return Stream(name, self.config, self.break_even, self.num_spec)

    def _band(self, batch: int) -> Stream:
        """The stream of the band this batch size falls in (made on first use, then looked up by batch size)."""
        stream = self.band_streams.get(batch)
        if stream is None:
            name = band_name(batch, self.config.bands)
            stream = self.streams.get(name) or self.streams.setdefault(name, self._stream(name))
            self.band_streams[batch] = stream
        return stream

    def observe(self, num_draft_tokens: int, num_accepted: int, batch: int | None = None) -> list[Trip | Ended]:
        out = self.streams["all"].observe(num_draft_tokens, num_accepted)
        if self.config.bands and batch:
            more = self._band(batch).observe(num_draft_tokens, num_accepted)
            if more:
                out = out + more
        if out:
            self.trips.extend(t for t in out if isinstance(t, Trip))
        return out

    def observe_counts(self, counts: Counts, batch: int | None = None) -> list[Trip | Ended]:
        """One engine step's drafts as totals (vLLM's SpecDecodingStats of the step); `batch` for the bands
        (the step's drafts, by default)."""
        out = self.streams["all"].observe_counts(counts)
        batch = counts.drafts if batch is None else batch
        if self.config.bands and batch:
            more = self._band(batch).observe_counts(counts)
            if more:
                out = out + more
        if out:
            self.trips.extend(t for t in out if isinstance(t, Trip))
        return out

    def to_dict(self) -> dict:
        """The guard's record: configuration, trips so far, the last numbers of each stream."""
        cfg = self.config
        return {"action": cfg.action, "floor": cfg.floor, "min_drafts": cfg.min_drafts, "window": cfg.window,
                "check_every": cfg.check_every, "break_even": self.break_even, "cost": self.cost_source,
                "expect": cfg.expectations or None, "expect_source": cfg.source or None, "num_spec": self.num_spec, "method": self.method,
                "trips": [t.to_dict() for t in self.trips],
                "streams": {n: {"drafts_seen": s.seen, "active": sorted(s.active), "last": s.last,
                                "reference_acceptance": s.reference} for n, s in self.streams.items()}}
