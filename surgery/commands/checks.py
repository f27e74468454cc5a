"""`surgery validate/plan` glue: run the field checks (always) and the weights checks (`--weights`) on a
resolved plan, and render what they found. Kept out of cli.py so the command stays a thin switch."""
from __future__ import annotations

from dataclasses import replace

from ..engine.releases import release
from ..options import CheckOptions
from ..checks.field import field_checks, with_findings
from ..formats.findings import format_findings  # the draft's published format (issue 24)
from ..checks.last_slot import last_slot_check
from ..checks.config_spelling import cli_spelling_check  # keys another vLLM release reads (SRG676-678)
from ..checks.release_rules import cli_release_check  # rules that hold for some vLLM releases only (SRG720-724)
from ..checks.kv_scales import cli_kv_scales_check  # calculate_kv_scales with KV-shared drafts (SRG514-517)
from ..checks.engine_start import cli_engine_start_check
from ..checks.sglang_start import sglang_start_check  # what SGLang refuses at start and at model build (SRG770-778)
from ..checks.restated import drop_restated  # one fact, one line (codes.yaml restated_by)
from ..checks.catalogue3 import cli_catalogue3  # RoPE whole, draft length per release, block vocabularies (SRG618-622)
from ..checks.catalogue4 import cli_catalogue4  # the field's fourth catalogue (SRG800-805)


def run_checks(options: CheckOptions, recipe, draft, target, plan):
    """(plan with the findings merged into its diagnostics, weights report or None)."""
    report = None
    own = None
    if options.weights:
        from ..checks.weights import check_weights  # --weights only: the safetensors reader stays out of validate

        report = check_weights(plan, recipe, draft, target, options.draft, options.target)
        own = report.own
    findings = field_checks(plan, recipe, draft, target, method=options.method, method_given=options.method_given,
                            max_model_len=options.max_model_len, own_roles=own,
                            serving_flags={"hf_overrides": options.hf_overrides,
                                           "num_speculative_tokens": options.num_speculative_tokens,
                                           "draft_kv_cache_dtype": options.draft_kv_cache_dtype,
                                           "engine_version": options.engine_version if options.engine == "vllm" else None})
    if report is not None:
        findings = list(report.findings) + findings
        if report.superseded:  # the weights answered a config-only finding (SRG207): theirs replaces it
            plan = replace(plan, diagnostics=tuple(d for d in plan.diagnostics if d.code not in report.superseded))
    judged = release("vllm", options.engine_version)[0] if options.engine == "vllm" and options.engine_version else None
    findings += format_findings(draft, target, producer=options.producer,
                                runners=(judged.facts.get("runners") or None) if judged is not None else None,
                                num_speculative_tokens=options.num_speculative_tokens,
                                method=options.method or recipe.engine.get("vllm", {}).get("method"),
                                engine=options.engine)
    findings += last_slot_check(plan, draft, target, producer=options.producer)
    findings += cli_spelling_check(options, recipe, draft)
    findings += cli_release_check(options, recipe, draft, target, device=plan.runtime.device)
    findings += cli_kv_scales_check(options, plan)
    findings += cli_engine_start_check(options, plan, draft, target, recipe)
    findings += sglang_start_check(plan, draft, target, version=options.engine_version, algorithm=options.algorithm,
                                   context_length_asked=options.max_model_len, kv_cache_dtype=options.kv_cache_dtype,
                                   attention_backend=options.attention_backend, producer=options.producer)
    findings += cli_catalogue3(options, plan, recipe, draft, target)
    findings += cli_catalogue4(options, plan, recipe, draft, target)
    if recipe.guard is not None:  # the recipe's own guard settings, one line (SRG480)
        from ..guard.precedence import recipe_note

        findings += recipe_note(recipe)
    if options.engine_check:
        findings += cli_engine_check(options, recipe, draft, target, plan, report)
    plan = with_findings(plan, findings)
    return replace(plan, diagnostics=tuple(drop_restated(list(plan.diagnostics)))), report


def weights_text(report) -> str:
    lines = [f"weights: draft {report.draft_tensors} tensors ({report.draft_folder}), target {report.target_tensors} "
             f"tensors ({report.target_folder}); " + ("safetensors headers only" if not report.data_reads else
                                                     "headers, plus bounded data reads:")]
    lines.extend(f"  data read: {r}" for r in report.data_reads)
    lines.extend(f"  at load time: {role}: {what}" for role, what in report.decisions.items())
    return "\n".join(lines)


def cli_engine_check(options: CheckOptions, recipe, draft, target, plan, report) -> list:
    """--engine-check: the pair and the serving flags asked of the engine (surgery/engine/ask/check.py); with
    --weights, the headers the report read are the shapes it is compared with."""
    headers = None
    if report is not None:  # the headers --weights read, read again (local files; hub ranges from their cache)
        from ..checks.weights import checkpoint_of

        headers = {role: {t.name: list(t.shape) for t in checkpoint_of(facts, ref).tensors.values()}
                   for role, facts, ref in (("target", target, options.target), ("draft", draft, options.draft))}
    from ..engine.ask.check import engine_check  # the engine asked itself (SRG760-SRG766): --engine-check only

    rt = plan.runtime
    return engine_check(engine=options.engine, release=options.engine_version, python=options.engine_python,
                        draft_raw=draft.raw, target_raw=target.raw,
                        method=(options.algorithm if options.engine == "sglang" else None) or options.method
                        or (recipe.engine.get(options.engine) or {}).get("method"),
                        tp=rt.tp_size, pp=rt.pp_size, max_model_len=options.max_model_len,
                        kv_cache_dtype=rt.kv_cache_dtype, hf_overrides=options.hf_overrides,
                        k=options.num_speculative_tokens, headers=headers)
