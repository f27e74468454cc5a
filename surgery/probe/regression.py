"""`surgery probe RECIPE --check`: an acceptance regression check for CI (issue 66; vllm#28135 asks for
acceptance within +-10 % per pair). The pair is decoded on a prompt set and its per-position acceptance is
compared with a recorded expectation; exit 1 on a regression, 0 otherwise, one coded line per position.

The expectation, first found:
- `--expect FILE`: a speculators `acceptance.csv` (below), a `surgery probe --write` document or a recipe
  (their `guard.expect`), or a bare `expect:` mapping (the guard's format, docs/guard.md);
- the recipe's `guard.expect`, else the built-in pair's measured `expect.<engine>` (surgery/probe/expected.py).
The check decodes with the expectation's k (the length of its per-position list).

The noise bound (stated in every line): per position j, the measured count x_j of n drafts is a binomial
sample; its Wilson score interval at z (default 2.576, 99 % two-sided: the guard's `expect_z`) bounds the
rate. When the expectation carries its own support (an acceptance.csv's num_drafts, a guard.expect
source's `drafts`), its Wilson interval at the same z bounds it too; otherwise it is taken as exact.
- regression (SRG541, error): the measured upper end is under the expected lower end x (1 - tolerance);
- above (SRG542, info): the measured lower end is over the expected upper end x (1 + tolerance): the
  expectation is stale or was measured elsewhere;
- held (SRG543, info): anything else.
The tolerance (default 0.10, vllm#28135's +-10 %) covers what differs between two healthy runs beyond count
noise (card, dtype, kernels, release). Drafts of one request are correlated, so the binomial interval is a
floor on the noise, not an exact test level: the tolerance keeps covering the rest.

The per-position acceptance is read and written in the format of the speculators benchmarks, so figures
compare with published ones (RedHatAI/speculator_benchmarks evaluated with speculators' `scripts/evaluate`):
`acceptance.csv` with columns

    subset, num_drafts, num_draft_tokens, num_accepted_tokens, acceptance_length, acceptance_at_pos_0, ...

one row per prompt subset; `acceptance_length` = 1 + accepted / drafts, `acceptance_at_pos_i` = accepted at
draft position i (0-based) / drafts, from vLLM's spec-decode counters. Source: vllm-project/speculators,
`scripts/evaluate/perf_utils.py` (`extract_spec_decode_metrics`, `acceptance_csv_columns`, `CsvWriter`) and
`scripts/evaluate/evaluate.py` (`_run_subset`: `output_dir / "acceptance.csv"`, `["subset"] +
acceptance_csv_columns(spec)`), at commit e7fc716e5b70728dbd30c6f8116e4fd8617c7b6c (2026-07-27; the
tutorial docs/user_guide/tutorials/evaluating_performance.md: "identical in format to the
RedHatAI/speculator_benchmarks output"). speculators writes the counters as floats (Prometheus values), so
this module does too; it reads either.
"""
from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from ..guard.bounds import wilson_upper
from ..guard.settings import GuardConfig, parse_config
from ..text.diagnostics import EXIT_INVALID, EXIT_OK, Location, SurgeryError, diag
from ..text.localfile import read_text_file
from ..text.yamlload import load_yaml_text

TOLERANCE = 0.10
Z = GuardConfig.expect_z
MAX_BYTES = 16 << 20
BASE_COLUMNS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "acceptance_length")
POS = "acceptance_at_pos_"


