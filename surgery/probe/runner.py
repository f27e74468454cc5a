"""The probe's loop: the open questions, the candidates, each measured on the live pair (the served
candidate first, the others racing it with the early stop), the ranking, the counts."""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import stats
from .candidates import candidates as build_candidates
from .draftcopy import candidate_folder
from ..facts import read_facts
from .questions import Questions, open_questions
from .weights import d2t_finding


@dataclass
class ProbeInput:
    recipe: object  # surgery.recipe.Recipe
    target: Path
    draft: Path
    prompts: list[list[int]]
    prompt_source: str
    max_new_tokens: int
    k: int
    diagnostics: tuple = ()  # validate's findings for the pair (surgery/commands/probe.py validate_findings)


def ask(inp: ProbeInput, engine: str) -> Questions:
    """validate's findings plus the probe's own read of the draft's d2t (SRG495, weights.py)."""
    draft, target = read_facts(inp.draft), read_facts(inp.target)
    found = tuple(inp.diagnostics)
    d2t = d2t_finding(inp.draft, target.scalars.get("vocab_size"))
    if d2t is not None:
        found += (d2t,)
    return open_questions(found, draft, target, draft_dir=inp.draft)


def probe(inp: ProbeInput, measurer, progress=lambda m: None, early_stop: bool = True) -> dict:
    """Everything the report shows: questions, candidates, per-candidate measurements, ranking, counts."""
    questions = ask(inp, measurer.engine)
    cands, how = build_candidates(questions.open)
    results: dict[str, stats.Measured] = {}
    n = len(inp.prompts)
    with tempfile.TemporaryDirectory(prefix="surgery-probe-") as tmp:
        for i, cand in enumerate(cands):
            progress(f"candidate {i + 1}/{len(cands)}: {cand.name}")
            folder = inp.draft if not (cand.edits or cand.tensors) else \
                candidate_folder(inp.draft, cand.edits, Path(tmp) / f"c{i}", cand.tensors)
            leader = max((m for m in results.values() if m.error is None and not m.stopped_early and m.prompts),
                         key=lambda m: m.mean, default=None)

            def keep_going(m, leader=leader):
                return not (early_stop and leader is not None and stats.may_stop(m, n, leader))

            results[cand.name] = measurer.measure(folder, inp.prompts, inp.max_new_tokens, inp.k, keep_going)
    ranking = stats.rank(results)
    rows = []
    for cand in cands:
        m = results[cand.name]
        rows.append({**cand.to_dict(), "verified": m.verified, "stopped_early": m.stopped_early, "error": m.error,
                     **m.totals(), "prompt_acceptance": [round(p.rate, 4) for p in m.prompts]})
    counts = {"candidates": len(cands), "candidates_stopped_early": sum(r["stopped_early"] for r in rows),
              "prompts_decoded": sum(r["prompts"] for r in rows),
              "target_forwards": sum(r["target_forwards"] for r in rows),
              "draft_forwards": sum(r["draft_forwards"] for r in rows),
              "target_forwards_without_early_stop": sum(
                  r["target_forwards"] if not r["stopped_early"] else r["target_forwards"] * n // max(1, r["prompts"])
                  for r in rows)}
    return {"engine": measurer.engine, "release": measurer.release,
            "questions": [q.to_dict() for q in questions.open],
            "findings": questions.findings, "settled": questions.settled, "unanswerable": questions.unanswerable, "candidates_built": how,
            "candidates": rows, "ranking": ranking, "counts": counts,
            "prompts": {"source": inp.prompt_source, "count": n, "max_new_tokens": inp.max_new_tokens, "k": inp.k},
            "decision": decision(cands, ranking, questions)}


def decision(cands, ranking, questions: Questions) -> dict:
    """The answer per question: the best candidate's when decided, else undecided (with the margin)."""
    if questions.unanswerable:  # a question measurement cannot settle: never reported as confirmed
        return {"status": "undecided", "why": "; ".join(questions.unanswerable), "answers": {},
                "leader": ranking.get("leader")}
    if not questions.open:
        return {"status": "confirmed" if questions.settled else "nothing to decide",
                "why": "; ".join(questions.settled) if questions.settled else "no open question", "answers": {}}
    if not ranking["decided"]:
        return {"status": "undecided", "why": ranking["why"], "answers": {}, "leader": ranking.get("leader")}
    best = next(c for c in cands if c.name == ranking["best"])
    return {"status": "confirmed" if best.as_served else "changed", "why": ranking["why"], "candidate": best.name,
            "answers": {code: a.to_dict() for code, a in best.answers}}
