"""The probe's loop: the open questions, the candidates, each validated (a candidate `validate --weights`
refuses is not started: its coded errors are its row) and measured on the live pair (the served candidate
first, the others racing it with the early stop), the group winners together, the ranking, the counts,
the status (status.py)."""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from typing import Callable

from . import stats
from .candidates import candidates as build_candidates, combined, neighbours
from .draftcopy import candidate_folder
from .measure import error_text
from ..facts import read_facts
from .questions import Questions, open_questions
from .status import decide
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
    validate: Callable | None = None  # folder -> validate's findings for a candidate's draft (None: not gated)
    method: str | None = None  # the engine's speculative method (which head class reads which flag)
    expected: dict | None = None  # what the pair should reach (expected.py): no all-clear well under it


def ask(inp: ProbeInput, engine: str) -> Questions:
    """validate's findings plus the probe's own read of the draft's d2t (SRG495, weights.py) and the
    questions no check reports (field.py)."""
    draft, target = read_facts(inp.draft), read_facts(inp.target)
    found = tuple(inp.diagnostics)
    d2t = d2t_finding(inp.draft, target.scalars.get("vocab_size"))
    if d2t is not None:
        found += (d2t,)
    return open_questions(found, draft, target, draft_dir=inp.draft, method=inp.method or _method(inp.recipe))


def _method(recipe) -> str | None:
    engine = getattr(recipe, "engine", None)
    return (engine.get("vllm") or {}).get("method") if isinstance(engine, dict) else None


def errors_of(findings) -> list:
    return [d for d in findings if getattr(d, "severity", None) == "error"]


def _codes(findings) -> tuple:
    return tuple(sorted({d.code for d in errors_of(findings)}))


def probe(inp: ProbeInput, measurer, progress=lambda m: None, early_stop: bool = True) -> dict:
    """Everything the report shows: questions, candidates, per-candidate measurements, ranking, counts, status."""
    questions = ask(inp, measurer.engine)
    cands, how = build_candidates(questions.open, questions.base_edits)
    results: dict[str, stats.Measured] = {}
    n = len(inp.prompts)
    served_errors = errors_of(inp.diagnostics)
    blocked = None
    if served_errors and not questions.open and not questions.base_edits:
        # validate refuses the pair and nothing the probe asks could answer it: no engine is started
        blocked = [f"{d.code} {d.message}" for d in served_errors]
        cands = []
    with tempfile.TemporaryDirectory(prefix="surgery-probe-") as tmp:
        def run(i, cand):
            progress(f"candidate {i + 1}: {cand.name}")
            try:
                folder = inp.draft if not (cand.edits or cand.tensors) else \
                    candidate_folder(inp.draft, cand.edits, Path(tmp) / f"c{i}", cand.tensors)
            except Exception as exc:  # noqa: BLE001 - a copy that cannot be made (a tensor the files lack) is its row
                m = stats.Measured()
                m.error, m.stage = error_text(exc), "copy"
                results[cand.name] = m
                return
            found = inp.diagnostics if folder == inp.draft else (inp.validate(folder) if inp.validate else ())
            if errors_of(found):  # validate --weights refuses this reading: not started, its codes are the row
                m = stats.Measured()
                m.error = "; ".join(f"{d.code} {d.message}" for d in errors_of(found))[:400]
                m.stage, m.codes = "validate", _codes(found)
                results[cand.name] = m
                return
            leader = max((m for m in results.values() if m.error is None and not m.stopped_early and m.prompts),
                         key=lambda m: m.mean, default=None)

            def keep_going(m, leader=leader):
                return not (early_stop and leader is not None and stats.may_stop(m, n, leader))

            results[cand.name] = measurer.measure(folder, inp.prompts, inp.max_new_tokens, inp.k, keep_going)

        for i, cand in enumerate(cands):
            run(i, cand)
        extra = combined(questions.open, cands, lambda group: _best(group, results)) if cands else None
        if extra is not None:
            cands.append(extra)
            run(len(cands) - 1, extra)
        for _ in range(2):  # the leader's answers tested in its own context; once more if the leader moved
            more = neighbours(questions.open, cands, _leader(cands, results)) if cands else []
            for cand in more:
                cands.append(cand)
                run(len(cands) - 1, cand)
            if not more:
                break
    ranking = stats.rank(results)
    rows = []
    for cand in cands:
        m = results[cand.name]
        rows.append({**cand.to_dict(), "verified": m.verified, "stopped_early": m.stopped_early, "error": m.error,
                     "stage": m.stage, "codes": list(m.codes), "stage_built": cand.stage,
                     **m.totals(), "prompt_acceptance": [round(p.rate, 4) for p in m.prompts],
                     "answer_dicts": {qid: a.to_dict() for qid, a in cand.answers}})
    counts = {"candidates": len(cands), "candidates_stopped_early": sum(r["stopped_early"] for r in rows),
              "candidates_failed": sum(1 for r in rows if r["error"]),
              "prompts_decoded": sum(r["prompts"] for r in rows),
              "target_forwards": sum(r["target_forwards"] for r in rows),
              "draft_forwards": sum(r["draft_forwards"] for r in rows),
              "target_forwards_without_early_stop": sum(
                  r["target_forwards"] if not r["stopped_early"] else r["target_forwards"] * n // max(1, r["prompts"])
                  for r in rows)}
    dec = decide(rows, ranking, questions, inp.expected, blocked)
    for r in rows:
        r.pop("answer_dicts")
    return {"engine": measurer.engine, "release": measurer.release, "status": dec["status"],
            "questions": [q.to_dict() for q in questions.open],
            "fixed": [f.to_dict() for f in questions.fixed],
            "findings": questions.findings, "own_findings": [d.to_dict() for d in questions.own],
            "settled": questions.settled, "unanswerable": questions.unanswerable, "candidates_built": how,
            "candidates": rows, "ranking": ranking, "counts": counts,
            "prompts": {"source": inp.prompt_source, "count": n, "max_new_tokens": inp.max_new_tokens, "k": inp.k},
            "expected": inp.expected, "decision": dec}


def _leader(cands, results):
    """The candidate with the highest per-prompt mean among those that decoded every prompt (a candidate stopped
    early cannot win)."""
    ran = [c for c in cands if c.name in results and results[c.name].error is None and results[c.name].prompts
           and not results[c.name].stopped_early]
    return max(ran, key=lambda c: results[c.name].mean, default=None)


def _best(group, results):
    """The candidate of `group` with the highest per-prompt mean over the prompts it ran. A candidate stopped
    early counts: it could not beat the overall leader, but within its group it may well beat the served reading
    (a flipped norm under a random embedding: 10.9 % against 7.6 %, stopped after 5 prompts)."""
    ran = [c for c in group if c.name in results and results[c.name].error is None and results[c.name].prompts]
    return max(ran, key=lambda c: results[c.name].mean, default=None)