@dataclass(frozen=True)
class ModeOptions:
    """What `surgery probe --check` and `--tune` (tune.py) both take, built by surgery/commands/probe.py
    `mode_options` from the command line: the tokens decoded per prompt, the acceptance.csv written and the
    name of its row, JSON or text."""
    tokens: int = 48
    acceptance_csv: str | None = None
    subset: str | None = None
    json: bool = False

    def write_acceptance(self, result: dict, drafts: int, draft_tokens: int, accepted: int,
                         per_position: list[int]) -> None:
        """--acceptance-csv: the measured counts as one speculators acceptance.csv row (named --subset, else
        "probe"); the result says where it went."""
        write_acceptance_csv(Path(self.acceptance_csv), [spec_row(self.subset or "probe", drafts, draft_tokens,
                                                                  accepted, per_position)])
        result["acceptance_csv"] = str(self.acceptance_csv)

    def emit(self, out, result: dict, render, code: int) -> int:
        """Write the result on `out` (JSON, or the mode's `render` text) and return the exit code `code`."""
        out.write((json.dumps(result, indent=2, default=str) if self.json else render(result)) + "\n")
        return code


@dataclass(frozen=True)
class RegressionOptions(ModeOptions):
    """`surgery probe --check`'s options: the shared ones (ModeOptions) and the expectation's."""
    expect: str | None = None
    tolerance: float = TOLERANCE


@dataclass
class Expectation:
    """What the pair should reach: per-position rates (unconditional: accepted at position j / drafts)."""
    per_position: list[float]
    origin: str
    drafts: int | None = None  # the support behind the figures (None: taken as exact)
    source: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"per_position": [round(x, 4) for x in self.per_position], "origin": self.origin,
                "drafts": self.drafts, "source": self.source}


def wilson_lower(successes: float, n: int, z: float) -> float:
    """The lower end of the Wilson interval: the upper end of the failures, mirrored (0.0 when n is 0)."""
    return 1.0 - wilson_upper(n - successes, n, z) if n > 0 else 0.0


# --------------------------------------------------------------------------- acceptance.csv

def _bad_csv(path, message: str, line: int | None = None) -> SurgeryError:
    return SurgeryError(diag("SRG544", message, Location(file=str(path), line=line)))


def spec_row(subset: str, drafts: int, draft_tokens: int, accepted: int, per_position: list[int]) -> dict:
    """One acceptance.csv row from counts, as speculators' extract_spec_decode_metrics computes it."""
    row = {"subset": subset, "num_drafts": float(drafts), "num_draft_tokens": float(draft_tokens),
           "num_accepted_tokens": float(accepted), "acceptance_length": 1 + accepted / drafts if drafts > 0 else 0}
    for i, count in enumerate(per_position):
        row[f"{POS}{i}"] = count / drafts if drafts > 0 else 0
    return row


def write_acceptance_csv(path: Path, rows: list[dict]) -> None:
    """Write `rows` (spec_row) with speculators' header: subset, the base columns, acceptance_at_pos_0..."""
    k = max(sum(1 for key in r if key.startswith(POS)) for r in rows)
    columns = ["subset", *BASE_COLUMNS, *(f"{POS}{i}" for i in range(k))]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\r\n")
    writer.writeheader()  # csv.DictWriter's default line ending, as speculators' CsvWriter writes it
    writer.writerows(rows)
    try:
        Path(path).write_text(buf.getvalue(), encoding="utf-8")
    except OSError as exc:
        raise SurgeryError(diag("SRG544", f"cannot write {path} ({type(exc).__name__}: {exc.strerror or exc})",
                                Location(file=str(path)))) from None


def _number(path, line: int, column: str, text) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise _bad_csv(path, f"column {column!r} is not a number: {str(text)[:40]!r}", line) from None
    if not math.isfinite(value) or value < 0:
        raise _bad_csv(path, f"column {column!r} must be a finite number >= 0, got {text!r}", line)
    return value


