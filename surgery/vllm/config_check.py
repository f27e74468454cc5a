"""The start-up check itself (surgery/vllm/startup.py wraps vLLM's `create_engine_config` and calls
`check_engine_config` with the config vLLM built): the selected recipe read, schema-checked and
resolved against both checkpoints' config.json and the runtime; errors raise `SurgeryError` there,
warnings are coded lines in vLLM's log. Apart from the wrap because every process vLLM starts
imports the plugin, and only the one that builds a config needs this.
"""
from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..checks.release_rules import parallel_drafting_finding, rejection_finding
from ..checks.dspark_layout import start_finding  # DSpark's block-layout key per release (SRG741, issue 58)
from ..checks.probe_patch import start_finding as patch_finding  # the probe's patch in force (SRG505, issue 66)
from ..text.diagnostics import Diagnostic, SurgeryError, diag
from ..engine.releases import release
from ..engine.cards import card
from ..formats.findings import misread_by_runner
from . import hooks, kv_scales
from .guard import guard_config
from .log import CHECKED, DIAGNOSTIC, get_logger
from .selection import audit_mode, load_selected_recipe, plan_from_config, selected_recipe, strict, surgery_config

ENV_TRACEBACK = "SURGERY_TRACEBACK"
_HOOK_MARK = "__surgery_excepthook__"  # our excepthook, installed once (the wrap has its own mark, startup.py)


def accepted_methods() -> Mapping[str, tuple[str, ...]]:
    """Recipe `engine.vllm.method` hint -> vLLM methods (after vLLM's normalisation) that run it
    (the vLLM engine card's `methods`)."""
    return card("vllm").methods


def _warn(d: Diagnostic) -> None:
    get_logger().warning(DIAGNOSTIC.fmt, d.render())


def method_diagnostic(recipe: Any, method: str | None) -> Diagnostic | None:
    """SRG031 when the configured speculative method does not run the recipe's family; SRG032
    (info) when the recipe states no vLLM method, so that nothing was compared."""
    hint = (recipe.engine.get("vllm") or {}).get("method")
    if hint is None:
        return diag("SRG032", f"recipe {recipe.name} declares no engine.vllm.method; the speculative method "
                    f"{method!r} was not compared with it")
    accepted = accepted_methods().get(hint, [hint])
    if method not in accepted:
        return diag("SRG031", f"recipe {recipe.name} is written for vLLM method(s) {', '.join(accepted)} "
                    f"(engine.vllm.method: {hint}) but the engine is configured with method {method!r}",
                    location=recipe.location(("engine", "vllm", "method")))
    return None


def release_notes(spec: Any) -> list[Diagnostic]:
    """At start, against the running release's own data (surgery/data/releases/vllm.json): SRG047 when
    the data does not cover it, SRG724 when the engine runs a rejection sampler under which the
    plugin's output-equals-greedy claims do not hold."""
    rel, note = release("vllm", hooks.engine_version(), "vllm")
    out = [note] if note else []
    if rel is not None:
        found = rejection_finding(rel, getattr(spec, "rejection_sample_method", None),
                                  "speculative_config.rejection_sample_method")
        out += [found] if found is not None and found.severity == "warning" else []
    return out


def check_engine_args(engine_args: Any) -> None:
    """Before vLLM builds its config: what the running release refuses there with an uncoded error of its
    own, refused first with our code. With a recipe selected only (no recipe: nothing said). Today: P-EAGLE's
    parallel drafting on a release that runs it for the block drafters only (SRG723; 0.34 raises a pydantic
    ValidationError from SpeculativeConfig: "parallel_drafting is only supported by the dflash and dspark
    methods"), asked by the speculative config or by the recipe (engine.vllm.parallel_drafting)."""
    recipe_ref = selected_recipe(engine_args)
    spec = getattr(engine_args, "speculative_config", None)
    if recipe_ref is None or not isinstance(spec, Mapping):
        return
    try:
        recipe = load_selected_recipe(recipe_ref)
    except SurgeryError:
        _print_block_if_uncaught()
        raise
    hints = (getattr(recipe, "engine", None) or {}).get("vllm") or {}
    rel, _ = release("vllm", hooks.engine_version(), "vllm")  # SRG047 is said once the config is built
    if rel is None:
        return
    method = spec.get("method") or hints.get("method")
    parallel = spec.get("parallel_drafting") or hints.get("parallel_drafting")
    where = "speculative_config.parallel_drafting" if spec.get("parallel_drafting") else \
        f"{recipe.name}: engine.vllm.parallel_drafting"
    if _speculators_type(spec.get("model") or getattr(engine_args, "model", None)) == "peagle":
        # a speculators `peagle` file: vLLM turns it into eagle3 + parallel drafting (0.34 refuses the type)
        method, parallel, where = method or "eagle3", True, f"{spec.get('model')}: speculators_model_type"
    found = parallel_drafting_finding(rel, method, parallel, where)
    if found is not None:
        _print_block_if_uncaught()
        raise SurgeryError([found])


