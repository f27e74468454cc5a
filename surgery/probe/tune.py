"""`surgery probe RECIPE --tune`: the draft length (`num_speculative_tokens`) chosen by measurement on the
user's own pair, prompts and engine (issue 66), with an interval, written the way the engine takes it.

The model (the standard one: Leviathan et al. 2023, Chen et al. 2023). With p_j the share of rounds whose
j-th drafted token is accepted (vLLM's `num_accepted_tokens_per_pos[j-1] / num_drafts`; accepted tokens are
a prefix, so p_j = prod_{i<=j} a_i with a_i the conditional acceptance at position i), a round of k drafted
tokens yields

    E(k) = 1 + sum_{j=1..k} p_j             tokens per target forward (the accepted prefix + the bonus token)

and costs R(k) = V + k * D (one verify forward, k draft steps). Plain decoding costs T0 per token, so

    S(k) = E(k) / (R(k) / T0)               the expected speed-up over plain decoding at draft length k.

What is measured, on the engine the user serves with (vLLM, one request at a time, greedy, the probe's
prompts), each prompt timed twice on the same engine, once for one token (prefill and the call's own cost)
and once for N tokens, the difference being the decode phase alone:
- plain: the target alone (no draft): T0 = decode time / (N - 1);
- the pair at k = 1 and at k = k_max, the recipe applied and verified as in the probe (SRG497 otherwise):
  R(k) = decode time / rounds (vLLM's num_drafts over the N-token call), and, from the k_max run, p_j for
  every j <= k_max: E(k) for every k <= k_max comes from measured positions, none extrapolated;
- V and D: the line through R(1) and R(k_max) (D, the slope, is a draft step plus the verify's cost of one
  more token; V the verify of one token plus the round's fixed cost). Why two points: one run cannot split
  a round between verifying and drafting; a third point would test the line but costs an engine start
  (bench/gpu/tune_sweep_gpu.py measures every k and checks the recommendation against it).

The interval: a paired bootstrap over prompts (the same resampled prompt indices for the three engines;
BOOTSTRAP resamples, seeded): per k, S(k)'s 95 % interval and how often k is the best; the recommendation's
interval is the 2.5 and 97.5 percentiles of the best k over the resamples. Acceptance noise (how many
rounds accept) and timing noise (how long they take) are both in it.

Limits, said in the report: one request at a time (under concurrency the verify forward costs more per round
and the best k falls), greedy decoding, these prompts; a block drafter (DFlash, DSpark) drafts at most its
trained block.
"""
from __future__ import annotations

import json
import random
import time
from statistics import median
from dataclasses import dataclass, field
from pathlib import Path

from ..text.diagnostics import EXIT_INVALID, EXIT_OK, Location, diag
from .measure import error_text, release
from .measure_vllm import cpu_engine_env, not_applied
from .regression import ModeOptions

K_MAX = 6
BOOTSTRAP = 2000
SEED = 0
# vLLM method -> SGLang's --speculative-algorithm (surgery/sglang/guard.py METHODS, the other way round)
SGLANG_ALGORITHMS = {"eagle": "EAGLE", "eagle3": "EAGLE3", "mtp": "NEXTN", "deepseek_mtp": "NEXTN",
                     "draft_model": "STANDALONE", "dflash": "DFLASH", "dspark": "DSPARK"}
BLOCK_METHODS = ("dflash", "dspark")  # one forward drafts the whole block: k <= block_size - 1
BLOCK_ALGORITHMS = ("DFLASH", "DSPARK")  # SGLang: --speculative-num-draft-tokens is the block (bonus + k)


@dataclass(frozen=True)
class TuneOptions(ModeOptions):
    """`surgery probe --tune`'s options: the shared ones (regression.py ModeOptions) and the longest draft."""
    k_max: int = K_MAX


