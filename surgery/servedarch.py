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
which vLLM would load as an EAGLE-3 head and fail on (or worse, serve with fc shapes it guessed).
"""
from __future__ import annotations

from .engines import card

# what shows a plain config is an EAGLE-3 head (config keys; the fc width is the weights-mode marker,
# surgery/checks/weights.py)
EAGLE3_MARKERS = ("draft_vocab_size", "eagle_aux_hidden_state_layer_ids", "eagle_config.eagle_aux_hidden_state_layer_ids")


def rewrite_rules() -> dict:
    return card("vllm").get("draft_architecture_rewrite") or {}


def served_architecture(method: str | None, arch: str) -> str:
    """`arch` as vLLM's EAGLEConfig(method=...) renames it; unchanged for a method it does not wrap."""
    rule = rewrite_rules().get(method or "")
    if rule is None:
        return arch
    keep = rule.get("keep") or {}
    if arch in (rule.get("keep_names") or ()) or any(arch.startswith(p) for p in keep.get("startswith") or ()) \
            or any(arch.endswith(s) for s in keep.get("endswith") or ()):
        return arch
    return f"{rule['prefix']}{arch}"


def served_architectures(method: str | None, archs) -> tuple[str, ...]:
    return tuple(served_architecture(method, a) for a in archs)


def _lookup(cfg: dict, dotted: str):
    for part in dotted.split("."):
        cfg = cfg.get(part) if isinstance(cfg, dict) else None
    return cfg


def eagle3_markers(raw: dict) -> list[str]:
    """The EAGLE-3 markers a draft config.json carries (keys present and not null / empty)."""
    return [key for key in EAGLE3_MARKERS if _lookup(raw, key) not in (None, [], {})]