def _speculators_type(path: Any) -> str | None:
    """`speculators_model_type` of a local checkpoint's config.json (None: a hub id, no file, not one)."""
    try:
        raw = json.loads((Path(str(path)) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):
        return None
    return raw.get("speculators_model_type") if isinstance(raw, dict) else None


def check_engine_config(vllm_config: Any):
    """Read, schema-check and resolve the selected recipe against a freshly built VllmConfig.
    Returns the plan (None when no recipe is selected or there is nothing to resolve against)."""
    check_guard_config(vllm_config)
    recipe_ref = selected_recipe(vllm_config)
    if recipe_ref is None:
        return None
    log = get_logger()
    try:
        recipe = load_selected_recipe(recipe_ref)  # a bad recipe is an error even when nothing would apply it
        spec = getattr(vllm_config, "speculative_config", None)
        if spec is None:
            _warn(diag("SRG030", f"recipe {recipe.name} is selected but the engine has no speculative config: "
                       "nothing will be applied"))
            return None
        for note in release_notes(spec):
            _warn(note)
        found = method_diagnostic(recipe, getattr(spec, "method", None))
        if found is not None:
            log.log(logging.WARNING if found.severity == "warning" else logging.INFO, DIAGNOSTIC.fmt,
                    found.render())
        draft_cfg = getattr(spec, "draft_model_config", None)
        if draft_cfg is None:
            _warn(diag("SRG030", f"recipe {recipe.name} is selected but speculative method {spec.method!r} has no "
                       "draft model: nothing will be applied"))
            return None
        selection = plan_from_config(vllm_config, spec)
        plan = selection.plan
    except SurgeryError:
        _print_block_if_uncaught()
        raise
    if not plan.ok:
        _print_block_if_uncaught()
        raise SurgeryError(plan.errors)
    misread = draft_ids_misread(vllm_config, selection)
    misread += dspark_layout_misread(vllm_config, selection)
    misread += patch_not_said(vllm_config, selection)
    if misread and not audit_mode(vllm_config):  # the audit reports it (audit_config.config_findings)
        _print_block_if_uncaught()
        raise SurgeryError(misread)
    scale_errors = kv_scales.startup_check(vllm_config, plan)  # calculate_kv_scales with KV-shared layers (SRG514)
    if scale_errors and not audit_mode(vllm_config) and strict(vllm_config):  # the audit reports it (SRG711)
        _print_block_if_uncaught()
        raise SurgeryError(scale_errors)
    for d in plan.diagnostics:
        if d.severity == "warning":
            _warn(d)
    log.info(CHECKED.fmt, plan.recipe, len(plan.operations),
             plan.runtime.pp_size, plan.runtime.tp_size, plan.runtime.kv_cache_dtype)
    return plan


def check_guard_config(vllm_config: Any) -> None:
    """additional_config.surgery.guard checked here too (SRG475), where the server is configured: the
    engine core would refuse it at its scheduler, seconds later and in another process."""
    try:
        guard_config(vllm_config)
    except SurgeryError:
        _print_block_if_uncaught()
        raise


def serving_runner(vllm_config: Any) -> str:
    """Which vLLM model runner will serve: "v2" or "legacy" (vLLM's own choice, config/vllm.py
    use_v2_model_runner: the environment, Triton, the features the v2 runner lacks)."""
    try:
        return "v2" if vllm_config.use_v2_model_runner else "legacy"
    except Exception:  # noqa: BLE001 - a vLLM without the property runs the legacy runner
        return "legacy"


def draft_ids_misread(vllm_config: Any, selection: Any) -> list:
    """SRG656 errors: the runner that will serve reads other aux layers than the draft head was
    trained on (its format's id convention, ids nested where this runner does not look;
    surgery/formats/findings.py); SRG665: a speculators dflash / dspark file whose two numberings
    disagree. Refused at start: the plugin would otherwise capture, and verify,
    the layers vLLM read."""
    return misread_by_runner(selection.draft, selection.target, serving_runner(vllm_config))


def patch_not_said(vllm_config: Any, selection: Any) -> list:
    """SRG505: `additional_config.surgery.patch` names the probe's patch and the draft served does not say it
    (surgery/checks/probe_patch.py; serve the folder `surgery probe --write-draft DIR` wrote)."""
    path = surgery_config(vllm_config).get("patch")
    if not path:
        return []
    found = patch_finding(path, selection.draft.raw, str(selection.draft.source))
    return [found] if found is not None else []


def dspark_layout_misread(vllm_config: Any, selection: Any) -> list:
    """SRG741: the running release's DSpark speculator would draft in another block layout than the draft's
    config states (a layout key this release does not read; surgery/checks/dspark_layout.py, issue 58)."""
    found = start_finding(vllm_config, selection.draft, hooks.engine_version())
    return [found] if found is not None else []


def _print_block_if_uncaught() -> None:
    """Make an uncaught SurgeryError print as its coded block (chained to the previous hook for
    everything else). Installed only at the moment we refuse a start-up."""
    prev = sys.excepthook
    if getattr(prev, _HOOK_MARK, False):
        return

    def excepthook(exc_type, exc, tb):
        if isinstance(exc, SurgeryError) and not os.environ.get(ENV_TRACEBACK):
            sys.stderr.write(f"spec-surgery stopped engine start before loading any weight "
                             f"({ENV_TRACEBACK}=1 shows the traceback):\n{exc}\n")
            sys.stderr.flush()
            return
        prev(exc_type, exc, tb)

    setattr(excepthook, _HOOK_MARK, True)
    sys.excepthook = excepthook