@dataclass
class Run:
    """One engine's per-prompt figures (k = 0: the target alone)."""
    k: int
    tokens: int
    first_s: list[float] = field(default_factory=list)  # the 1-token call per prompt
    full_s: list[float] = field(default_factory=list)  # the N-token call per prompt
    rounds: list[int] = field(default_factory=list)  # draft rounds (vLLM num_drafts) in the N-token call
    per_position: list[list[int]] = field(default_factory=list)  # accepted at position 1..k, per prompt
    drafted: list[int] = field(default_factory=list)
    verified: bool | None = None
    error: str | None = None
    start_s: float | None = None  # engine start (reported, never used by the model)

    def to_dict(self) -> dict:
        n = len(self.full_s)
        out = {"k": self.k, "tokens": self.tokens, "prompts": n, "verified": self.verified, "error": self.error,
               "start_s": _r(self.start_s), "first_s": [_r(x) for x in self.first_s],
               "full_s": [_r(x) for x in self.full_s], "rounds": self.rounds, "drafted": self.drafted,
               "per_position": self.per_position}
        if n and not self.error:  # per request, the median over the prompts (fit's reason); pooled beside it
            out["throughput_tok_s"] = _r(median(self.tokens / max(1e-12, t) for t in self.full_s), 2)
            out["decode_tok_s"] = _r(median((self.tokens - 1) / max(1e-12, f - s) for f, s in zip(self.full_s, self.first_s)), 2)
            out["throughput_tok_s_pooled"] = _r(n * self.tokens / sum(self.full_s), 2)
            if self.k and sum(self.rounds):
                acc = [sum(p[j] for p in self.per_position) for j in range(self.k)]
                out["acceptance_length"] = _r(1 + sum(acc) / sum(self.rounds), 4)
                out["per_position_rate"] = [_r(a / sum(self.rounds), 4) for a in acc]
        return out


    @classmethod
    def from_dict(cls, d: dict) -> "Run":
        """A run back from its to_dict (a recorded sweep analysed again: bench/gpu/tune_sweep_gpu.py --reanalyse)."""
        return cls(k=d["k"], tokens=d["tokens"], first_s=list(d["first_s"]), full_s=list(d["full_s"]),
                   rounds=list(d["rounds"]), per_position=[list(x) for x in d["per_position"]],
                   drafted=list(d["drafted"]), verified=d.get("verified"), error=d.get("error"), start_s=d.get("start_s"))


def _r(x, nd: int = 6):
    return None if x is None else round(float(x), nd)


# --------------------------------------------------------------------------- the model (pure)

def tokens_per_round(p: list[float], k: int) -> float:
    """E(k) = 1 + sum_{j<=k} p_j: the accepted prefix plus the target's own token."""
    return 1.0 + sum(p[:k])


def conditional(p: list[float]) -> list[float]:
    """a_i = p_i / p_{i-1} (p_0 = 1): the acceptance at position i given every earlier one was accepted."""
    out, prev = [], 1.0
    for x in p:
        out.append(x / prev if prev > 0 else 0.0)
        prev = x
    return out


def fit(plain: Run, lo: Run, hi: Run, idx: list[int] | None = None) -> dict:
    """T0, R(k_lo), R(k_hi), V, D and p_1..p_{k_hi} over the prompts `idx` (a bootstrap resample; all by
    default). The times are medians over the prompts of each prompt's decode time per token (T0) or per round
    (R): timing noise on a shared machine is one-sided (a stall only adds time; on the loaded 2-core
    development machine one prompt in eight took 10x its neighbours), and a mean lets one stall move the
    recommendation. The acceptance is a ratio of sums (counts have no such tail)."""
    idx = list(range(len(hi.full_s))) if idx is None else idx

    def per(run: Run, unit) -> float:
        return median([max(0.0, run.full_s[i] - run.first_s[i]) / max(1, unit(i)) for i in idx])

    t0 = per(plain, lambda i: plain.tokens - 1)
    r_lo = per(lo, lambda i: lo.rounds[i])
    r_hi = per(hi, lambda i: hi.rounds[i])
    d = max(0.0, (r_hi - r_lo) / (hi.k - lo.k)) if hi.k != lo.k else 0.0  # a draft step never costs < 0
    v = max(1e-12, r_lo - lo.k * d)
    rounds = sum(hi.rounds[i] for i in idx)
    p = [sum(hi.per_position[i][j] for i in idx) / rounds if rounds else 0.0 for j in range(hi.k)]
    return {"t0": t0, "r_lo": r_lo, "r_hi": r_hi, "verify": v, "draft": d, "p": p}


def speedups(f: dict, k_max: int) -> list[float]:
    """S(k) for k = 1..k_max."""
    return [tokens_per_round(f["p"], k) * f["t0"] / (f["verify"] + k * f["draft"]) for k in range(1, k_max + 1)]


def best_k(s: list[float]) -> int:
    """The k (1-based) with the highest expected speed-up; the smaller k on a tie (less work per round)."""
    return max(range(len(s)), key=lambda i: (s[i], -i)) + 1


def percentile(sorted_xs: list, q: float):
    return sorted_xs[min(len(sorted_xs) - 1, max(0, int(q * len(sorted_xs))))]


