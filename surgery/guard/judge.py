"""The guard's judging: counter streams in, trips out (windows, episodes, bounds, trips). No engine, no clock.

Why: every other check looks at configs, headers or live wiring before the first request; the field's
remaining failures show only while serving (acceptance 1.2 % instead of 58.9 %, vllm#50170; a decay
to 0, vllm-ascend#13523; a cliff at position 1, vllm#42004). The engines count drafts and accepted
tokens per position but nothing reads those counts against an expectation. This module does, for any
engine: an integration feeds it the engine's own counts (vLLM: each step's drafts from the scheduler's per-step
data, surgery/vllm/guard.py; SGLang: each verify's accept count, surgery/sglang/guard.py) and logs / records / acts
on what it returns.

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

from collections import deque
from dataclasses import dataclass, field

from .bounds import length_upper, pct, wilson_upper
from .counts import Counts
from .expectation import expectation_misses, source_text
from .keys import CODES, KINDS, invalid
from .settings import GuardConfig, cost_table


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
            self._grow(max(num_draft_tokens, num_accepted))
            self.drafted_hist[num_draft_tokens] += 1
            self.accepted_hist[num_accepted] += 1
        self.seen += 1
        self.pending += 1
        if self.pending < self.config.check_every:
            return NOTHING
        return self._close()

    def _grow(self, tokens: int) -> None:
        """Room in the bucket's histograms for drafts of up to `tokens` tokens."""
        need = tokens + 1
        self.drafted_hist.extend([0] * (need - len(self.drafted_hist)))
        self.accepted_hist.extend([0] * (need - len(self.accepted_hist)))

    def observe_step(self, hist: dict, drafts: int) -> list[Trip | Ended]:
        """One engine step's `drafts` drafts as {(drafted, accepted): n} (surgery/vllm/guard.py step_drafts): each
        counted as `observe` counts a draft, the bucket closed at the end of the step as `observe_counts` closes
        it, so the same steps give the same buckets and decisions either way (the API server's stat logger gets
        them as totals, surgery/vllm/statlogger.py)."""
        if drafts <= 0:
            return NOTHING
        drafted_hist, accepted_hist = self.drafted_hist, self.accepted_hist
        for (drafted, accepted), n in hist.items():
            if drafted >= len(drafted_hist) or accepted >= len(accepted_hist):
                self._grow(max(drafted, accepted))
                drafted_hist, accepted_hist = self.drafted_hist, self.accepted_hist
            drafted_hist[drafted] += n
            accepted_hist[accepted] += n
        self.seen += drafts
        self.pending += drafts
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
            out.append(Trip("collapse", stream, f"position 0 accepted {pct(a0 / n)} ({a0}/{n}) under the floor "
                            f"{pct(cfg.floor)} (upper bound {pct(upper)} at z {z:g}) over {n} drafts",
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
            raise invalid("expect.per_position", f"per_position has {len(expect)} rates but the engine drafts "
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

    def _judge(self, batch: int | None, feed) -> list[Trip | Ended]:
        """`feed(stream)` on the "all" stream and, with bands, on the stream of `batch`'s band; the trips kept."""
        out = feed(self.streams["all"])
        if self.config.bands and batch:
            more = feed(self._band(batch))
            if more:
                out = out + more
        if out:
            self.trips.extend(t for t in out if isinstance(t, Trip))
        return out

    def observe(self, num_draft_tokens: int, num_accepted: int, batch: int | None = None) -> list[Trip | Ended]:
        return self._judge(batch, lambda stream: stream.observe(num_draft_tokens, num_accepted))

    def observe_counts(self, counts: Counts, batch: int | None = None) -> list[Trip | Ended]:
        """One engine step's drafts as totals (vLLM's SpecDecodingStats of the step); `batch` for the bands
        (the step's drafts, by default)."""
        return self._judge(counts.drafts if batch is None else batch, lambda stream: stream.observe_counts(counts))

    def observe_step(self, hist: dict) -> list[Trip | Ended]:
        """One engine step's drafts as {(drafted, accepted): n} (vLLM's scheduler, surgery/vllm/guard.py): the same
        buckets and decisions as `observe_counts` of the step's totals; the bands' batch is the step's drafts."""
        drafts = sum(hist.values())
        return self._judge(drafts, lambda stream: stream.observe_step(hist, drafts))

    def to_dict(self) -> dict:
        """The guard's record: configuration, trips so far, the last numbers of each stream."""
        cfg = self.config
        return {"action": cfg.action, "floor": cfg.floor, "min_drafts": cfg.min_drafts, "window": cfg.window,
                "check_every": cfg.check_every, "break_even": self.break_even, "cost": self.cost_source,
                "expect": cfg.expectations or None, "expect_source": cfg.source or None, "num_spec": self.num_spec, "method": self.method,
                "trips": [t.to_dict() for t in self.trips],
                "streams": {n: {"drafts_seen": s.seen, "active": sorted(s.active), "last": s.last,
                                "reference_acceptance": s.reference} for n, s in self.streams.items()}}