def read_acceptance_csv(path: Path, subset: str | None = None) -> Expectation:
    """The expectation in a speculators acceptance.csv: the row of `subset`, the only row, or every row pooled
    (weighted by num_drafts). SRG544 for a file that is not one, never a traceback."""
    try:
        text = read_text_file(Path(path), MAX_BYTES, "acceptance CSV")
    except SurgeryError as exc:
        first = exc.diagnostics[0] if exc.diagnostics else None
        raise _bad_csv(path, f"cannot read the acceptance CSV: {first.message if first else exc}") from None
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        header = list(reader.fieldnames or [])
        raw_rows = list(reader)
    except csv.Error as exc:
        raise _bad_csv(path, f"not CSV: {exc}") from None
    positions = sorted(int(c[len(POS):]) for c in header if c.startswith(POS) and c[len(POS):].isdigit())
    missing = [c for c in ("num_drafts",) if c not in header]
    if not header or missing or not positions:
        raise _bad_csv(path, "not a speculators acceptance.csv: the header needs num_drafts and acceptance_at_pos_0.. "
                       f"(found {', '.join(header[:8]) or 'no header'})", 1)
    if positions != list(range(len(positions))):
        raise _bad_csv(path, f"acceptance_at_pos_ columns must run 0..{len(positions) - 1} without a gap, got "
                       f"{positions}", 1)
    rows = []
    for n, raw in enumerate(raw_rows, start=2):
        if None in raw or any(v is None for v in raw.values()):
            raise _bad_csv(path, f"row has {'more' if None in raw else 'fewer'} fields than the header", n)
        name = (raw.get("subset") or "").strip() or f"row {n - 1}"
        drafts = _number(path, n, "num_drafts", raw["num_drafts"])
        rates = [_number(path, n, f"{POS}{i}", raw[f"{POS}{i}"]) for i in positions]
        if any(r > 1 for r in rates):
            raise _bad_csv(path, f"{name}: a per-position rate is over 1: {rates}", n)
        if any(b > a + 1e-9 for a, b in zip(rates, rates[1:])):
            raise _bad_csv(path, f"{name}: per-position rates rise ({rates}): accepted tokens are a prefix, so "
                           "vLLM's per-position acceptance never does", n)
        rows.append((name, drafts, rates))
    if not rows:
        raise _bad_csv(path, "the acceptance CSV has a header and no row")
    if subset is not None:
        names = ", ".join(n for n, _, _ in rows[:12])
        rows = [r for r in rows if r[0] == subset]
        if not rows:
            raise _bad_csv(path, f"no subset {subset!r} in the acceptance CSV (subsets: {names})")
    total = sum(d for _, d, _ in rows)
    if total <= 0:
        raise _bad_csv(path, "num_drafts is 0 in every row: no acceptance was measured")
    k = len(positions)
    per = [sum(d * r[j] for _, d, r in rows) / total for j in range(k)]
    origin = (f"{path} subset {rows[0][0]!r}" if len(rows) == 1 else
              f"{path}, {len(rows)} subsets pooled by num_drafts")
    return Expectation(per_position=per, origin=origin, drafts=int(round(total)),
                       source={"kind": "measured", "file": str(path), "format": "speculators acceptance.csv"})


# --------------------------------------------------------------------------- other expectation files

def read_expectation(path: Path, subset: str | None = None) -> Expectation:
    """`--expect FILE`: an acceptance.csv, or YAML holding guard.expect (a probe --write document, a recipe) or
    a bare expect mapping."""
    path = Path(path)
    try:
        text = read_text_file(path, MAX_BYTES, "expectation")
    except SurgeryError as exc:
        first = exc.diagnostics[0] if exc.diagnostics else None
        raise _bad_csv(path, f"cannot read the expectation: {first.message if first else exc}") from None
    head = text.lstrip("\ufeff").split("\n", 1)[0]
    if path.suffix.lower() == ".csv" or ("num_drafts" in head and "," in head):
        return read_acceptance_csv(path, subset)
    try:
        data = load_yaml_text(text, str(path)).data
    except SurgeryError as exc:
        raise SurgeryError([diag("SRG544", f"not an acceptance.csv and not YAML: {d.message}", d.location)
                            for d in exc.diagnostics]) from None
    found, where = None, None
    if isinstance(data, dict):
        guard = data.get("guard")
        if isinstance(guard, dict) and isinstance(guard.get("expect"), dict):
            found, where = guard["expect"], "guard.expect"
        elif isinstance(data.get("expect"), dict):
            found, where = data["expect"], "expect"
    if found is None:
        raise SurgeryError(diag("SRG544", "no expectation in the file: an acceptance.csv, a `surgery probe --write` "
                                "document, a recipe with guard.expect or an `expect:` mapping", Location(file=str(path))))
    cfg = parse_config({"expect": found})  # the guard's own validation (SRG475 with the key path)
    per = cfg.expectations.get("per_position")
    if not per:
        raise SurgeryError(diag("SRG545", f"{where} in {path} has no per_position rates: the check compares "
                                "acceptance position by position", Location(file=str(path), key_path=where)))
    return Expectation(per_position=list(per), origin=f"{where} in {path}", drafts=_drafts(cfg.source),
                       source=cfg.source)