def analyse(plain: Run, lo: Run, hi: Run, boot: int = BOOTSTRAP, seed: int = SEED) -> dict:
    """The recommendation: the point estimate per k, the paired bootstrap over prompts, the best k's interval."""
    k_max = hi.k
    point = fit(plain, lo, hi)
    s = speedups(point, k_max)
    k_best = best_k(s)
    n = len(hi.full_s)
    rng = random.Random(seed)
    samples, picks = [[] for _ in range(k_max)], []
    for _ in range(boot):
        idx = [rng.randrange(n) for _ in range(n)]
        sb = speedups(fit(plain, lo, hi, idx), k_max)
        for j, x in enumerate(sb):
            samples[j].append(x)
        picks.append(best_k(sb))
    picks.sort()
    share = {k: picks.count(k) / boot for k in range(1, k_max + 1)}
    rows = []
    for k in range(1, k_max + 1):
        ss = sorted(samples[k - 1])
        rows.append({"k": k, "tokens_per_forward": round(tokens_per_round(point["p"], k), 4),
                     "round_s": point["verify"] + k * point["draft"], "speedup": round(s[k - 1], 4),
                     "interval": [round(percentile(ss, 0.025), 4), round(percentile(ss, 0.975), 4)],
                     "best_share": round(share[k], 4)})
    measured_lo = tokens_per_round([sum(lo.per_position[i][j] for i in range(n)) / max(1, sum(lo.rounds))
                                    for j in range(lo.k)], lo.k)
    # the guard's break-even rule in its own unit (docs/vllm.md: a speculative step's time in plain decode steps)
    guard = {"round_cost": round((point["verify"] + k_best * point["draft"]) / point["t0"], 3),
             "draft_cost": round(point["draft"] / point["t0"], 3)} if point["t0"] > 0 else {}
    return {"k": k_best, "interval": [percentile(picks, 0.025), percentile(picks, 0.975)], "guard": guard,
            "speedup": round(s[k_best - 1], 4), "rows": rows, "k_max": k_max, "bootstrap": boot, "prompts": n,
            "plain_step_s": point["t0"], "verify_s": point["verify"], "draft_step_s": point["draft"],
            "round_s": {str(lo.k): point["r_lo"], str(hi.k): point["r_hi"]},
            "per_position": [round(x, 4) for x in point["p"]],
            "conditional": [round(x, 4) for x in conditional(point["p"])],
            # the k_lo run's own tokens per forward against what the k_max run's p_1 predicts for it: the
            # positions a shorter draft shares with a longer one accept alike (the model's assumption)
            "check_k_lo": {"k": lo.k, "measured_tokens_per_forward": round(measured_lo, 4),
                           "predicted": round(tokens_per_round(point["p"], lo.k), 4)}}


# --------------------------------------------------------------------------- the engine's flags

def engine_flags(k: int, method: str | None, draft: str) -> dict:
    """The recommendation as each engine takes it."""
    spec = {"model": str(draft), "num_speculative_tokens": k}
    if method:
        spec = {"model": str(draft), "method": method, "num_speculative_tokens": k}
    out = {"vllm": f"--speculative-config '{json.dumps(spec)}'"}
    algo = SGLANG_ALGORITHMS.get(method or "")
    if algo in BLOCK_ALGORITHMS:
        out["sglang"] = (f"--speculative-algorithm {algo} --speculative-draft-model-path {draft} "
                         f"--speculative-num-draft-tokens {k + 1}")  # the block: the bonus token + k drafted
    elif algo:
        out["sglang"] = (f"--speculative-algorithm {algo} --speculative-draft-model-path {draft} "
                         f"--speculative-num-steps {k} --speculative-eagle-topk 1 --speculative-num-draft-tokens {k + 1}")
    return out


