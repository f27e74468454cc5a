"""SRG514-SRG517: `calculate_kv_scales` with KV-shared draft layers, caught by name (issue 37).

With an FP8 KV cache and `calculate_kv_scales=True`, vLLM releases that have the option (0.25, 0.26:
surgery/data/vllm_engine_options.yaml, with the source of each fact) let every Attention layer compute
its k/v scales once, from its own inputs, in its first forward (`Attention.calc_kv_scales`, during the
profile run). A draft layer that reads a target layer's cache computes them too, from the draft's own
activations, and dequantises the target's cache with them: on the H200 (vLLM 0.26.0) the tiny Gemma 4
MTP pair accepted 0 of 2268 drafts, recipe or not, while the load-time verification said PASS (the
copied scales were overwritten after load).

The same finding comes from three places: `surgery validate / plan --calculate-kv-scales` (against
`--engine-version`, else the installed vLLM), the plugin's start-up check (the live cache config) and
the worker (the live layers' flags). The fix (`SURGERY_KV_SCALES=follow_target`, validate/plan
`--kv-scales-follow-target`) turns the error into SRG517 info: the plugin stops the draft layers' own
calculation at load and copies the target's computed scales after the warm-up (surgery/vllm/kv_scales.py).
Config-only: no torch, no vLLM import.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

from ..text.diagnostics import Diagnostic, Location, diag
from ..options import CheckOptions
from ..resources import load_data
from . import config_spelling  # installed_vllm_version read when called (tests set it)
from .config_spelling import release_version

FOLLOW_TARGET = "follow_target"


@lru_cache(maxsize=1)
def option_rules() -> dict:
    return load_data("data/vllm_engine_options.yaml")["calculate_kv_scales"]


def release_has_option(version: str | None) -> bool | None:
    """True / False for a release the data knows; None for one it does not (or no version)."""
    if version is None:
        return None
    v = release_version(version)
    rules = option_rules()
    if v in rules["has"]:
        return True
    if v in rules["removed"]:
        return False
    return None


def engine_step() -> str:
    return option_rules()["step"]


def shared_layers(plan: Any) -> list[tuple[int, int]]:
    return [(op.draft_layer, op.target_layer) for op in plan.ops("share_kv")]


def kv_scales_findings(plan: Any, *, calculate: bool, version: str | None, follow_target: bool,
                       kv_cache_dtype: str | None = None, source: str = "<engine>",
                       version_known: bool = True) -> list[Diagnostic]:
    """The findings for one plan served with `calculate_kv_scales=calculate` by vLLM `version`
    (None: not known which; checked as if it had the option)."""
    if not calculate:
        return []
    pairs = shared_layers(plan)
    where = Location(source, key_path="calculate_kv_scales")
    has = release_has_option(version)
    out: list[Diagnostic] = []
    if has is False:
        rules = option_rules()
        return [diag("SRG515", f"vLLM {version} has no calculate_kv_scales option ({rules['removed_by']}): an "
                     "engine started with it refuses the argument; nothing else was checked for it", where)]
    if has is None and version_known:
        out.append(diag("SRG516", f"vLLM {version or '(unknown release)'} is not among the releases whose "
                        f"calculate_kv_scales is known ({', '.join(option_rules()['has'] + option_rules()['removed'])}:"
                        " surgery/data/vllm_engine_options.yaml); checked as if it had the option", where))
    dtype = str(kv_cache_dtype if kv_cache_dtype is not None else plan.runtime.kv_cache_dtype or "auto")
    if not dtype.startswith("fp8"):
        return out  # scales are computed but never used on an unquantised cache
    if not pairs:
        return out
    layers = ", ".join(f"{d}->{t}" for d, t in pairs)
    if follow_target:
        out.append(diag("SRG517", f"calculate_kv_scales on a {dtype} cache with {len(pairs)} KV-shared draft layer(s) "
                        f"({layers}): the draft layers' own calculation is switched off at load and the target's "
                        "computed scales are copied onto them after the warm-up", where))
        return out
    out.append(diag("SRG514", f"calculate_kv_scales on a {dtype} cache (vLLM {version or 'release not given'}): the "
                    f"{len(pairs)} KV-shared draft layer(s) ({layers}) compute their own k/v scales from the draft's "
                    f"activations ({engine_step()}) and dequantise the target's cache with "
                    "them; the recipe's load-time scale copy is overwritten after load (H200, vLLM 0.26.0: 0 of 2268 "
                    "drafts accepted)", where))
    return out


def cli_kv_scales_check(options: CheckOptions, plan: Any) -> list[Diagnostic]:
    """`surgery validate/plan --calculate-kv-scales`: against `--engine-version`, else the installed vLLM."""
    if options.engine != "vllm" or not options.calculate_kv_scales:
        return []
    version = options.engine_version or config_spelling.installed_vllm_version()
    dtype = options.draft_kv_cache_dtype or options.kv_cache_dtype
    return kv_scales_findings(plan, calculate=True, version=version,
                              follow_target=bool(options.kv_scales_follow_target),
                              kv_cache_dtype=dtype, source="--calculate-kv-scales")