def _drafts(source: dict) -> int | None:
    try:
        n = int(float(source.get("drafts")))
    except (TypeError, ValueError):
        return None
    return n if n > 0 else None


def from_expected(found: dict | None) -> Expectation | None:
    """surgery/probe/expected.py's expected_for (the recipe's guard.expect, else the built-in pair's)."""
    if not found:
        return None
    source = dict(found.get("source") or {})
    return Expectation(per_position=list(found["per_position"]), origin=found["from"], drafts=_drafts(source),
                       source=source)


# --------------------------------------------------------------------------- the comparison (counts only)

def compare(exp: Expectation, drafts: int, per_position: list[int] | None, accepted: int, drafted: int,
            tolerance: float = TOLERANCE, z: float = Z) -> list[dict]:
    """One row per position (or one overall row when the engine gives no per-position counts), each with
    its verdict: regression / above / held, and the figures it was judged on."""
    def judge(label: str, x: float, n: int, want: float) -> dict:
        lo_m, hi_m = wilson_lower(x, n, z), wilson_upper(x, n, z)
        ne = exp.drafts
        lo_e, hi_e = (wilson_lower(want * ne, ne, z), wilson_upper(want * ne, ne, z)) if ne else (want, want)
        verdict = ("regression" if hi_m < lo_e * (1 - tolerance) else
                   "above" if lo_m > min(1.0, hi_e * (1 + tolerance)) else "held")
        return {"position": label, "measured": x / n if n else 0.0, "count": x, "drafts": n,
                "interval": [lo_m, hi_m], "expected": want, "expected_interval": [lo_e, hi_e],
                "bar": lo_e * (1 - tolerance), "verdict": verdict}

    if per_position is not None:
        return [judge(str(j + 1), per_position[j], drafts, want)
                for j, want in enumerate(exp.per_position[:len(per_position)])]
    # no per-position counts (HF): the mean acceptance over the drafts (the guard's convention: the drafts,
    # not the correlated tokens, are the support)
    want = sum(exp.per_position) / len(exp.per_position)
    rate = accepted / drafted if drafted else 0.0
    return [judge("all", rate * drafts, drafts, want)]


def lines(rows: list[dict], exp: Expectation, tolerance: float, z: float, where: Location) -> list:
    """The coded lines: SRG541 per regressed position, SRG542 above, SRG543 held."""
    code = {"regression": "SRG541", "above": "SRG542", "held": "SRG543"}
    out = []
    for r in rows:
        what = "acceptance over all positions" if r["position"] == "all" else f"position {r['position']}"
        exp_text = f"{r['expected']:.1%}" + (
            f" (over {exp.drafts} drafts: [{r['expected_interval'][0]:.1%}, {r['expected_interval'][1]:.1%}])"
            if exp.drafts else "")
        msg = (f"{what}: {r['measured']:.1%} ({r['count']:g}/{r['drafts']} drafts, Wilson interval at z {z:g} "
               f"[{r['interval'][0]:.1%}, {r['interval'][1]:.1%}]) against {exp_text} from {exp.origin}")
        if r["verdict"] == "regression":
            msg += f": the upper end is under {r['bar']:.1%} (tolerance {tolerance:g})"
        elif r["verdict"] == "above":
            msg += f": the lower end is over the expectation x (1 + {tolerance:g})"
        else:
            msg += f": within the tolerance {tolerance:g} and the noise"
        out.append(diag(code[r["verdict"]], msg, where))
    return out


