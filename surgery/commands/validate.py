"""`surgery validate` / `surgery plan` (and each release of `surgery releases`): read the pair, resolve the
recipe, run the checks, print the verdict, the plan or JSON."""
from __future__ import annotations

import json
import sys
from dataclasses import replace

from ..checks.config_spelling import installed_vllm_version
from ..checks.sglang_start import algorithm_of, family_of
from ..checks.field import with_findings
from ..engine.releases import judged_version
from ..text.diagnostics import EXIT_INVALID, EXIT_OK, SurgeryError, diag
from ..facts import read_facts
from ..facts.fromconfig import with_overrides  # --hf-overrides: the served target (issue 65)
from ..facts.modelref import describe_pin, target_ref_for, verifier_note
from ..options import CheckOptions, fields_from
from ..plan import Runtime, render_table
from ..recipe import load_recipe
from ..text.render import Line, counts, render_diagnostics
from ..resolver import resolve
from ..modelfiles.sidebyside import any_remote, side_by_side
from .checks import run_checks, weights_text


def runtime(args, engine: str):
    return Runtime(engine=engine, pp_size=args.pp, tp_size=args.tp, kv_cache_dtype=args.kv_cache_dtype,
                   attention_backend=args.attention_backend, device=getattr(args, "device", None),
                   engine_version=getattr(args, "engine_version", None))


#: diagnostics that are part of the result, not findings: printed on stdout with it (SRG058: which target the
#: speculators verifier resolved to)
RESULT_CODES = ("SRG058",)


def judged_release(args, release: str | None) -> tuple[str, str] | None:
    """(the vLLM release the verdict judges, why that one), for --engine vllm: `surgery releases`' release,
    else --engine-version, else the installed vLLM, else the newest the data covers."""
    if getattr(args, "engine", None) != "vllm":
        return None
    if release is not None:
        return release, "surgery releases"
    return judged_version("vllm", getattr(args, "engine_version", None), installed_vllm_version())


def sglang_release(args) -> str | None:
    """--engine-version for --engine sglang (a usage error, SRG011, when it holds no release number); None: the
    SGLang checks judge the installed SGLang, else the newest release the data covers (checks/sglang_start.py)."""
    if getattr(args, "engine", None) != "sglang" or getattr(args, "engine_version", None) is None:
        return None
    return judged_version("sglang", args.engine_version, None)[0]


def verdict_line(plan, name: str, verbose: bool = False, judged: tuple[str, str] | None = None) -> str:
    """validate's first line: the verdict, the release it was judged for, what was checked, and how many
    findings follow on stderr."""
    maps = "; ".join(f"{n}: " + ", ".join(f"{r.draft}->{r.target}" for r in rows)
                     for n, rows in plan.layer_maps.items() if rows)
    said = counts([d for d in plan.diagnostics if d.code not in RESULT_CODES], verbose=verbose)
    on = f" for vLLM {judged[0]} ({judged[1]})" if judged else ""
    return (f"{'valid' if plan.ok else 'INVALID'}{on}: {name} for {plan.draft['model_type']} -> "
            f"{plan.target['model_type']} ({len(plan.operations)} operations, {len(plan.skipped)} skipped"
            f"{', ' + maps if maps else ''})" + (f"; {said}" if said else ""))


def check_options(args, target: str | None, target_from_verifier: bool, engine_version: str | None, recipe=None):
    """The checks' inputs (surgery/options.py), built once from the parsed flags: the target that was read
    (the speculators verifier when --target was left out) instead of writing it back into `args`. For SGLang,
    --method is its --speculative-algorithm (EAGLE3, EAGLE, NEXTN, DFLASH ...; a vLLM method name is taken
    as the algorithm that runs it): the checks read the algorithm, and the method family for what is common."""
    options = fields_from(CheckOptions, args, target=target, target_from_verifier=target_from_verifier,
                          engine_version=engine_version)
    if options.engine == "sglang":
        hint = ((getattr(recipe, "engine", None) or {}).get("vllm") or {}).get("method")
        algorithm = algorithm_of(options.method, hint)
        family = family_of(algorithm) if options.method else None
        if family == "eagle" and hint in ("mtp", "deepseek_mtp"):
            family = hint  # EAGLE runs an MTP layer too (NEXTN is its alias)
        options = replace(options, algorithm=algorithm, method=family or options.method)
    return options


