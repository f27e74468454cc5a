"""Rules that hold for some vLLM releases and not others, each read from the releases' own code
(surgery/data/releases/vllm.json, tools/releasefacts.py): `surgery validate --engine-version V`, else the
installed vLLM's release, else a visible line that they were not checked (SRG048).

- SRG720 a speculators head whose verifier is a local path: 0.33+ refuse it when the head is served as
  the model (transformers_utils/config.py maybe_override_with_speculators).
- SRG721 `eagle_config.use_aux_hidden_state: false`: the V2 runner before 0.33 ignores it and feeds the
  concatenated aux hidden states (vllm#40656, the second cause of vllm#40551).
- SRG722 a `--method` the release's SpeculativeConfig does not accept (medusa / mlp_speculator removed
  in 0.33, custom_class in 0.34, step5_mtp new in 0.33, ...).
- SRG723 a draft architecture another release registers and this one does not (P-EAGLE removed in
  0.34, DFlash2Beam / XPress new in 0.33, ...), and parallel drafting for a method the release refuses it
  for (0.34: dflash and dspark only, so a native P-EAGLE head, a plain EAGLE-3 class, is refused too).
- SRG725 a speculators file whose `speculators_model_type` the release's reader does not register
  (speculators 0.9.0's `xpress` and `mtp`).
- SRG724 `--rejection-sample-method`: one the release does not have, or `fly` (lossy) / `synthetic`
  (fixed acceptance rates), under which output-equals-greedy and acceptance figures do not hold.

vLLM's own rewrites of the draft config, per release (issue 65; each rule read from the wheels:
vllm.json `rules`, `dspark_kept_architectures`, `dspark_qwen3_renamed`; held to 0.26 / 0.32 / 0.34 by
tests/release_oracle/):
- SRG750 an MTP k above the layer count (n_predict) that is no multiple of it;
- SRG751 FLy verification with k < 2;
- SRG752 a DFlash draft asking sample_from_anchor: refused by 0.27+'s DFlash speculator, ignored before;
- SRG753 a draft class the release renames to one it cannot serve (EAGLEConfig's prefix on P-EAGLE's
  registered names; method dspark's rewrite to DeepSeek-V4's DSparkDraftModel).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..text.diagnostics import ERROR, INFO, WARNING, Diagnostic, Location, diag
from ..options import CheckOptions
from ..engine.coverage import rewrites  # the MTP rewrite table (which MTP model type a target becomes)
from ..engine.releases import all_architectures, first_with, known, no_release, release, release_data
from ..engine.servedarch import served_architecture  # the class EAGLEConfig renames a draft to (SRG753)
from ..formats import original_config  # a speculators file's own keys, as written (facts hold it normalised)
from .config_spelling import NO_VERSION, serving
from .dspark_layout import layout_finding  # DSpark's block-layout key per release (SRG740, issue 58)

LOSSY = {"fly": "lossy: it accepts draft tokens the target's distribution would reject, so outputs are not "
                "the target's (greedy or sampled)",
         "synthetic": "synthetic: acceptance follows the configured synthetic_acceptance_rates, not the draft"}


def _is_local_verifier(name: Any) -> bool:
    """vLLM 0.33+'s test, in its order: not a string, not a valid repo id, or an existing path."""
    if not isinstance(name, str):
        return True
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        return True
    return Path(name).exists() or Path(name).is_symlink()


def verifier_finding(rel, raw: dict, source: str, served_as_model: bool) -> Diagnostic | None:
    raw = original_config(raw or {})
    spec = raw.get("speculators_config") if isinstance(raw, dict) else None
    verifier = spec.get("verifier") if isinstance(spec, dict) else None
    if not isinstance(verifier, dict) or "name_or_path" not in verifier:
        return None
    name = verifier.get("name_or_path")
    if not _is_local_verifier(name):
        return None
    where = Location(source, key_path="speculators_config.verifier.name_or_path")
    refuses = rel.rule("local_verifier_refused")
    if refuses is None:
        since = first_with("vllm", lambda f: (f.get("rules") or {}).get("local_verifier_refused"))
        return diag("SRG720", f"the head's verifier {name!r} is a local path: {rel.label()} still serves it as the "
                    f"model, {since} and later refuse it", where, severity=INFO)
    how = ("serving this head as the model (`vllm serve <head>`, as here: no --target)" if served_as_model else
           "serving this head as the model (`vllm serve <head>`)")
    return diag("SRG720", f"the head's verifier {name!r} is a local path: {rel.label()} refuses {how} at start "
                f"(\"Speculators verifier must name a remote model repository\", {refuses})", where,
                severity=ERROR if served_as_model else WARNING,
                hint="serve the target as --model with --speculative-config {\"model\": <head>}, or convert again with "
                     "the target's hub id (`surgery convert --to speculators --target org/name`)")


