"""SGLang's own draft wiring, computed from the configs: what SGLang does with no recipe.

Each function restates one SGLang rule (engine card surgery/data/engines/sglang.yaml `wiring`,
release pinned there); tests/sglang/test_oracle.py runs SGLang's own code, taken from the pinned
wheel's source, on the same inputs and requires the same answer. No torch, no SGLang import.
"""
from __future__ import annotations

from typing import Any

from ..engine import capture
from ..engine.card_model import Wiring
from ..engine.cards import card


def wiring_card() -> Wiring:
    return card("sglang").wiring


def aux_ids_read(draft_config: dict) -> list[int] | None:
    """The aux ids SGLang reads from a draft config (surgery/engine/capture.py, its one home)."""
    return capture.sglang_aux_ids_read(draft_config)


def layers_to_capture(target_model_type: str, num_layers: int, layer_ids: list[int] | None) -> list[int]:
    """What the target's `set_eagle3_layers_to_capture(layer_ids)` stores (surgery/engine/capture.py)."""
    return capture.sglang_layers_to_capture(target_model_type, num_layers, layer_ids)


def capturable(num_layers: int, version: str | None = None) -> range:
    """The vLLM-convention ids SGLang `version` can capture (card `capturable_ids`; None: the installed
    SGLang, else the newest release the card read; surgery/engine/capture.py). A release older than every
    one the card read: not known, so every id up to L-1 (the loop's range) is returned, unchecked."""
    judgement = capture.judged("sglang", version)
    ids = judgement.ids(num_layers) if judgement is not None else None
    return ids if ids is not None else range(0, num_layers)


def hot_token_id(d2t: list[int]) -> list[int]:
    """The draft-to-target id map SGLang builds from a checkpoint's d2t offsets (llama_eagle3.py)."""
    return [int(off) + i for i, off in enumerate(d2t)]


def load_lm_head_from_target(draft_config: dict) -> bool:
    """LlamaForCausalLMEagle3: the head is taken from the target when the config is untied and gives
    no draft_vocab_size. Decided on the config: SGLang never looks at what the checkpoint brought."""
    return not draft_config.get("tie_word_embeddings", False) and draft_config.get("draft_vocab_size") is None


def head_calls(algorithm: str, load_from_target: bool) -> str:
    """Which wiring call EagleDraftWorker.init_lm_head makes: `set_embed_and_head`, `set_embed`, or
    `none` (the standalone worker overrides it with a no-op)."""
    cards = wiring_card()
    if algorithm in cards.head_never_touched_for:
        return "none"
    if algorithm == "EAGLE3":
        return "set_embed_and_head" if load_from_target else "set_embed"
    return "set_embed_and_head"


def stock_wiring(algorithm: str, draft_config: dict, target_config: dict) -> dict[str, Any]:
    """Where SGLang points the draft's roles with no recipe: input_embeddings / lm_head -> `target`
    or `own`, and the target's layers_to_capture (EAGLE3 only)."""
    call = head_calls(algorithm, load_lm_head_from_target(draft_config))
    embed = "target" if call != "none" else "own"
    if call == "set_embed" and "target_hidden_size" in draft_config \
            and draft_config["target_hidden_size"] != draft_config.get("hidden_size"):
        embed = "own"  # llama.py set_embed returns early
    out: dict[str, Any] = {"call": call, "input_embeddings": embed,
                           "lm_head": "target" if call == "set_embed_and_head" else "own"}
    if algorithm == "EAGLE3":
        out["layers_to_capture"] = layers_to_capture(target_config.get("model_type", ""),
                                                     int(target_config["num_hidden_layers"]),
                                                     aux_ids_read(draft_config))
    return out
