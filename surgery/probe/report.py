"""The probe's report: its coded diagnostics and its text (the JSON is the result itself).

Every line a user acts on leads with the status (status.py): `decided (changed | confirmed)`, with the
questions it covers; `undecided`, with the margin; `cannot probe`, with the coded reason. A candidate that
failed is coded per row (SRG493) with its stage (validate / start / plugin / decode) and the engine's own
message, escaped and bounded (measure.py error_text)."""
from __future__ import annotations

from pathlib import Path

from ..text.diagnostics import Location, diag
from ..text.escape import shown
from .expected import shortfall
from .status import CANNOT, DECIDED, UNDECIDED, label


def diagnostics(result: dict, draft: Path) -> list:
    """SRG498 (cannot probe), SRG491 (undecided), SRG503 (an all-clear withheld: under the expectation),
    SRG492 (the served answer lost), SRG493 (a candidate that could not run), SRG496 (no candidate reaches
    what the pair should: expected.py), and the probe's own findings (SRG499 / SRG502, field.py)."""
    dec = result["decision"]
    where = Location(file=str(Path(draft) / "config.json"))
    out = []
    if dec["status"] == CANNOT:
        codes = dec.get("codes") or []
        out.append(diag("SRG498", dec["why"] + (f" [{', '.join(codes)}]" if codes else ""), where))
    elif dec["status"] == UNDECIDED:
        out.append(diag(dec.get("code") or "SRG491", dec["why"], where))
    elif dec.get("outcome") == "changed":
        out.append(diag("SRG492", f"best: {dec['candidate']} ({dec['why']})", where))
    for row in result["candidates"]:
        if row["error"]:
            stage = row.get("stage") or "start"
            codes = f" [{', '.join(row['codes'])}]" if row.get("codes") else ""
            out.append(diag("SRG493", f"{row['name']}: failed at {stage}{codes}: {shown(row['error'], 400)}", where))
    for d in result.get("own_findings") or ():
        out.append(diag(d["code"], d["message"], where, severity=d.get("severity")))
    short = shortfall(result, where)
    if short is not None:
        out.append(short)
    return out


def render(result: dict) -> str:
    p, c = result["prompts"], result["counts"]
    dec = result["decision"]
    lines = [f"status: {label(dec)}: {dec['why']}",
             f"probe on {result['engine']} {result['release'] or ''}: {p['count']} prompts ({p['source']}), "
             f"{p['max_new_tokens']} tokens each, k={p['k']}"]
    if result.get("pair"):
        pr = result["pair"]
        lines.append(f"pair: {pr['holds']} of the built-in {pr['builtin']} pair: {pr['prompts']}"
                     + (", its expectation" if pr.get("expectation") else ""))
    lines += ["", "open questions"]
    if not result["questions"]:
        said = result["settled"] + result["unanswerable"]
        lines.append("  none" + (f" ({'; '.join(said)})" if said else ""))
    for q in result["questions"]:
        lines.append(f"  {q['id']}: {q['question']}")
        for a in q["answers"]:
            lines.append(f"      - {a['name']}{'  (as served)' if a['as_served'] else ''}")
    for f in result.get("fixed") or ():
        how = "the one reading this target has" if f["how"] == "settled" else "from the weights"
        lines.append(f"  {f['question']['id']}: {f['answer']['name']} ({how}; every candidate carries it)")
    lines += ["", f"candidates ({result['candidates_built']})"]
    for r in result["candidates"]:
        if r["error"]:
            codes = f" [{', '.join(r['codes'])}]" if r.get("codes") else ""
            state = f"FAILED at {r.get('stage') or 'start'}{codes}: {shown(r['error'], 300)}"
        else:
            state = (f"acceptance {r['acceptance']:6.1%}  per-prompt mean {r['mean_prompt_acceptance']:6.1%}  "
                     f"prompts {r['prompts']}" + (" (stopped early: cannot win)" if r["stopped_early"] else "")
                     + (f"  per position {', '.join(f'{x:.2f}' for x in r['per_position'])}" if r.get("per_position") else ""))
        lines.append(f"  {'*' if r['as_served'] else ' '} {r['name']}" + ("  (the group winners together)" if r.get("stage_built") == 2 else ""))
        lines.append(f"      {state}")
    exp = result.get("expected")
    if exp:
        lines.append(f"  expected: {exp['rate']:.1%} ({exp['from']})")
    lines += ["", f"decision: {label(dec)}"]
    if dec["status"] == DECIDED:
        lines.append(f"  covers: {', '.join(dec.get('covers') or []) or 'no question (the pair as served)'}")
        for qid, a in dec.get("answers", {}).items():
            lines.append(f"  {qid}: {a['name']}")
    if dec.get("margin"):
        m = dec["margin"]
        lines.append(f"  margin against {m['against']!r}: {m['margin']:+.3f} (95 % interval [{m['interval'][0]:+.3f}, "
                     f"{m['interval'][1]:+.3f}], {m['prompts_agreeing']}/{m['prompts']} prompts agree)")
    if dec.get("short_of_expectation"):
        lines.append(f"  short of the expectation: {dec['short_of_expectation']}")
    lines.append(f"forwards: target {c['target_forwards']} (without the early stop ~{c['target_forwards_without_early_stop']}), "
                 f"draft {c['draft_forwards']}; candidates {c['candidates']} ({c['candidates_stopped_early']} stopped early, "
                 f"{c.get('candidates_failed', 0)} failed)")
    for d in result.get("diagnostics", []):
        lines.append(f"{d['severity']} {d['code']}: {d['message']}")
    if "written" in result:
        lines.append(f"written: {result['written']}" if result["written"] else "written: nothing (not decided)")
        if result.get("written"):
            lines.append(f"  use it: surgery validate ... --patch {result['written']}; surgery apply ... --patch "
                         f"{result['written']} (docs/probe.md)")
    lines.append("limits: the probe measures what these prompts show; a decision covers the questions it lists.")
    return "\n".join(lines)
