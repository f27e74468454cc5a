"""The vLLM context: a live drafter and target inside a vLLM worker.

What differs from HF and matters to every vLLM performer:
- attention layers are `AttentionLayerBase` modules registered by name in the engine's static
  forward context; KV sharing is by that name (`kv_sharing_target_layer_name`), read when the
  KV-cache specs are collected;
- whether the draft checkpoint brought its own embedding / head is a flag vLLM's EAGLE models set
  while loading (`has_own_embed_tokens`, `has_own_lm_head`; names in the engine card);
- EAGLE-3 targets return auxiliary hidden states through `EagleModelMixin`.
Nothing here imports vLLM at module level: tests and other loaders use stand-ins.
"""
from __future__ import annotations

from typing import Any

from ..text.diagnostics import SurgeryError, diag
from ..engine.cards import card
from .context import Context
from .mutations import SetAttr
from .paths import attention_path, get_path

MAYBE_ADD_HIDDEN_STATE = "_maybe_add_hidden_state"  # vLLM EagleModelMixin's capture step


def is_vllm_attention(obj: Any) -> bool:
    """A vLLM attention layer (or, without vLLM, anything shaped like one)."""
    try:
        from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
    except Exception:  # noqa: BLE001 - tests may use stand-ins without vllm
        return hasattr(obj, "kv_sharing_target_layer_name")
    return isinstance(obj, AttentionLayerBase)


def kv_sharing_mutations(label: str, attn: Any, target_layer_name: str, sync_impl: bool = True) -> list[SetAttr]:
    """The one place a draft attention layer is pointed at its KV source: the layer's
    `kv_sharing_target_layer_name` and, unless `sync_impl=False`, the backend impl's own copy (set
    at construction, None for late wiring; FlashInfer / ROCm read that one). Reversible."""
    muts = [SetAttr(label, attn, "kv_sharing_target_layer_name", target_layer_name, kind="attribute")]
    impl = getattr(attn, "impl", None)
    if sync_impl and impl is not None and hasattr(impl, "kv_sharing_target_layer_name"):
        muts.append(SetAttr(label + ":impl", impl, "kv_sharing_target_layer_name", target_layer_name, kind="attribute"))
    return muts


def aux_holder(target: Any) -> Any | None:
    """The module holding `aux_hidden_state_layers` (vLLM EagleModelMixin), as
    `SupportsEagle3.set_aux_hidden_state_layers` finds it; None for a target that has none."""
    for cand in (getattr(target, "model", None), target):
        if cand is not None and callable(getattr(cand, "_set_aux_hidden_state_layers", None)):
            return cand
    return None


def embedding_capture_is_copied(holder: Any) -> bool:
    """Whether an id-0 capture on ``holder`` returns a copy (probed with a small tensor)."""
    import torch

    probe = torch.zeros(1, 1)
    saved = tuple(getattr(holder, "aux_hidden_state_layers", ()))
    capture = getattr(holder, MAYBE_ADD_HIDDEN_STATE)
    stats = getattr(capture, "surgery_copy_stats", None)
    counted = dict(stats) if stats is not None else None
    out = capture([], 0, probe, None) if 0 in saved else []
    if counted is not None:  # this probe is not a forward of the target: embedding_copy_exercised counts those
        stats.update(counted)
    return bool(out) and out[0] is not probe


def embedding_copy_exercised(holder: Any) -> tuple[bool, str]:
    """Whether the forwards vLLM actually ran went through the id-0 copy (CopyEmbeddingCapture's
    counters: target forwards seen by a pre-hook outside the decorated model, copies made by the
    override). Stronger than :func:`embedding_capture_is_copied`, which calls the override itself: this
    fails when the target ran forwards and none of them took the copy (a forward that captures id 0
    some other way, a graph traced before the override). Passes with nothing to judge before the first
    forward, and for a compiled holder (a graph's Python side effects are not counted per call)."""
    capture = vars(holder).get(MAYBE_ADD_HIDDEN_STATE)
    stats = getattr(capture, "surgery_copy_stats", None)
    if stats is None:
        return False, "no copy installed on the aux holder"
    forwards, copies = stats["forwards"], stats["copies"]
    detail = f"target forwards seen={forwards} id-0 copies made={copies}"
    if getattr(holder, "do_not_compile", True) is False:
        return True, detail + " (compiled forward: counts not judged)"
    if forwards and not copies:
        return False, detail + ": the live forward does not capture aux layer 0 through the copy"
    return True, detail + ("" if forwards else " (no forward yet)")