def speculators_type_finding(rel, raw: dict, source: str) -> Diagnostic | None:
    """SRG725: a speculators file of a type the release's reader does not register (speculators 0.9.0
    writes `xpress` and `mtp`; vLLM 0.33 refuses them: speculators/base.py)."""
    raw = original_config(raw or {})
    kind = raw.get("speculators_model_type") if isinstance(raw, dict) else None
    if kind is None or "speculators_config" not in raw:
        return None
    algos = rel.facts.get("speculators_algorithms") or []
    if kind in algos:
        return None
    return diag("SRG725", f"speculators_model_type {kind!r} is not one {rel.label()}'s speculators reader registers "
                f"({', '.join(algos)}): vLLM refuses the file at start (transformers_utils/configs/speculators/base.py)",
                Location(source, key_path="speculators_model_type"))


def aux_flag_finding(rel, raw: dict, source: str, method: str | None) -> Diagnostic | None:
    nested = raw.get("eagle_config") if isinstance(raw, dict) else None
    if not isinstance(nested, dict) or nested.get("use_aux_hidden_state") is not False:
        return None
    if method not in (None, "eagle3"):
        return None
    facts = rel.facts
    runners = facts.get("runners") or {}
    if not runners.get("v2") or rel.rule("v2_reads_use_aux_hidden_state"):
        return None
    fixed = first_with("vllm", lambda f: (f.get("rules") or {}).get("v2_reads_use_aux_hidden_state"))
    legacy = " (the legacy runner, used on CPU or with VLLM_USE_V2_MODEL_RUNNER=0, reads it)" \
        if rel.rule("legacy_reads_use_aux_hidden_state") else ""
    return diag("SRG721", f"eagle_config.use_aux_hidden_state is false, and {rel.label()}'s V2 model runner (the "
                f"default on GPU) ignores it: it concatenates the target's aux hidden states into a head trained "
                f"without them{legacy}; acceptance collapses silently (vllm#40656, fixed in {fixed})",
                Location(source, key_path="eagle_config.use_aux_hidden_state"),
                hint=f"serve on vLLM {fixed} or later, or with VLLM_USE_V2_MODEL_RUNNER=0 where the release has the "
                     "legacy runner")


def method_finding(rel, method: str | None, where: str) -> Diagnostic | None:
    if not method or rel.has_method(method):
        return None
    have = [v for v in known("vllm") if method in release_data("vllm")["releases"][v].get("methods", [])]
    return diag("SRG722", f"speculative method {method!r} is not one {rel.label()} accepts (releases that have it: "
                f"{_ranges(have)})", Location(where),
                hint="vLLM refuses an unknown method when it builds the speculative config; `surgery releases --json` "
                     "lists each release's methods")


def architecture_finding(rel, architectures: list[str], source: str) -> Diagnostic | None:
    archs = [a for a in architectures or [] if isinstance(a, str)]
    if not archs:
        return None
    elsewhere = all_architectures("vllm")
    missing = [a for a in archs if a in elsewhere and a not in rel.architectures()]
    if not missing or any(a in rel.architectures() for a in archs):
        return None
    have = [v for v in known("vllm") if missing[0] in (release_data("vllm")["releases"][v].get("draft_architectures") or {})]
    return diag("SRG723", f"draft architecture {missing[0]} is not in {rel.label()}'s draft registry "
                f"(model_executor/models/registry.py _SPECULATIVE_DECODING_MODELS); releases that register it: "
                f"{_ranges(have)}", Location(source, key_path="architectures"),
                hint="serve on a release that registers it, or convert the head to a format this release reads")


BLOCK_DRAFTERS = ("dflash", "dspark")  # the methods that draft in parallel by construction


