"""What `surgery probe --write FILE` emits: the config patch that says the decided answers, its
provenance (the pair's pins, engine and release, the prompts, the figures), and the measured
acceptance as the pair's expectation for the guard (guard.expect with a `source` mapping, the
shared format: docs/guard.md, surgery/guard/expectation.py).

The patch is read back by `surgery validate / plan / apply --patch FILE` (patch.py): `config_patch.file`
is the draft's config.json as an absolute path, `tensor_ops` names each weight edit by its operation
(`drop`, `d2t_absolute_to_offsets`), so the same edit is made again on the same draft."""
from __future__ import annotations

import datetime
from pathlib import Path

from .questions import DROP


def patch_of(answers) -> dict:
    """{'set': {key: value}, 'drop': [key]} from the best candidate's answers (to_dict form), plus
    `tensors` (the weight edits the winning candidate made: name -> what) and `recipe_override`
    (the recipe option that says the same without touching the weights) when it made any."""
    out: dict = {"set": {}, "drop": []}
    for a in answers.values():
        for key, value in a["edits"].items():
            if value == "<dropped>" or value is DROP:
                out["drop"].append(key)
            else:
                out["set"][key] = value
        if a.get("tensors"):
            out.setdefault("tensors", {}).update(a["tensors"])
            out.setdefault("tensor_ops", {}).update(a.get("tensor_ops") or {})
        if a.get("override"):
            out.setdefault("recipe_override", []).append(a["override"])
    return out


def expectation(best_row: dict, engine: str, release: str | None, prompts: str, card: str | None) -> dict:
    """guard.expect for the pair: per-position rates (vLLM), mean length (bonus token included), acceptance."""
    expect: dict = {}
    if best_row.get("per_position"):
        expect["per_position"] = [round(x, 3) for x in best_row["per_position"]]
    if best_row.get("mean_length"):
        expect["mean_length"] = round(best_row["mean_length"], 3)
    expect["acceptance"] = round(best_row["acceptance"], 4)
    expect["source"] = {"kind": "measured", "engine": engine, "release": str(release or "unknown"), "card": card or "cpu",
                        "prompts": prompts, "date": datetime.date.today().isoformat(), "by": "surgery probe"}
    return expect


def document(result: dict, draft: Path, target: Path, pins: dict, card: str | None = None) -> dict | None:
    """The --write document, or None when nothing was decided (an undecided probe writes nothing)."""
    dec = result["decision"]
    if dec["status"] != "decided":
        return None
    served = next((r for r in result["candidates"] if r["as_served"]), None)
    best = next((r for r in result["candidates"] if r["name"] == dec.get("candidate")), served)
    prompts = result["prompts"]
    return {
        "probe": {"status": dec["status"], "decision": dec.get("outcome"), "why": dec["why"], "candidate": best["name"],
                  "covers": dec.get("covers") or [],
                  "answers": {code: a["name"] for code, a in dec["answers"].items()},
                  "engine": result["engine"], "release": str(result["release"]), "pins": pins,
                  "prompts": prompts, "counts": result["counts"],
                  "figures": {r["name"]: {"acceptance": round(r["acceptance"], 4),
                                          "mean_prompt_acceptance": round(r["mean_prompt_acceptance"], 4),
                                          "prompts": r["prompts"], "stopped_early": r["stopped_early"]}
                              for r in result["candidates"] if r["error"] is None}},
        "config_patch": {"file": str((Path(draft) / "config.json").resolve()), **patch_of(dec["answers"])},
        "guard": {"expect": expectation(best, result["engine"], result["release"], prompts["source"], card)},
    }
