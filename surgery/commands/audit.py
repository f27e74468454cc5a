"""`surgery audit RECIPE --target T --draft D`: start vLLM in-process with its STOCK wiring (the plugin in
audit mode changes nothing), decode a few greedy prompts, and report how vLLM's wiring differs from the
recipe (surgery/vllm/audit.py). Exit 1 when a finding can change outputs or acceptance (severity error)."""
from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..text.diagnostics import EXIT_INVALID, EXIT_OK, Diagnostic, Location, SurgeryError, catalogue, diag, fail
from ..extras import require
from ..options import AuditOptions, fields_from
from ..facts import read_facts
from ..recipe import find_recipe, load_recipe
from ..checks.field import expected_methods
from ..facts.modelref import describe_pin, engine_model
from ..pairs import builtin_pair
from ..text.render import render_diagnostics

PROMPT_SEEDS = ([2, 17, 33, 101, 7, 250, 9], [2, 400, 401, 402, 5], list(range(2, 22)))


def _engine_arg(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier():
        raise fail("SRG011", f"--engine-arg expects KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def _prompts(vocab: int, n: int) -> list[list[int]]:
    return [[t % vocab for t in PROMPT_SEEDS[i % len(PROMPT_SEEDS)]] for i in range(n)]


def _spec_metrics(llm) -> dict:
    out = {}
    try:
        for m in llm.get_metrics():
            if m.name.startswith("vllm:spec_decode"):
                out[m.name] = getattr(m, "value", None) if hasattr(m, "value") else getattr(m, "values", None)
    except Exception as exc:  # noqa: BLE001 - metrics are context, not the audit
        out["unavailable"] = f"{type(exc).__name__}: {exc}"
    return out


def _logs_to_stderr() -> list:
    """Point vLLM's stdout log handlers at stderr for the run; returns (handler, old stream) to restore."""
    moved = []
    for name in ("vllm", ""):
        for h in logging.getLogger(name).handlers:
            if isinstance(h, logging.StreamHandler) and getattr(h, "stream", None) in (sys.stdout, sys.__stdout__):
                moved.append((h, h.setStream(sys.stderr)))
    return moved


def run_audit(options: AuditOptions, out) -> int:
    recipe_path = str(find_recipe(options.recipe).resolve())
    recipe = load_recipe(recipe_path)
    target, draft = read_facts(options.target), read_facts(options.draft)
    method = options.method or _recipe_method(recipe, draft, target)
    engine_args = dict(_engine_arg(a) for a in options.engine_arg)

    report_path = os.environ.get("SURGERY_REPORT")
    tmpdir = None
    if not report_path:
        tmpdir = tempfile.TemporaryDirectory(prefix="surgery-audit-")
        report_path = str(Path(tmpdir.name) / "report.json")
    # mode and recipe travel in the engine's own config (additional_config, which wins over SURGERY_MODE /
    # SURGERY_RECIPE in every process); the report path in the environment the workers inherit
    saved = {"SURGERY_REPORT": os.environ.get("SURGERY_REPORT")}
    os.environ["SURGERY_REPORT"] = report_path
    try:
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt

        from ..vllm import engine, plugin

        # vLLM logs to stdout (VLLM_LOGGING_STREAM, applied when the engine configures logging); stdout
        # carries only our result
        if "VLLM_LOGGING_STREAM" not in os.environ:
            os.environ["VLLM_LOGGING_STREAM"] = "ext://sys.stderr"
            saved["VLLM_LOGGING_STREAM"] = None
        moved = _logs_to_stderr()
        plugin.register()  # idempotent; vLLM's entry point does the same in every process
        # hub ids go to vLLM as ids, pinned to the commits the facts were read at (surgery.facts.modelref)
        kwargs = _engine_kwargs(options, target, draft, method, recipe_path, engine_args)
        if not options.json:
            sys.stderr.write(f"surgery audit: starting vLLM with stock wiring (method {method}, kv cache "
                             f"{options.kv_cache_dtype}), recipe {recipe.name} compared, no changes made\n")
        llm = LLM(**kwargs)
        moved += _logs_to_stderr()
        try:
            sp = SamplingParams(temperature=0.0, max_tokens=options.max_tokens, detokenize=False, ignore_eos=True)
            prompts = _prompts(target["vocab_size"], options.prompts)
            outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sp, use_tqdm=False)
            generated = sum(len(o.outputs[0].token_ids) for o in outs)
            metrics = _spec_metrics(llm)
        finally:
            engine.shutdown(llm)
        try:
            report = json.loads(Path(report_path).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise SurgeryError(diag("SRG708", f"no audit report at {report_path}: the plugin did not run in the "
                                    "engine (is spec-surgery installed where vLLM runs?)")) from None
    finally:
        for handler, stream in locals().get("moved", []):
            handler.setStream(stream)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if tmpdir is not None:
            tmpdir.cleanup()
    return _write_result(out, options, recipe, method, report, generated, metrics,
                         None if tmpdir is not None else report_path, target, draft)

def _recipe_method(recipe, draft, target) -> str:
    """The speculative method the recipe's engine hints accept for this pair (the first), else SRG011."""
    accept, _ = expected_methods(recipe, draft, target)
    if not accept:
        raise fail("SRG011", f"no speculative method known for recipe {recipe.name}", hint="pass --method")
    return accept[0]


def _engine_kwargs(options: AuditOptions, target, draft, method: str, recipe_path: str, engine_args: dict) -> dict:
    """vLLM's LLM(...) arguments: hub ids go to vLLM as ids, pinned to the commits the facts were read at
    (surgery.facts.modelref); mode and recipe travel in the engine's own config (additional_config)."""
    (t_model, t_rev), (d_model, d_rev) = engine_model(target.model), engine_model(draft.model)
    kwargs = dict(model=t_model, revision=t_rev,
                  speculative_config={"method": method, "model": d_model, "revision": d_rev,
                                      "num_speculative_tokens": options.num_speculative_tokens},
                  kv_cache_dtype=options.kv_cache_dtype, skip_tokenizer_init=True, enforce_eager=True, seed=0,
                  max_model_len=options.max_model_len, tensor_parallel_size=options.tp, pipeline_parallel_size=options.pp,
                  additional_config={"surgery": {"mode": "audit", "recipe": recipe_path}},
                  disable_log_stats=False)  # acceptance counters for the result
    if options.guard:
        kwargs["additional_config"]["surgery"]["guard"] = guard_settings(options)
    kwargs.update(engine_args)
    if options.attention_backend:
        kwargs["attention_backend"] = options.attention_backend
    return kwargs


def guard_settings(options: AuditOptions) -> dict:
    """`--guard`: the acceptance guard on the stock engine with its start-up canary (surgery/vllm/canary.py): the
    built-in text prompts x `guard_tokens`, decoded greedily after the warm-up and judged once with the support
    bound; against the built-in pair's measured expectation (index.yaml expect.vllm) when the audited pair is the
    recipe's built-in one (a user's pair has no recorded figure: collapse and break-even only)."""
    settings: dict = {"enabled": True, "canary": {"prompts": "builtin", "tokens": options.guard_tokens}}
    pair = builtin_pair(options.recipe)
    try:
        same = pair is not None and Path(options.target).resolve() == pair.target and \
            Path(options.draft).resolve() == pair.draft
    except (OSError, ValueError):
        same = False
    expect = ((pair.info.get("expect") or {}).get("vllm")) if same else None
    if expect:
        settings["expect"] = expect
    return settings


def guard_verdict(report: dict) -> dict:
    """The guard's verdict on the stock engine from the report's guard record (its canary): `silent`, `trips`
    (codes and kinds), `not run` (why), with the canary's counts and a line for the text output."""
    record = report.get("guard") or {}
    canary = record.get("canary")
    if not canary:
        return {"verdict": "not run", "text": "guard: no canary result in the report (was the guard on?)"}
    if not canary.get("ran"):
        return {"verdict": "not run", "canary": canary, "text": f"guard: canary not run: {canary.get('why')}"}
    trips = canary.get("trips") or []
    support = f"canary {canary['prompts']} prompts x {canary['tokens']} tokens, {canary['drafts']} drafts"
    if trips:
        text = "; ".join(f"{t['code']} {t['kind']}: {t['message']}" for t in trips)
        return {"verdict": "trips", "codes": [t["code"] for t in trips], "canary": canary,
                "expect_source": record.get("expect_source"), "text": f"guard ({support}): trips {text}"}
    rates = ", ".join(f"{a / canary['drafts']:.3f}" for a in canary["accepted_per_position"]) if canary["drafts"] else ""
    return {"verdict": "silent" if canary["drafts"] else "not judged", "codes": [], "canary": canary,
            "expect_source": record.get("expect_source"),
            "text": f"guard ({support}): {'silent' if canary['drafts'] else 'no draft to judge'}; per-position "
                    f"acceptance [{rates}], mean accepted length {canary.get('mean_length')}"}


def _write_result(out, options: AuditOptions, recipe, method: str, report: dict, generated: int, metrics,
                  kept_report: str | None, target, draft) -> int:
    """The audit's result: JSON, or the verdict first, then the findings (errors first, each once)."""
    findings = report.get("findings", [])
    # the KV-cache comparisons ran once the report reached stage kv_cache, or warmed (written after it)
    if report.get("stage") not in ("kv_cache", "warmed") and not any(f.get("code") == "SRG708" for f in findings):
        findings.append({**diag("SRG708", f"the audit stopped at stage {report.get('stage')!r}: the KV-cache "
                                "comparisons did not run").to_dict(), "stage": "kv_cache"})
    errors = [f for f in findings if f.get("severity") == "error"]
    guard = guard_verdict(report) if options.guard else None
    # a guard trip of severity error (collapse, SRG470) fails the audit as a wiring error does
    guard_errors = [c for c in (guard or {}).get("codes") or () if catalogue()[c].get("severity", "error") == "error"]
    result = {"ok": not errors and not guard_errors, "recipe": recipe.name, "method": method, "kv_cache_dtype": options.kv_cache_dtype,
              "findings": findings, "not_applicable": report.get("not_applicable", []),
              "checked": report.get("checked", {}), "generated_tokens": generated, "spec_decode_metrics": metrics,
              "report": kept_report,
              "models": {"target": target.pin(), "draft": draft.pin()},
              **({"guard": guard} if guard is not None else {})}
    if options.json:
        out.write(json.dumps(result, indent=2, default=str) + "\n")
    else:  # the verdict first, then the findings (the audit's product, so on stdout): errors first, each once
        na = result["not_applicable"]
        out.write(f"audit {recipe.name} (method {method}): {len(findings)} finding(s), {len(errors)} that can change "
                  f"outputs or acceptance; checked {', '.join(f'{k} x{v}' for k, v in result['checked'].items()) or 'nothing'}"
                  f"{'; not applicable: ' + '; '.join(n['check'] + ' (' + n['reason'] + ')' for n in na) if na else ''}\n")
        if guard is not None:
            out.write(guard["text"] + "\n")
        out.write(render_diagnostics([Diagnostic(f["code"], f["severity"], f["message"],
                                                 Location(key_path=f.get("location") or None), f.get("hint"))
                                      for f in findings], verbose=True))
        out.write("".join(f"{side}: {describe_pin(p)}\n" for side, p in result["models"].items()))
    return EXIT_INVALID if errors or guard_errors else EXIT_OK


def cmd_audit(args, out) -> int:
    require("audit")
    return run_audit(fields_from(AuditOptions, args, engine_arg=tuple(args.engine_arg or ())), out)