def parallel_drafting_finding(rel, method: str | None, parallel: Any, where: str) -> Diagnostic | None:
    """SRG723 for P-EAGLE's parallel drafting: a release whose SpeculativeConfig refuses `parallel_drafting`
    for every method but the block drafters (0.34: "parallel_drafting is only supported by the dflash and
    dspark methods") cannot serve a parallel EAGLE-3 head, whatever its architecture is called (a native
    head is a plain EAGLE-3 class served with `{"method": "eagle3", "parallel_drafting": true}`)."""
    if not parallel or method in BLOCK_DRAFTERS or not rel.rule("parallel_drafting_block_only"):
        return None
    have = [v for v in known("vllm")
            if not ((release_data("vllm")["releases"][v].get("rules") or {}).get("parallel_drafting_block_only"))]
    return diag("SRG723", f"parallel drafting with method {method!r} (P-EAGLE) is gone from {rel.label()}: its "
                f"SpeculativeConfig accepts parallel_drafting only for {' and '.join(BLOCK_DRAFTERS)} "
                f"({rel.rule('parallel_drafting_block_only')}); releases that run it: {_ranges(have)}", Location(where),
                hint="serve on a release that runs P-EAGLE, or serve the head as plain EAGLE-3 after retraining it "
                     "for autoregressive drafting")


def mtp_type_finding(rel, draft, target, method: str | None) -> Diagnostic | None:
    """SRG723 for an MTP target's own layer: the MTP model type vLLM rewrites the target to
    (SpeculativeConfig.hf_config_override, data/vllm_mtp_rewrites.yaml) must be one the judged release
    has (its MTPModelTypes): Kimi-K3's kimi_k3_mtp arrived in 0.27, so 0.26 cannot build the draft."""
    if method not in (None, "mtp") or target is None or not (draft.source == target.source or draft.raw == target.raw):
        return None
    archs, types = set(target.architectures or ()), {target.model_type, target.text_model_type}
    draft_type = next((r["draft_model_type"] for r in rewrites().get("rewrites") or []
                       if r.get("architecture") in archs or r.get("model_type") in types), None)
    if not draft_type or draft_type == "?" or draft_type in (rel.facts.get("mtp_model_types") or []):
        return None
    have = [v for v in known("vllm") if draft_type in release_data("vllm")["releases"][v].get("mtp_model_types", [])]
    if not have:
        return None
    return diag("SRG723", f"the target's MTP layer is served as model type {draft_type!r}, which {rel.label()} does "
                f"not have (its MTPModelTypes; releases that have it: {_ranges(have)}): vLLM cannot build the draft",
                Location(target.source, key_path="model_type"),
                hint=f"serve on vLLM {have[0]} or later")


def _mtp_layers(draft, target, method: str | None) -> int | None:
    """n_predict for an MTP draft: the MTP layers vLLM serves (facts num_mtp_layers_served)."""
    if method not in (None, "mtp"):
        return None
    n = draft.scalars.get("num_mtp_layers_served")
    same = target is not None and (draft.source == target.source or draft.raw == target.raw)
    if method is None and not same:
        return None
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def mtp_k_finding(rel, draft, target, method: str | None, k: int | None) -> Diagnostic | None:
    """SRG750: k > n_predict and k % n_predict != 0 (SpeculativeConfig; 0.34 resolve_num_speculative_tokens)."""
    where = rel.rule("mtp_k_multiple_of_n_predict")
    n = _mtp_layers(draft, target, method)
    if not where or n is None or not isinstance(k, int) or k <= n or k % n == 0:
        return None
    ok = sorted({*range(1, n + 1), *range(n, 4 * n + 1, n)})
    return diag("SRG750", f"k {k} with {n} MTP layers (n_predict): {rel.label()} reuses the layers in turn and refuses "
                f"at start a k above {n} that is no multiple of it: \"num_speculative_tokens:{k} must be divisible by "
                f"n_predict={n}\" ({where})", Location(draft.source, key_path="num_nextn_predict_layers"),
                hint=f"serve with --num-speculative-tokens one of {', '.join(map(str, ok))}")


