"""The audit's config findings (surgery/vllm/audit.py): the field's config checks run with what the live engine
runs, not with what a user would type: its speculative method, max_model_len, hf_overrides, k and draft KV-cache
dtype (`engine_check_options`, the same named inputs `surgery validate` builds from its flags), the installed
release's third catalogue, the aux layers the serving runner reads (SRG656), the DSpark layout the speculator
reads (SRG741), and the drafter's own length against the target's (SRG645).

Why apart from the wiring comparisons: these read configurations and facts, never a live module; each audit
stage finds them once, after comparing the wiring.
"""
from __future__ import annotations

from typing import Any

from ..checks.catalogue3 import catalogue3_findings
from ..checks.dspark_layout import audit_finding  # the DSpark speculator's own layout (SRG741, issue 58)
from ..checks.field import field_checks, normalise_method
from ..options import CheckOptions


def engine_check_options(proposer: Any) -> CheckOptions:
    """The checks' options read from the running engine's own config: what `surgery validate` builds from
    its flags (surgery/options.py), so both callers hand the same checks the same named inputs."""
    spec = proposer.speculative_config
    target_config = proposer.vllm_config.model_config
    overrides = getattr(target_config, "hf_overrides", None)
    return CheckOptions(engine="vllm", method=getattr(spec, "method", None),
                        max_model_len=getattr(target_config, "max_model_len", None),
                        hf_overrides=overrides if isinstance(overrides, dict) else None,
                        num_speculative_tokens=getattr(spec, "num_speculative_tokens", None),
                        draft_kv_cache_dtype=getattr(spec, "kv_cache_dtype", None))


def config_findings(audit: Any, proposer: Any, selection: Any) -> None:
    """Field checks of surgery/checks/field.py with what the engine really runs (its method), on
    the facts the plan was resolved from."""

    options = engine_check_options(proposer)
    method = normalise_method(options.method)
    flags = {"hf_overrides": options.hf_overrides, "num_speculative_tokens": options.num_speculative_tokens,
             "draft_kv_cache_dtype": options.draft_kv_cache_dtype}
    for d in field_checks(audit.plan, selection.recipe, selection.draft, selection.target,
                          method=options.method, method_given=True,  # the engine runs it: as if given
                          max_model_len=options.max_model_len, serving_flags=flags):
        audit.findings.append(("load", d))
    from .hooks import engine_version

    for d in catalogue3_findings(audit.plan, selection.recipe, selection.draft, selection.target,
                                 method=method,
                                 parallel=bool(getattr(proposer.speculative_config, "parallel_drafting", False)),
                                 version=engine_version(), max_model_len=options.max_model_len):
        audit.findings.append(("load", d))
    from .config_check import draft_ids_misread  # the runner that serves reads other aux layers (SRG656)

    for d in draft_ids_misread(proposer.vllm_config, selection):
        audit.findings.append(("load", d))
    found = audit_finding(proposer, selection.draft)
    if found is not None:
        audit.findings.append(("load", found))
    drafter_length(audit, proposer)


def drafter_length(audit: Any, proposer: Any) -> None:
    """SRG645 from the engine's own numbers: the draft's max_model_len gates the drafter
    (gpu_model_runner._input_fits_in_drafter); below the target's, long sequences get token-0 drafts."""
    spec = proposer.speculative_config
    draft_config = getattr(spec, "draft_model_config", None)
    target_len = getattr(proposer.vllm_config.model_config, "max_model_len", None)
    draft_len = getattr(draft_config, "max_model_len", None)
    if not isinstance(draft_len, int) or not isinstance(target_len, int):
        audit.na("drafter_length", "this vLLM has no draft max_model_len to compare")
        return
    audit.count("drafter_length")
    if draft_len < target_len:
        k = getattr(spec, "num_speculative_tokens", None) or 1
        audit.add("load", "SRG645", f"live engine: the draft's max_model_len is {draft_len}, the target's {target_len}: "
                  f"past {draft_len - k} tokens the drafter is not run and its tokens are 0", "draft_model_config.max_model_len")
