"""vLLM 0.32's speculative methods, read from its own code (tests/test_oracle_method_coverage.py,
tools/gen_method_coverage.py): which `speculative_config.method` values `SpeculativeConfig` accepts
(the `SpeculativeMethod` Literal, nested Literals flattened), what `__post_init__` makes of each (the
method after its normalisation, and where the draft weights come from), and what each speculators
algorithm (`SUPPORTED_SPECULATORS_TYPES`, algos.py) becomes.

Where the draft comes from is observed, not typed in: `__post_init__` runs on a bare config with
`num_speculative_tokens=1`, no `model` and a stand-in target, and the `model` it leaves says it:
- still None and "without speculative model": the method loads the draft named in `model` (named);
- the stand-in target's path: it loads draft weights from the target checkpoint (target_checkpoint);
- a sentinel such as "ngram": no draft model (none); `custom_class` asks for a proposer class (none).
The run stops where the stand-in lacks what a real ModelConfig has; everything read before that is
vLLM's own logic.
"""
from __future__ import annotations

import dataclasses
import typing
from types import SimpleNamespace

TARGET = "<target checkpoint>"


def _flat(literal) -> list[str]:
    out: list[str] = []
    for arg in typing.get_args(literal):
        out.extend([arg] if isinstance(arg, str) else _flat(arg))
    return out


def accepted_methods() -> list[str]:
    from vllm.config.speculative import SpeculativeMethod

    return list(dict.fromkeys(_flat(SpeculativeMethod)))


def _bare_config(method: str):
    from vllm.config.speculative import SpeculativeConfig

    obj = object.__new__(SpeculativeConfig)
    for f in dataclasses.fields(SpeculativeConfig):
        if f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            value = f.default_factory()  # type: ignore[misc]
        else:
            value = None
        object.__setattr__(obj, f.name, value)
    obj.method, obj.num_speculative_tokens, obj.model = method, 1, None
    obj.target_model_config = SimpleNamespace(model=TARGET, model_weights=None, quantization=None)
    return obj


def classify(method: str) -> dict:
    """{method, normalised, draft: named | target_checkpoint | none, evidence}."""
    obj = _bare_config(method)
    error = ""
    try:
        obj.__post_init__()
    except Exception as exc:  # noqa: BLE001 - the stand-in target ends the run; what was set is the answer
        error = f"{type(exc).__name__}: {exc}"
    if obj.model == TARGET:
        draft = "target_checkpoint"
    elif obj.model is None and "without speculative model" in error:
        draft = "named"
    else:
        draft = "none"
    return {"method": method, "normalised": obj.method, "draft": draft,
            "evidence": f"model={obj.model!r}" + (f"; {error.splitlines()[0][:120]}" if error else "")}


def methods() -> list[dict]:
    """One entry per normalised method: where its draft comes from, and the names vLLM folds into it."""
    out: dict[str, dict] = {}
    for name in accepted_methods():
        c = classify(name)
        entry = out.setdefault(c["normalised"], {"method": c["normalised"], "draft": c["draft"], "aliases": []})
        if name != c["normalised"]:
            entry["aliases"].append(name)
    return list(out.values())


# the smallest speculators file each algorithm's updater accepts (keys it reads without a default)
_PROBE_FILE = {"aux_hidden_state_layer_ids": [1], "mask_token_id": 0,
               "speculators_config": {"proposal_methods": [{"speculative_tokens": 1}], "verifier": {"name_or_path": "t"}}}


def speculators_algorithms() -> list[dict]:
    """Each `speculators_model_type` vLLM reads: the method and parallel_drafting it serves with
    (`build_vllm_speculative_config`) and the draft architecture it builds for a llama / qwen3 layer."""
    from vllm.transformers_utils.configs.speculators.algos import SUPPORTED_SPECULATORS_TYPES
    from vllm.transformers_utils.configs.speculators.base import SpeculatorsConfig

    out = []
    for name, update in SUPPORTED_SPECULATORS_TYPES.items():
        spec = SpeculatorsConfig.build_vllm_speculative_config({**_PROBE_FILE, "speculators_model_type": name})
        archs = set()
        for layer_type in ("llama", "qwen3"):
            built = {"model_type": layer_type}
            try:
                update(config_dict=dict(_PROBE_FILE), pre_trained_config=built)
            except ValueError:  # this algorithm has no class for that layer type
                continue
            archs.update(built.get("architectures") or ())
        out.append({"speculators_model_type": name, "method": spec["method"],
                    "parallel_drafting": bool(spec.get("parallel_drafting", False)), "architectures": sorted(archs)})
    return out


# the model modules of vLLM's block / parallel drafters (a registry entry whose module or class names
# one of these is a DFlash / DSpark / P-EAGLE draft class)
BLOCK_DRAFT_MARKERS = ("dflash", "dspark", "lilicorr", "peagle")


def block_draft_architectures() -> list[dict]:
    """Every draft architecture vLLM's speculative-decoding registry serves with a block / parallel
    drafter: the architecture, the module and class it loads."""
    from vllm.model_executor.models.registry import _SPECULATIVE_DECODING_MODELS

    out = []
    for arch, (module, cls) in _SPECULATIVE_DECODING_MODELS.items():
        text = f"{arch} {module} {cls}".lower()
        if any(m in text for m in BLOCK_DRAFT_MARKERS):
            out.append({"architecture": arch, "module": module, "class": cls})
    return out


# ------------------------------------------------------------------ draft architectures (issue 35)
PROBE_ARCH = "ProbeForCausalLM"


def served_architecture(method: str, arch: str) -> str:
    """`arch` as vLLM's own EAGLEConfig(method=...) renames a draft config's architecture."""
    from transformers import PretrainedConfig
    from vllm.transformers_utils.configs.eagle import EAGLEConfig

    return EAGLEConfig(PretrainedConfig(architectures=[arch], vocab_size=1), method=method).architectures[0]


def eagle_config_methods() -> list[str]:
    """The methods vLLM wraps a draft config for (EAGLEConfig raises ValueError for the others)."""
    out = []
    for m in accepted_methods():
        try:
            served_architecture(m, PROBE_ARCH)
        except ValueError:
            continue
        out.append(m)
    return out


def draft_architectures() -> list[dict]:
    """Every registry architecture a named-draft method loads: the names EAGLEConfig(method) keeps as they
    are (a config stating one is loaded as it says), with the plain names it renames into it (vLLM's
    prefix, observed on a probe name, taken off and the renaming checked), and the method whose prefix
    the name carries, the longest first (Eagle3LlamaForCausalLM is kept under eagle too: `also_kept_by`)."""
    from vllm.model_executor.models.registry import _SPECULATIVE_DECODING_MODELS

    methods = eagle_config_methods()
    prefix = {m: served_architecture(m, PROBE_ARCH)[: -len(PROBE_ARCH)] for m in methods}
    out = []
    for arch, (module, cls) in _SPECULATIVE_DECODING_MODELS.items():
        kept = [m for m in methods if served_architecture(m, arch) == arch]
        if not kept:
            continue
        owner = max(kept, key=lambda m: len(prefix[m]) if arch.startswith(prefix[m]) or arch.endswith(prefix[m]) else 0)
        plain = arch[len(prefix[owner]):] if arch.startswith(prefix[owner]) else ""
        written = [arch] + ([plain] if plain[:1].isupper() and served_architecture(owner, plain) == arch else [])
        out.append({"architecture": arch, "method": owner, "module": module, "class": cls, "written_as": written,
                    "also_kept_by": [m for m in kept if m != owner]})
    return out