def fly_finding(rel, draft, target, method: str | None, value: str | None, k: int | None) -> Diagnostic | None:
    """SRG751: FLy with k < 2 (an MTP draft with no k takes its layer count)."""
    where = rel.rule("fly_needs_two_tokens")
    if value != "fly" or not where:
        return None
    given = k if isinstance(k, int) else _mtp_layers(draft, target, method)
    if given is None or given >= 2:
        return None
    how = f"k {given}" if k is not None else f"no k given, so the MTP layer count {given}"
    return diag("SRG751", f"rejection_sample_method 'fly' with {how}: {rel.label()} refuses at start: \"FLy requires "
                f"num_speculative_tokens to be at least 2.\" ({where})", Location("--rejection-sample-method"),
                hint="serve FLy with --num-speculative-tokens 2 or more, or with rejection_sample_method standard")


def dflash_anchor_finding(rel, draft, method: str | None) -> Diagnostic | None:
    """SRG752: a DFlash draft asking sample_from_anchor (its dflash_config; a speculators dflash file's top-level
    key where the release's reader copies it there)."""
    if method not in (None, "dflash"):
        return None
    raw = original_config(draft.raw or {})
    if not isinstance(raw, dict):
        return None
    nested = raw.get("dflash_config") if isinstance(raw.get("dflash_config"), dict) else {}
    key, asked = "dflash_config.sample_from_anchor", nested.get("sample_from_anchor")
    if "speculators_config" in raw and str(raw.get("speculators_model_type", "")).startswith("dflash"):
        key, asked = "sample_from_anchor", raw.get("sample_from_anchor")
        if asked is True and not rel.rule("dflash_reader_copies_sample_from_anchor"):
            return diag("SRG752", f"the speculators file says sample_from_anchor: true; {rel.label()}'s reader does not "
                        "copy it and its DFlash speculator serves the 1 + N layout (the anchor is the bonus token): a "
                        "head trained to predict from the anchor proposes shifted tokens, acceptance falls",
                        Location(draft.source, key_path=key), severity=WARNING)
    if asked is not True:
        return None
    if method is None and not any("DFlash" in a for a in draft.architectures or []):
        return None
    refused = rel.rule("dflash_sample_from_anchor_refused")
    if refused:
        return diag("SRG752", f"{key} is true: {rel.label()}'s DFlash speculator refuses it when the engine builds it: "
                    f"\"sample_from_anchor=True is not supported for DFlash\" ({refused})",
                    Location(draft.source, key_path=key))
    return diag("SRG752", f"{key} is true, and {rel.label()}'s DFlash speculator sets sample_from_anchor False whatever "
                "the config says: it serves the 1 + N layout (the anchor is the bonus token), so a head trained to "
                "predict from the anchor proposes shifted tokens; outputs stay the target's, acceptance falls "
                "(0.27+ refuse it at start)", Location(draft.source, key_path=key), severity=WARNING)


DSPARK_V4_TYPES = ("deepseek_v4", "deepseek_v41")


def rename_finding(rel, draft, method: str | None) -> Diagnostic | None:
    """SRG753: the class vLLM builds is not the one config.json names, and the release cannot serve it."""
    archs = [a for a in draft.architectures or [] if isinstance(a, str)]
    raw = original_config(draft.raw or {})
    registry = rel.architectures()
    if not archs or not isinstance(raw, dict):
        return None
    if method in ("eagle", "eagle3", "dflash") and "speculators_config" not in raw:
        arch = archs[0]
        served = served_architecture(method, arch)
        if served != arch and arch in registry and served not in registry:
            return diag("SRG753", f"{rel.label()} registers {arch}, but under method {method!r} EAGLEConfig renames it "
                        f"{served} before building it, which this release does not register: it refuses at start "
                        f"(\"Model architectures ['{served}'] are not supported for now\"; transformers_utils/configs/"
                        "eagle.py)", Location(draft.source, key_path="architectures"),
                        hint=f"name the class the release serves under {method} (an {served[:len(served) - len(arch)]}... "
                             "name), or write the head as a speculators file, which is not renamed")
    kept = rel.facts.get("dspark_kept_architectures")
    if method == "dspark" and kept is not None and archs[0] in registry and archs[0] not in kept:
        model_type = raw.get("model_type")
        if rel.facts.get("dspark_qwen3_renamed") and archs[0] == "DSparkDraftModel" and model_type == "qwen3":
            return None
        if model_type in DSPARK_V4_TYPES:
            return None
        renamed = [v for v in known("vllm") if (release_data("vllm")["releases"][v].get("dspark_qwen3_renamed"))]
        return diag("SRG753", f"method dspark: {rel.label()}'s SpeculativeConfig keeps only {', '.join(kept)} and rewrites "
                    f"any other draft class to DeepSeek-V4's DSparkDraftModel (model_type deepseek_v4): this "
                    f"{model_type} draft named {archs[0]} is built as a DeepSeek-V4 draft and fails at load "
                    f"(config/speculative.py)", Location(draft.source, key_path="architectures"),
                    hint=f"name the class the release keeps ({', '.join(kept)})"
                         + (f", or serve on {_ranges(renamed)} (a qwen3 DSparkDraftModel is served as Qwen3DSparkModel "
                            "there)" if renamed else ""))
    return None