def cmd_plan(args, out, err=None, release: str | None = None) -> int:
    """validate / plan. Text output: the verdict (validate) or the plan (plan) on stdout, first; the findings on
    stderr, errors then warnings, each once (surgery/text/render.py); notes with --verbose; --json: everything.
    `release`: `surgery releases`' run for one vLLM release (validate --engine-version RELEASE --json)."""
    err = err or sys.stderr
    recipe = load_recipe(args.recipe)
    if args.target is not None:  # both named: read side by side (by hub id each read is a round trip)
        draft, target = side_by_side(lambda: read_facts(args.draft), lambda: read_facts(args.target),
                                     threaded=any_remote(args.draft, args.target))
        target_ref, from_verifier = args.target, False
    else:
        draft = read_facts(args.draft)
        target_ref, from_verifier = target_ref_for(args.target, draft)
        target = read_facts(target_ref)
    # the target as the engine serves it: --hf-overrides read by the one path a config.json takes (issue 65)
    target = with_overrides(target, getattr(args, "hf_overrides", None))
    # from_verifier: the head is served as the model (`vllm serve <head>`)
    judged = judged_release(args, release)
    options = check_options(args, target_ref, from_verifier, judged[0] if judged else sglang_release(args), recipe)
    plan = resolve(recipe, draft, target, runtime(args, args.engine))
    plan, weights = run_checks(options, recipe, draft, target, plan)
    if from_verifier:
        plan = with_findings(plan, [verifier_note(draft, target)])
    fmt = "json" if release else plan_format(args)
    command = "validate" if release else args.command
    if fmt == "json":
        data = plan.to_dict()
        if judged:
            data["judged_release"] = {"engine": "vllm", "version": judged[0], "from": judged[1]}
        if weights is not None:
            data["weights"] = weights.to_dict()
        data["fetched"] = fetched_summary()
        out.write(json.dumps(data, indent=2) + "\n")
    elif fmt == "mermaid":
        from ..mermaid import render_mermaid  # only this format draws (tests/test_architecture.py LAZY_MODULES)

        out.write(render_mermaid(plan) + "\n")
        err.write(render_diagnostics(plan.diagnostics, verbose=args.verbose))  # stdout stays a flowchart
    elif command == "validate":
        out.write(verdict_line(plan, recipe.name, verbose=args.verbose, judged=judged) + "\n")
        out.flush()
        err.write(render_diagnostics([d for d in plan.diagnostics if d.code not in RESULT_CODES],
                                     verbose=args.verbose))
        err.flush()
        for d in plan.diagnostics:
            if d.code in RESULT_CODES:
                out.write(Line(d, 1).render() + "\n")
        if weights is not None:
            out.write(weights_text(weights) + "\n")
        out.write(pins_text(plan))
    else:
        out.write(render_table(plan, verbose=args.verbose, inline_diagnostics=False) + "\n")
        out.flush()
        err.write(render_diagnostics(plan.diagnostics, verbose=args.verbose))
        err.flush()
        if weights is not None:
            out.write("\n" + weights_text(weights) + "\n")
        out.write(pins_text(plan))
    return EXIT_OK if plan.ok else EXIT_INVALID


def plan_format(args) -> str:
    """validate / plan: the output format from `--format` and `--json` (`--json` is `--format json`;
    with another --format it is a usage error)."""
    fmt = getattr(args, "format", None)
    if args.json and fmt not in (None, "json"):
        raise SurgeryError(diag("SRG011", f"--json and --format {fmt} ask for two formats",
                                hint="give one: --format json (or --json), --format table or --format mermaid"))
    return "json" if args.json else (fmt or "table")


def fetched_summary() -> dict:
    """What this process fetched from the hub (surgery.hub.ledger), without importing it when no hub
    reference was given."""
    ledger = sys.modules.get("surgery.hub.ledger")
    if ledger is None:
        return {"requests": 0, "bytes": 0, "files": [], "cache_hits": 0, "hosts": []}
    return ledger.LEDGER.summary()


def pins_text(plan) -> str:
    """The models' pins, for text output, when one came from the hub or its cache (a local path is
    already named in the lines above); then what was fetched."""
    pins = {side: getattr(plan, side).get("pin") for side in ("target", "draft")}
    if not any(p and p.get("commit") for p in pins.values()):
        return ""
    lines = [f"{side}: {describe_pin(p)}" for side, p in pins.items()]
    f = fetched_summary()
    lines.append(f"fetched: {f['requests']} requests, {f['bytes']:,} bytes ({len(f['files'])} files; "
                 f"{f['cache_hits']} reads from the cache)")
    return "\n".join(lines) + "\n"