def measured_counts(measured) -> dict:
    """Totals of a probe Measured (surgery/probe/stats.py): drafts, drafted, accepted, per-position counts."""
    prompts = measured.prompts
    per = None
    if prompts and all(p.per_position is not None for p in prompts):
        k = max(len(p.per_position) for p in prompts)
        per = [sum(p.per_position[j] for p in prompts if j < len(p.per_position)) for j in range(k)]
    return {"drafts": sum(p.rounds for p in prompts), "drafted": sum(p.drafted for p in prompts),
            "accepted": sum(p.accepted for p in prompts), "per_position": per, "prompts": len(prompts)}


def run_check(opts: RegressionOptions, out, measurer, draft: Path, prompts, source: str, expected: dict | None) -> int:
    """`surgery probe --check`: decode the pair as given with the expectation's k, compare, report. Exit 1 on
    a regression or when the pair could not be measured (SRG546); 0 otherwise; bad input raises (exit 2)."""
    exp = read_expectation(Path(opts.expect), opts.subset) if opts.expect else from_expected(expected)
    if exp is None:
        raise SurgeryError(diag("SRG545", "nothing records what this pair should accept: no --expect FILE, no "
                                "guard.expect in the recipe, and the pair is not a built-in pair"))
    tolerance, z = opts.tolerance, Z
    where = Location(file=str(Path(draft) / "config.json"))
    k = len(exp.per_position)
    measured = measurer.measure(draft, prompts, opts.tokens, k, lambda m: True)
    result = {"mode": "check", "engine": measurer.engine, "release": measurer.release, "k": k,
              "prompts": {"source": source, "count": len(prompts), "max_new_tokens": opts.tokens},
              "expected": exp.to_dict(), "tolerance": tolerance, "z": z}
    counts = measured_counts(measured)
    result["measured"] = counts
    if measured.error or not counts["drafts"]:
        why = measured.error or "the engine drafted nothing (no spec-decode rounds counted)"
        result.update(status="cannot check", diagnostics=[diag("SRG546", why, where).to_dict()])
        return opts.emit(out, result, render, EXIT_INVALID)
    rows = compare(exp, counts["drafts"], counts["per_position"], counts["accepted"], counts["drafted"], tolerance, z)
    found = lines(rows, exp, tolerance, z, where)
    regressed = any(r["verdict"] == "regression" for r in rows)
    result.update(status="regression" if regressed else "held", rows=rows, diagnostics=[d.to_dict() for d in found])
    if opts.acceptance_csv and counts["per_position"] is not None:
        opts.write_acceptance(result, counts["drafts"], counts["drafted"], counts["accepted"], counts["per_position"])
    return opts.emit(out, result, render, EXIT_INVALID if regressed else EXIT_OK)


def render(r: dict) -> str:
    p = r["prompts"]
    head = (f"check on {r['engine']} {r['release'] or ''}: {p['count']} prompts ({p['source']}), "
            f"{p['max_new_tokens']} tokens each, k={r['k']} (the expectation's)")
    out = [head]
    for d in r["diagnostics"]:
        out.append(f"{d['severity']} {d['code']}: {d['message']}")
    if r.get("acceptance_csv"):
        out.append(f"written: {r['acceptance_csv']} (speculators' acceptance.csv columns)")
    out.append(f"result: {r['status']}")
    return "\n".join(out)