def block_cap(draft: Path, method: str | None) -> int | None:
    """A block drafter's largest k (its trained block less the bonus token), None when unbounded or unknown."""
    if method not in BLOCK_METHODS:
        return None
    try:
        cfg = json.loads((Path(draft) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    block = cfg.get("block_size") or (cfg.get("dflash_config") or {}).get("block_size")
    return int(block) - 1 if isinstance(block, int) and block > 1 else None


# --------------------------------------------------------------------------- measuring on vLLM

class VLLMTimer:
    """Times the N-token decode per prompt on a live vLLM engine, the pair's recipe applied and verified
    (the probe's measurer's rule: SRG497 for an engine the recipe never reached)."""

    engine = "vllm"

    def __init__(self, recipe, target, draft, method: str | None, spec_extra: dict | None = None):
        self.recipe, self.target, self.draft, self.method, self.spec_extra = recipe, target, draft, method, spec_extra
        self.release = release("vllm")

    def run(self, k: int, prompts: list[list[int]], tokens: int) -> Run:
        """k = 0: the target alone. One warm-up decode first (the engine's first call pays its lazy set-up)."""
        cpu_engine_env()
        from ..vllm import engine, hooks, plugin, state

        def counts(llm) -> dict:  # vLLM's spec-decode counters, as integers (engine.spec_counters)
            c = engine.spec_counters(llm)
            return {"drafts": int(c.get("num_drafts") or 0), "drafted": int(c.get("num_draft_tokens") or 0),
                    "accepted": int(c.get("num_accepted_tokens") or 0),
                    "per_position": [int(x) for x in c.get("num_accepted_tokens_per_pos") or []]}

        out, live = Run(k=k, tokens=tokens), {}
        if k:
            try:
                plugin.register()
            except Exception as exc:  # noqa: BLE001 - a recipe the plugin refuses is this run's finding
                out.error = error_text(exc)
                return out

        def grab(proposer, target_model):
            live["proposer"] = proposer

        t = time.perf_counter()
        if k:
            hooks.install_load_model_hook(grab, when="after")
        try:
            kw = engine.engine_kwargs(self.target, self.draft if k else None, self.method if k else None,
                                      (self.recipe.file or self.recipe.name) if k else None, k or 1,
                                      self.spec_extra if k else None)
            llm = engine.start_engine(**kw)
        except Exception as exc:  # noqa: BLE001 - an engine that does not start is a finding, not a traceback
            out.error = error_text(exc)
            return out
        finally:
            if k:
                hooks.remove_hook(grab)
        out.start_s = time.perf_counter() - t
        try:
            if k:
                st = state.get(live.get("proposer"))
                v = st.verification if st is not None else None
                out.verified = v.ok if v is not None else None
                if v is None:
                    out.error = not_applied(st)
                    return out
            engine.generate(llm, [prompts[0]], tokens)  # warm-up, not counted
            for ids in prompts:
                t = time.perf_counter()
                engine.generate(llm, [ids], 1)
                out.first_s.append(time.perf_counter() - t)
                before = counts(llm) if k else None
                t = time.perf_counter()
                engine.generate(llm, [ids], tokens)
                out.full_s.append(time.perf_counter() - t)
                if k:
                    after = counts(llm)
                    if not after["per_position"] and after["accepted"] > before["accepted"]:
                        out.error = "the engine counts accepted tokens but not per position (no per-position counters)"
                        break
                    pos = [a - b for a, b in zip(after["per_position"], before["per_position"] + [0] * k)]
                    out.rounds.append(after["drafts"] - before["drafts"])
                    out.drafted.append(after["drafted"] - before["drafted"])
                    out.per_position.append((pos + [0] * k)[:k])
        except Exception as exc:  # noqa: BLE001 - a decode that fails is this run's finding
            out.error = error_text(exc)
        finally:
            engine.shutdown(llm)
        return out


def tune(timer, prompts: list[list[int]], tokens: int, k_max: int = K_MAX, k_lo: int = 1,
         progress=lambda m: None, boot: int = BOOTSTRAP) -> dict:
    """The three runs (target alone, k_lo, k_max) and the recommendation; `error` when a run failed."""
    runs = {}
    for k in (0, k_lo, k_max):
        progress(f"tune: {'the target alone' if k == 0 else f'k={k}'}")
        runs[k] = timer.run(k, prompts, tokens)
        if runs[k].error:
            return {"error": f"k={k}: {runs[k].error}", "runs": [r.to_dict() for r in runs.values()]}
        if k and not sum(runs[k].rounds):
            return {"error": f"k={k}: the engine drafted nothing (no spec-decode rounds counted)",
                    "runs": [r.to_dict() for r in runs.values()]}
    result = analyse(runs[0], runs[k_lo], runs[k_max], boot=boot)
    result["runs"] = [r.to_dict() for r in runs.values()]
    return result


def findings(result: dict, where: Location) -> list:
    """SRG547 (the best k is the largest tried: a longer draft may be better still), SRG548 (no k is faster
    than plain decoding, beyond the bootstrap's upper end)."""
    out = []
    if result.get("error"):
        return [diag("SRG546", result["error"], where)]
    if result["k"] == result["k_max"] and not result.get("capped"):
        out.append(diag("SRG547", f"the best k is {result['k']}, the largest measured: raise --k-max to see whether "
                        "a longer draft is faster still", where))
    best = max(result["rows"], key=lambda r: r["interval"][1])
    if best["interval"][1] < 1.0:
        out.append(diag("SRG548", f"no draft length is faster than the target alone on this engine: the best upper "
                        f"bound is {best['interval'][1]:.2f}x at k={best['k']}", where))
    return out


def run_tune(opts: TuneOptions, out, recipe, target: Path, draft: Path, method: str | None, spec_extra, prompts,
             source: str, progress=lambda m: None) -> int:
    """`surgery probe --tune`: measure, recommend, render (text or JSON). Exit 1 when the pair could not be
    measured (SRG546), 0 otherwise."""
    where = Location(file=str(Path(draft) / "config.json"))
    cap = block_cap(draft, method)
    capped = cap is not None and cap < opts.k_max
    k_max = min(opts.k_max, cap) if capped else opts.k_max
    timer = VLLMTimer(recipe, target, draft, method, spec_extra)
    result = tune(timer, prompts, opts.tokens, k_max=k_max, k_lo=1, progress=progress) if k_max > 1 else \
        {"error": f"k_max {k_max}: the tune needs two draft lengths (--k-max >= 2)"}
    result.update({"engine": "vllm", "release": timer.release, "capped": capped, "block_cap": cap,
                   "prompts_source": source, "tokens": opts.tokens, "method": method, "draft": str(draft)})
    if not result.get("error"):
        result["flags"] = engine_flags(result["k"], method, str(draft))
    result["diagnostics"] = [d.to_dict() for d in findings(result, where)]
    if opts.acceptance_csv and not result.get("error"):
        hi = next(r for r in result["runs"] if r["k"] == k_max)
        per = [sum(p[j] for p in hi["per_position"]) for j in range(k_max)]
        opts.write_acceptance(result, sum(hi["rounds"]), sum(hi["drafted"]), sum(per), per)
    return opts.emit(out, result, render, EXIT_INVALID if result.get("error") else EXIT_OK)


def render(r: dict) -> str:
    lines = [f"tune on {r['engine']} {r.get('release') or ''}: {r.get('prompts', '?')} prompts ({r['prompts_source']}), "
             f"{r['tokens']} tokens each, one request at a time"]
    if r.get("error"):
        for d in r["diagnostics"]:
            lines.append(f"{d['severity']} {d['code']}: {d['message']}")
        return "\n".join(lines)
    ms = 1e3
    lines += [f"measured: plain step {r['plain_step_s'] * ms:.3f} ms; round = verify {r['verify_s'] * ms:.3f} ms + "
              f"k x draft {r['draft_step_s'] * ms:.3f} ms (the line through k={'/'.join(r['round_s'])}: "
              + ", ".join(f"{v * ms:.3f} ms" for v in r["round_s"].values()) + ")",
              "acceptance per position (k_max run): " + ", ".join(f"{x:.2f}" for x in r["per_position"])
              + "  conditional: " + ", ".join(f"{x:.2f}" for x in r["conditional"]),
              "", "   k  tokens/forward  speed-up  95 % interval   best in"]
    for row in r["rows"]:
        mark = " <" if row["k"] == r["k"] else ""
        lines.append(f"  {row['k']:2d}  {row['tokens_per_forward']:14.2f}  {row['speedup']:7.2f}x  "
                     f"[{row['interval'][0]:.2f}, {row['interval'][1]:.2f}]  {row['best_share']:6.1%}{mark}")
    lo, hi = r["interval"]
    lines += ["", f"recommended: num_speculative_tokens = {r['k']} (95 % interval k {lo}..{hi} over {r['bootstrap']} "
              f"bootstrap resamples of the prompts), expected speed-up {r['speedup']:.2f}x"]
    if r.get("capped"):
        lines.append(f"  (k up to {r['block_cap']}: the draft's trained block)")
    for engine_name, flag in r.get("flags", {}).items():
        lines.append(f"  {engine_name}: {flag}")
    if r.get("guard"):
        lines.append(f"  guard (break-even rule, at this k): round_cost {r['guard']['round_cost']:g} plain steps "
                     f"(draft_cost {r['guard']['draft_cost']:g}): `guard: {{round_cost: {r['guard']['round_cost']:g}}}` in the recipe")
    c = r["check_k_lo"]
    lines.append(f"check: at k={c['k']} the run measured {c['measured_tokens_per_forward']:.2f} tokens per forward, "
                 f"the k_max run predicts {c['predicted']:.2f}")
    for d in r["diagnostics"]:
        lines.append(f"{d['severity']} {d['code']}: {d['message']}")
    if r.get("acceptance_csv"):
        lines.append(f"written: {r['acceptance_csv']} (speculators' acceptance.csv columns, the k_max run)")
    lines.append("limits: one request at a time (under concurrency the best k falls), greedy decoding, these prompts and this engine.")
    return "\n".join(lines)
