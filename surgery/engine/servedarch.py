"""The architecture vLLM serves a draft config as, and whether a plain config is an EAGLE-3 head.

vLLM does not load a draft by the `architectures` its config.json states: for methods eagle, eagle3
and dflash it wraps the config in `EAGLEConfig`, which renames each architecture first
(`LlamaForCausalLM` becomes `Eagle3LlamaForCausalLM` under eagle3). Recipes name the served
architectures (the keys of vLLM's speculative registry), so a head is matched after the same
renaming, or a training template that still says `LlamaForCausalLM` would be refused although vLLM
serves it (issue 35). The rule is data (engine card `draft_architecture_rewrite`), checked against
EAGLEConfig by tests/test_oracle_draft_architectures.py.

A renamed plain config under eagle3 is accepted only where the file shows it is an EAGLE-3 head
(`EAGLE3_MARKERS`): a plain Llama config with none of them is a standalone model or an EAGLE-1 head,
which vLLM would load as an EAGLE-3 head and fail on (or worse, serve with fc shapes it guessed). With
`--weights` the checkpoint is a marker too (`fc_marker`): an `fc` taking 2-5 x hidden inputs is the
EAGLE-3 fusion of 2-5 captured target hidden states (surgery/checks/weights.py turns SRG207 into SRG206).
"""
from __future__ import annotations

from collections.abc import Mapping

from .card_model import ArchitectureRewrite
from .cards import card
from ..resources import load_data

# what shows a plain config is an EAGLE-3 head (config keys; the fc width is the weights-mode marker,
# surgery/checks/weights.py)
EAGLE3_MARKERS = ("draft_vocab_size", "eagle_aux_hidden_state_layer_ids", "eagle_config.eagle_aux_hidden_state_layer_ids")
# the weights-mode marker: an fc whose input is 2-5 hidden states wide (vLLM llama_eagle3.py: fc input =
# num_aux_hidden_states x target_hidden_size; EAGLE-3 fuses low / middle / high features, 3 by default)
FC_MARKER_AUX = (2, 5)


def rewrite_rules() -> Mapping[str, ArchitectureRewrite]:
    return card("vllm").draft_architecture_rewrite


def served_architecture(method: str | None, arch: str) -> str:
    """`arch` as vLLM's EAGLEConfig(method=...) renames it; unchanged for a method it does not wrap."""
    rule = rewrite_rules().get(method or "")
    if rule is None:
        return arch
    keep = rule.keep
    if arch in rule.keep_names or any(arch.startswith(p) for p in keep.startswith) \
            or any(arch.endswith(s) for s in keep.endswith):
        return arch
    return f"{rule.prefix}{arch}"


def served_architectures(method: str | None, archs) -> tuple[str, ...]:
    return tuple(served_architecture(method, a) for a in archs)


def _lookup(cfg: dict, dotted: str):
    for part in dotted.split("."):
        cfg = cfg.get(part) if isinstance(cfg, dict) else None
    return cfg


def eagle3_markers(raw: dict) -> list[str]:
    """The EAGLE-3 markers a draft config.json carries (keys present and not null / empty)."""
    return [key for key in EAGLE3_MARKERS if _lookup(raw, key) not in (None, [], {})]


def marker_hidden(raw: dict) -> int | None:
    """The hidden width an EAGLE-3 fc input is a multiple of: the draft config's `target_hidden_size`
    (what vLLM's llama_eagle3 sizes fc by), else its `hidden_size`."""
    for key in ("target_hidden_size", "hidden_size"):
        value = raw.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def fc_marker(shape, raw: dict) -> int | None:
    """How many hidden states an fc of `shape` ([out, in]) fuses when that is 2-5 (an EAGLE-3 marker),
    else None (a 1-D tensor, an input width that is no such multiple of the hidden width)."""
    hidden = marker_hidden(raw)
    if hidden is None or shape is None or len(shape) != 2 or shape[1] % hidden:
        return None
    k = shape[1] // hidden
    low, high = FC_MARKER_AUX
    return k if low <= k <= high else None


def speculative_class(architectures, raw: dict) -> str | None:
    """What makes a config a draft of a speculative family rather than a standalone language model
    (issue 42): its architecture as written is a key of vLLM's speculative-decoding registry
    (data/vllm_methods.yaml `draft_architectures` / `block_draft_architectures`, generated from
    registry.py `_SPECULATIVE_DECODING_MODELS`), named with the class vLLM builds for it; else its
    EAGLE-3 markers (`draft_vocab_size`, aux ids: no standalone model writes them); a draft class
    unsupported.yaml lists as served by no vLLM release counts too; else None. A plain
    `LlamaForCausalLM` (an EAGLE-1 head or a small model alike) is None: only the method tells them apart."""
    data = load_data("data/vllm_methods.yaml")
    table = {a["architecture"]: f"{a['class']} ({a['method']}, vLLM {a['module']})"
             for a in data.get("draft_architectures") or ()}
    for a in data.get("block_draft_architectures") or ():
        table.setdefault(a["architecture"], f"{a['class']} (block drafter, vLLM {a['module']})")
    for arch in architectures or ():
        if arch in table:
            return f"{arch} -> {table[arch]}"
    # speculative draft classes no vLLM release serves (Domino, SpecForge's MoE EAGLE-3 / EDSD / DSpine
    # drafts: unsupported.yaml, each with its source) are drafts of their own family all the same
    unserved = {a["name"] for a in load_data("data/unsupported.yaml").get("architectures_not_in_engine") or ()}
    for arch in architectures or ():
        if arch in unserved:
            return f"{arch} -> a speculative draft class vLLM does not serve (surgery/data/unsupported.yaml)"
    markers = eagle3_markers(raw)
    return f"EAGLE-3 head ({', '.join(markers)})" if markers else None


def vllm_class_of(archs, *, draft: bool) -> str | None:
    """The vLLM module and class its speculative registry builds for the first of `archs` it lists
    (surgery/data/vllm_methods.yaml, generated from vLLM's registry), for SRG204's hint; None for a name
    it does not list (a target: vLLM's text-generation registry, not kept offline)."""
    if not draft:
        return None
    data = load_data("data/vllm_methods.yaml")
    rows = {r["architecture"]: r for r in (data.get("draft_architectures") or []) + (data.get("block_draft_architectures") or [])}
    for arch in archs:
        row = rows.get(arch)
        if row is not None:
            module = row["module"]
            where = module if "." in module else f"model_executor/models/{module}.py"
            return f"{row['class']} ({where}) for {arch}"
    return None
