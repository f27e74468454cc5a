"""`surgery validate --engine-check`: the engine's own answer turned into diagnostics (codes SRG760-SRG766).

The pair's two config.json files (as surgery read them, `_` annotations dropped) are written to two
folders, the serving flags become one case, and the driver (surgery/engine/ask/__init__.py) asks the
engine in its own interpreter (`--engine-python`, else the current one when it imports the engine):
- the config layer's refusal: SRG761 (error), in the engine's words, with its frame;
- a refusal while constructing the target or the draft class on the meta device: SRG760 (error) each,
  naming the engine, the release, the model, what it said (escaped, bounded) and where;
- with --weights, the constructed parameters (whole, tp 1 / pp 1) against the safetensors headers, by
  the class's own naming (its WeightsMapper and packed modules, reported by the runner): SRG762 (error)
  per tensor whose shape differs;
- what could not be constructed here (an environment limit, a method without a draft model): SRG763
  (warning); the engine not asked at all (no interpreter, a crash, a bound passed, garbage): SRG764
  (warning); another release asked than judged: SRG766 (warning); what was asked, its time and memory,
  and how many tensors were compared: SRG765 (note).
Layer 1 (engine knowledge): plain dicts in, diagnostics out; the caller reads the headers.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from ...text.diagnostics import Diagnostic, Location, diag
from . import ask_run, can_ask, default_python, verdicts_of

ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang"}
SAID_LIMIT = 600  # characters of the engine's message quoted in a line
VOCAB_PAD = 512  # an embedding / LM head may be padded by the engine up to this many rows


def _int_env(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        return default
    return value if 0 < value < 1e7 else default


def _said(text) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= SAID_LIMIT else text[:SAID_LIMIT] + " [...]"


def _published(raw: dict, folder: Path) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    cfg = {k: v for k, v in raw.items() if not (isinstance(k, str) and k.startswith("_"))}
    (folder / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return str(folder)


def engine_check(*, engine: str, release: str | None, python: str | None, draft_raw: dict, target_raw: dict,
                 method: str | None, tp: int = 1, pp: int = 1, max_model_len: int | None = None,
                 kv_cache_dtype: str | None = None, hf_overrides: dict | None = None, k: int | None = None,
                 headers: dict | None = None) -> list[Diagnostic]:
    """The engine's answer on the pair at these settings; `headers`: {"target" / "draft": {tensor name:
    [dims]}} from --weights, or None."""
    name = ENGINE_NAMES.get(engine, engine)
    if python is None:
        python = default_python(engine)
        if python is None:
            return [diag("SRG764", f"--engine-check could not ask {name}: this interpreter cannot import it "
                                   "and no --engine-python was given (no-python)")]
    ok, why = can_ask(engine, python)
    if not ok:
        return [diag("SRG764", f"--engine-check could not ask {name}: {_said(why)} (no-python)")]
    if not method:
        return [diag("SRG764", f"--engine-check could not ask {name}: no speculative method (give --method)")]
    folder = Path(tempfile.mkdtemp(prefix="surgery-engine-check-"))
    try:
        case = {"id": "validate", "target": _published(target_raw, folder / "target"),
                "draft": _published(draft_raw, folder / "draft"), "method": method, "k": k or 2, "tp": tp, "pp": pp,
                "max_model_len": max_model_len, "kv_cache_dtype": kv_cache_dtype or "auto",
                "hf_overrides": hf_overrides or {}, "full_shapes": headers is not None}
        run = ask_run(engine, python, [case], timeout_s=_int_env("SURGERY_ENGINE_CHECK_TIMEOUT", 600),
                      max_rss_mb=_int_env("SURGERY_ENGINE_CHECK_MAX_RSS_MB", 8192))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return answer_diagnostics(name, release, run, verdicts_of(run, [case])[0], headers)


def answer_diagnostics(name: str, release: str | None, run, verdict: dict, headers: dict | None) -> list[Diagnostic]:
    """The runner's verdict on one case as diagnostics (module doc)."""
    if run.failure or verdict.get("stage") == "unasked":
        return [diag("SRG764", f"--engine-check could not ask {name}: {_said(run.detail or verdict.get('message'))} "
                               f"({run.failure or verdict.get('code')})")]
    version = run.version or "?"
    out: list[Diagnostic] = []
    if release and version.split("+")[0] != release:
        out.append(diag("SRG766", f"--engine-check asked {name} {version} (the --engine-python's), the rules judge "
                                  f"{release}: the construction speaks for {version} only"))
    said = f"{name} {version}"
    stage = verdict.get("stage")
    if stage == "config":
        out.append(diag("SRG761", f"{said} refuses the setup in its config layer: {verdict.get('type')}: "
                                  f"{_said(verdict.get('message'))}" + _at(verdict.get("where")),
                        Location(file=verdict.get("where"))))
    for r in verdict.get("refusals") or []:
        if r.get("unjudged"):
            continue
        stage_of = f" (pipeline stage {r['pp_rank']})" if "pp_rank" in r else ""
        out.append(diag("SRG760", f"{said} refuses to construct the {r.get('model')}{stage_of} on the meta device: "
                                  f"{r.get('type')}: {_said(r.get('message'))}" + _at(r.get("where")),
                        Location(file=r.get("where"))))
    if stage == "unjudged" and not verdict.get("refusals"):
        out.append(diag("SRG763", f"{said} could not be judged here: {_said(verdict.get('message'))}"))
    for gap in verdict.get("unconstructed") or []:
        out.append(diag("SRG763", f"{said}: not constructed: {_said(gap)}"))
    compared = ""
    if headers is not None and stage is None:
        found, compared = compare_headers(said, verdict, headers)
        out += found
    shapes = verdict.get("shapes") or {}
    built = ("nothing constructed (its config layer refused)" if stage == "config" else
             ", ".join(f"{role} {len(shapes.get(role) or {})} parameters" for role in ("target", "draft"))
             + " constructed on meta")
    out.append(diag("SRG765", f"--engine-check asked {said}: {built}; {run.seconds:g} s, peak RSS "
                              f"{run.peak_rss_kb // 1024} MiB" + compared))
    return out


