"""The expectation and its source: which acceptance a pair should reach (`expect`: mean_length, acceptance,
per_position), where that figure comes from (`expect.source`: a measured run, a model card, the user), and the
rule that finds a window under it beyond the support bound (SRG474).

Why apart: an expectation and its source are one statement (the SRG474 line names the source, so a release
regression reads as one); its parsing, its wording and its rule change together."""
from __future__ import annotations

import math
from typing import Any

from .bounds import length_upper, pct, wilson_upper
from .counts import Counts
from .keys import EXPECT_KEYS, SOURCE_KINDS, invalid


def parse_expect(value: Any) -> tuple[tuple[str, Any], ...]:
    if value is None:
        return ()
    if not isinstance(value, dict) or not value:
        raise invalid("expect", f"expect must be a mapping of {', '.join(EXPECT_KEYS)}, got {value!r}",
                   'e.g. {"mean_length": 2.8} from the head\'s model card, or vLLM\'s own log line numbers')
    out = []
    for key, v in value.items():
        if key == "source":
            continue  # parse_source
        if key not in EXPECT_KEYS:
            raise invalid(f"expect.{key}", f"unknown expectation {key!r} (known: {', '.join(EXPECT_KEYS)})")
        if key == "per_position":
            if not isinstance(v, (list, tuple)) or not v or any(
                    isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 <= x <= 1 for x in v):
                raise invalid("expect.per_position", f"per_position must be a list of rates in [0, 1], got {v!r}")
            if any(b > a for a, b in zip(v, v[1:])):
                raise invalid("expect.per_position", f"per_position {list(v)} rises: accepted tokens are a prefix, so "
                           "vLLM's per-position acceptance never does", "copy the rates from a vLLM "
                           "'SpecDecoding metrics' line or a model card")
            out.append((key, tuple(float(x) for x in v)))
        else:
            ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
            if not ok or (key == "acceptance" and not 0 <= v <= 1) or (key == "mean_length" and v < 1):
                raise invalid(f"expect.{key}", f"{key} must be {'a rate in [0, 1]' if key == 'acceptance' else 'a length >= 1 (bonus token included)'}, got {v!r}")
            out.append((key, float(v)))
    if not out:
        raise invalid("expect", "expect has a source but no figure (mean_length, acceptance or per_position)")
    return tuple(out)


def parse_source(value: Any) -> tuple[tuple[str, str], ...]:
    """expect.source: {kind: measured | model_card | user, other keys free strings}; () when absent."""
    source = value.get("source") if isinstance(value, dict) else None
    if source is None:
        return ()
    if not isinstance(source, dict) or source.get("kind") not in SOURCE_KINDS:
        raise invalid("expect.source", f"source must be a mapping with kind one of {', '.join(SOURCE_KINDS)}, got "
                   f"{source!r}", 'e.g. {kind: measured, engine: vllm, release: "0.26.0", card: H200}')
    out = [("kind", source["kind"])]
    for key, v in source.items():
        if key == "kind":
            continue
        if not isinstance(key, str) or isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise invalid(f"expect.source.{key}", f"source values are strings, got {key}: {v!r}")
        out.append((key, str(v)))
    return tuple(out)


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


def _miss(said: str, upper: float, want: float, factor: float, z: float, show=None, show_want=None) -> str | None:
    """'<said> under expected <want> x <factor> = <limit> (upper bound <upper> at z <z>)' when even the support
    bound's upper end is under expected x factor; None when it is not (one rule for every figure)."""
    limit = want * factor
    if upper >= limit:
        return None
    show = show or pct
    return (f"{said} under expected {(show_want or show)(want)} x {factor:g} = {show(limit)} (upper bound "
            f"{show(upper)} at z {z:g})")


def expectation_misses(w: Counts, cfg: Any) -> list[str]:
    """The expectations (`cfg.expect`, cfg a settings.py GuardConfig) the drafts in `w` miss beyond the support
    bound: observed under expected x (1 - expect_tolerance) with the Wilson upper end (z = expect_z) for the
    support still under it. Counts only.

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
                miss = _miss(f"position {i} accepted {pct(a / n)} ({a}/{n})", wilson_upper(a, n, z), target, factor, z)
                if miss:
                    misses.append(miss)
                    break
        elif key == "acceptance" and sum(w.drafted):
            drafted = sum(w.drafted)
            acc = sum(w.accepted) / drafted
            miss = _miss(f"acceptance {pct(acc)} ({sum(w.accepted)}/{drafted} drafted tokens in {n} drafts)",
                         wilson_upper(acc * n, n, z), want, factor, z)
            misses += [miss] if miss else []
        elif key == "mean_length" and w.accepted:
            mean_len = 1 + sum(w.accepted) / n
            upper = length_upper(mean_len, len(w.accepted), n, z)
            miss = _miss(f"mean accepted length {mean_len:.2f} over {n} drafts", upper, want, factor, z,
                         show=lambda x: f"{x:.2f}", show_want=lambda x: f"{x:g}")
            misses += [miss] if miss else []
    return misses