def target_language_model(target_model: Any) -> Any:
    """The text model of a (possibly multimodal) vLLM target, as vLLM's proposers take it."""
    if target_model is not None and hasattr(target_model, "get_language_model"):
        try:
            return target_model.get_language_model()
        except Exception:  # noqa: BLE001 - a wrapper without a language model: itself
            return target_model
    return target_model


class VLLMContext(Context):
    engine = "vllm"

    def __init__(self, static_forward_context: dict | None = None, is_attention=None, method: str | None = None,
                 dummy_load: bool = False):
        """`is_attention` lets callers outside a vLLM process (tests with stand-ins, other
        loaders) say what counts as an attention layer; default: vLLM's AttentionLayerBase.
        `method`: the speculative method (decides what the has_own flags mean, see draft_has_own).
        `dummy_load`: the engine runs `load_format="dummy"` (every declared parameter is present)."""
        self.sfc = static_forward_context
        self.is_attention = is_attention or is_vllm_attention
        self.method = method
        self.dummy_load = dummy_load

    @classmethod
    def of(cls, vllm_config: Any, dummy_load: bool = False) -> "VLLMContext":
        """The context of a live engine: its static forward context and speculative method, from its config."""
        sfc = getattr(getattr(vllm_config, "compilation_config", None), "static_forward_context", None)
        spec = getattr(vllm_config, "speculative_config", None)
        return cls(sfc, method=getattr(spec, "method", None), dummy_load=dummy_load)

    def static_checks(self, plan: Any, draft: Any, target: Any) -> list:
        problems = []
        for row_map in plan.layer_maps.values():
            for row in row_map:
                try:
                    t_attn = get_path(target, attention_path("vllm", target, row.target, "target"))
                except (AttributeError, IndexError, KeyError, TypeError):
                    problems.append(diag("SRG316", f"target layer {row.target} is not on this pipeline stage "
                                         "(no attention module here)"))
                    continue
                if not self.is_attention(t_attn):
                    problems.append(diag("SRG316", f"target layer {row.target} is a {type(t_attn).__name__}, not an "
                                         "attention layer held by this stage"))
        return problems

    def attention_pair(self, op: Any, draft: Any, target: Any) -> tuple[Any, Any]:
        """The draft and target attention layers a per-layer-pair op names (checked to be attention)."""
        d_attn = get_path(draft, attention_path("vllm", draft, op.draft_layer, "draft"))
        t_attn = get_path(target, attention_path("vllm", target, op.target_layer, "target"))
        for side, attn in (("draft", d_attn), ("target", t_attn)):
            if not self.is_attention(attn):
                raise SurgeryError(diag("SRG402", f"{op.id}: {side} layer is a {type(attn).__name__}, not an Attention"))
        return d_attn, t_attn

    def draft_has_own(self, draft: Any, role: str, path: str | None = None) -> bool | None:
        """vLLM's EAGLE models record while loading whether the checkpoint brought the role's weights
        (flag names per role in the card's `has_own_flags`). None: this draft class keeps no such
        record. For methods whose loader requires every weight (`loader_requires_all_weights`, e.g.
        draft_model) the answer is yes whatever the flags say."""
        vllm = card("vllm")
        if self.dummy_load:  # load_format="dummy": every declared parameter is initialised (SRG512)
            return True
        if self.method and self.method in vllm.loader_requires_all_weights:
            return True
        flag = vllm.has_own_flags.get(role)
        value = getattr(draft, flag, None) if flag else None
        return bool(value) if isinstance(value, bool) else None