def _at(where) -> str:
    return f" (at {where})" if where else ""


def _mapped(name: str, naming: dict) -> str | None:
    """The parameter name the class's WeightsMapper gives a checkpoint name (None: the class drops it)."""
    for kind in ("prefix", "substr", "suffix"):
        for old, new in (naming.get(kind) or {}).items():
            hit = (name.startswith(old) if kind == "prefix" else name.endswith(old) if kind == "suffix"
                   else old in name)
            if not hit:
                continue
            if new is None:
                return None
            name = (new + name[len(old):] if kind == "prefix" else name[:-len(old)] + new if kind == "suffix"
                    else name.replace(old, new, 1))
    return name


def _find(name: str, params: dict) -> str | None:
    for cand in (name, "model." + name, name.removeprefix("model.")):
        if cand in params:
            return cand
    return None


def _same(param: list, header: list, pname: str) -> bool:
    if list(param) == list(header):
        return True
    vocab = pname.endswith(("embed_tokens.weight", "lm_head.weight"))
    return (vocab and len(param) == len(header) >= 1 and list(param[1:]) == list(header[1:])
            and 0 < param[0] - header[0] < VOCAB_PAD)


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def match_role(params: dict, header: dict, naming: dict) -> tuple[list[tuple], int, int]:
    """([(checkpoint name(s), header shape, parameter, constructed shape)] that differ, compared, not compared)
    for one model: by the class's naming, the fused projections summed along the output dimension."""
    parts_of = {part: (fused, i) for fused, parts in (naming.get("packed") or {}).items()
                for i, part in enumerate(parts)}
    groups: dict[str, list] = {}
    wrong, compared, missed = [], 0, 0
    for hname, hshape in sorted(header.items()):
        if _numel(hshape) <= 1:
            continue  # scales and scalars: loaded by their own rules
        mapped = _mapped(hname, naming)
        if mapped is None:
            continue
        pname = _find(mapped, params)
        if pname is not None:
            compared += 1
            if not _same(params[pname], hshape, pname):
                wrong.append((hname, hshape, pname, params[pname]))
            continue
        fused = next(((mapped.replace(f".{p}.", f".{f}."), i) for p, (f, i) in parts_of.items()
                      if f".{p}." in mapped), None)
        pname = _find(fused[0], params) if fused else None
        if pname is None:
            missed += 1
        else:
            groups.setdefault(pname, []).append((fused[1], hname, hshape))
    for pname, parts in groups.items():
        parts = [(h, s) for _, h, s in sorted(parts)]  # in the fused order (q, k, v)
        tails = {tuple(s[1:]) for _, s in parts}
        compared += len(parts)
        want = [sum(s[0] for _, s in parts), *parts[0][1][1:]] if len(tails) == 1 else None
        expected_parts = next((len(v) for f, v in (naming.get("packed") or {}).items()
                               if f".{f}." in f".{pname}"), len(parts))
        if want is not None and len(parts) == expected_parts and list(params[pname]) != want:
            wrong.append((" + ".join(h for h, _ in parts), want, pname, params[pname]))
    return wrong, compared, missed


def compare_headers(said: str, verdict: dict, headers: dict) -> tuple[list[Diagnostic], str]:
    at = verdict.get("shapes_at") or {}
    if at.get("tp", 1) != 1 or at.get("pp", 1) != 1:
        return [diag("SRG763", f"{said}: the whole-tensor build (tp 1, pp 1) did not run, so the shapes were not "
                               "compared with the checkpoint")], ""
    out, counts = [], []
    for role in ("target", "draft"):
        header = headers.get(role)
        params = (verdict.get("shapes") or {}).get(role)
        if not header or not params:
            continue
        wrong, compared, missed = match_role(params, header, (verdict.get("naming") or {}).get(role) or {})
        counts.append(f"{role} {compared} of {len(header)} checkpoint tensors compared by name ({missed} with no "
                      "constructed counterpart by the class's naming: regrouped experts, renamed or unused)")
        for hname, hshape, pname, pshape in wrong:
            out.append(diag("SRG762", f"{said}: the {role}'s checkpoint tensor {hname} is {list(hshape)}, the "
                                      f"constructed parameter {pname} is {list(pshape)}",
                            Location(file=role, key_path=hname)))
    return out, ("; " + "; ".join(counts)) if counts else ""