def rejection_finding(rel, value: str | None, where: str) -> Diagnostic | None:
    if not value:
        return None
    present, values = rel.config_field("rejection_sample_method")
    if not present or (values is not None and value not in values):
        return diag("SRG724", f"rejection_sample_method {value!r} is not one {rel.label()} accepts "
                    f"({', '.join(values or []) or 'no such field'})", Location(where), severity=ERROR)
    if value in LOSSY:
        return diag("SRG724", f"rejection_sample_method {value!r} is {LOSSY[value]}: surgery's output-equals-greedy "
                    "and acceptance checks do not hold under it, and acceptance figures are not comparable",
                    Location(where), severity=WARNING, hint="use 'standard' to compare with greedy or measure the head")
    return None


def _ranges(versions: list[str]) -> str:
    if not versions:
        return "none"
    allv = known("vllm")
    runs, start, prev = [], None, None
    for v in allv:
        if v in versions:
            start = start or v
            prev = v
        elif start:
            runs.append(start if start == prev else f"{start}-{prev}")
            start = None
    if start:
        runs.append(start if start == prev else f"{start}-{prev}")
    return ", ".join(runs)


def release_findings(version: str | None, draft, *, method: str | None, served_as_model: bool,
                     rejection_sample_method: str | None = None, why_none: str = "", target=None,
                     parallel_drafting: Any = None, num_speculative_tokens: int | None = None,
                     device: str | None = None) -> list[Diagnostic]:
    """Every release rule for this draft on `version` (None: SRG048, not checked); `device` as --device gave it
    (None: not known)."""
    if version is None:
        return [no_release("vllm", why_none or "no vLLM release known", draft.source)]
    rel, note = release("vllm", version, draft.source)
    out = [note] if note else []
    if rel is None:
        return out
    raw = draft.raw or {}
    for found in (verifier_finding(rel, raw, draft.source, served_as_model),
                  speculators_type_finding(rel, raw, draft.source),
                  aux_flag_finding(rel, raw, draft.source, method),
                  method_finding(rel, method, "--method"),
                  architecture_finding(rel, list(draft.architectures or []), draft.source),
                  mtp_type_finding(rel, draft, target, method),
                  parallel_drafting_finding(rel, method, parallel_drafting, "engine.vllm.parallel_drafting"),
                  rejection_finding(rel, rejection_sample_method, "--rejection-sample-method"),
                  layout_finding(rel, draft, method, device),
                  mtp_k_finding(rel, draft, target, method, num_speculative_tokens),
                  fly_finding(rel, draft, target, method, rejection_sample_method, num_speculative_tokens),
                  dflash_anchor_finding(rel, draft, method),
                  rename_finding(rel, draft, method)):
        if found is not None:
            out.append(found)
    return out


def cli_release_check(options: CheckOptions, recipe, draft, target=None, device: str | None = None) -> list[Diagnostic]:
    """`surgery validate/plan`: against `--engine-version`, else the installed vLLM (vllm engine only); `device`:
    the plan's runtime device (--device)."""
    if options.engine != "vllm":
        return []
    method, version, hints = serving(options, recipe)
    return release_findings(version, draft, method=method, served_as_model=options.target_from_verifier,
                            rejection_sample_method=options.rejection_sample_method, why_none=NO_VERSION,
                            target=target, parallel_drafting=hints.get("parallel_drafting"),
                            num_speculative_tokens=options.num_speculative_tokens, device=device)
