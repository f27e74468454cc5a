"""What the HF side takes from transformers' internals, in one place, and the refusal when a release moved
them (issue 69).

The loop (surgery/hf/generate.py), the static verify (verifygraph.py), the loader and the guard's counts
of transformers' own assisted generation (standalone.py) rely on more than the public ``generate``:

* the Gemma 4 KV-sharing contract: target attentions carry ``layer_type``, ``is_kv_shared_layer`` and
  ``store_full_length_kv``, and a forward with ``return_shared_kv_states=True`` returns the published K/V;
* ``DynamicCache.crop`` with a negative count (the rejection on the DynamicCache path);
* the model classes ``Gemma4ForCausalLM`` / ``Gemma4AssistantForCausalLM`` (5.25 moved the assistant to
  its own model folder; it is still exported at the top level);
* for the guard's counts of assisted generation: ``GenerationMixin._get_candidate_generator`` and the
  candidate generator's ``update_candidate_strategy``;
* the cache keyword: ``past_key_values`` up to 5.2x, ``cache`` from the release that renamed it (5.25
  still takes the old name, with a FutureWarning per call, until 5.40). ``cache_kwarg`` is defined in
  surgery/live/hf.py, below this layer, because the kernel's KV routing (live/kvrouting.py) needs it too;
  it is re-exported here.

Each is checked by what the release has (never by its version number); a release that lacks one is
refused with SRG436 naming the release and what moved, before any decoding: a coded refusal, never a
wrong answer. The range CI runs (pyproject's ``apply`` extra) is in docs/library.md.
"""
from __future__ import annotations

import inspect

from ..live.hf import cache_kwarg  # noqa: F401 - its one home, below hf/: live/kvrouting.py needs it too
from ..text.diagnostics import SurgeryError, diag

ATTENTION_ATTRS = ("layer_type", "is_kv_shared_layer", "store_full_length_kv")


def release() -> str:
    try:
        import transformers
    except ImportError:  # noqa: BLE001 - the caller's import error is the diagnostic
        return "none"
    return getattr(transformers, "__version__", "unknown")


def refuse(what: str) -> SurgeryError:
    return SurgeryError(diag("SRG436", f"transformers {release()}: {what}"))


def text_config(config):
    get = getattr(config, "get_text_config", None)
    return get() if get is not None else config


def output_cache(out):
    """The cache a forward's output carries (``cache`` where the release renamed the field)."""
    got = getattr(out, "cache", None) if "cache" in getattr(out, "__dataclass_fields__", {}) else None
    return got if got is not None else out.past_key_values


def generate_output(sequences, cache):
    """transformers' ``GenerateDecoderOnlyOutput`` of ``sequences`` and ``cache``, under the field's name
    in this release."""
    from transformers.generation.utils import GenerateDecoderOnlyOutput

    field = "cache" if "cache" in getattr(GenerateDecoderOnlyOutput, "__dataclass_fields__", {}) else "past_key_values"
    return GenerateDecoderOnlyOutput(sequences=sequences, **{field: cache})


def release_gap() -> str | None:
    """What the static verify needs of ``transformers.cache_utils`` and this release lacks (None: all there)."""
    try:
        from transformers import Cache
        from transformers.cache_utils import StaticLayer
    except ImportError as exc:
        return f"no Cache / StaticLayer in transformers.cache_utils ({exc})"
    if not hasattr(StaticLayer, "update") or "layers" not in inspect.signature(Cache.__init__).parameters:
        return "Cache(layers=...) / StaticLayer.update moved"
    return None


def gemma4_classes():
    """(Gemma4ForCausalLM, Gemma4AssistantForCausalLM), SRG436 where the release exports neither."""
    try:
        from transformers import Gemma4AssistantForCausalLM, Gemma4ForCausalLM
    except ImportError as exc:
        raise refuse(f"the Gemma 4 classes moved (`from transformers import Gemma4ForCausalLM, "
                     f"Gemma4AssistantForCausalLM`: {exc})") from None
    return Gemma4ForCausalLM, Gemma4AssistantForCausalLM


def _missing_attrs(attention) -> list[str]:
    return [a for a in ATTENTION_ATTRS if not hasattr(attention, a)]


def check_release(target, draft=None) -> None:
    """SRG436 unless this transformers has what the MTP loop relies on: ``DynamicCache.crop`` and the
    KV-sharing attributes on every attention of the target (and of the draft, when given)."""
    from transformers import DynamicCache

    crop = getattr(DynamicCache, "crop", None)
    if crop is None:
        raise refuse("DynamicCache has no crop(): the loop's rejection (a negative crop) cannot run")
    for role, model in (("target", target), ("draft", draft)):
        if model is None:
            continue
        layers = getattr(getattr(model, "model", None), "layers", None)
        if layers is None:
            layers = getattr(getattr(getattr(model, "model", None), "language_model", None), "layers", None)
        for i, layer in enumerate(layers or ()):
            missing = _missing_attrs(getattr(layer, "self_attn", None))
            if missing:
                raise refuse(f"the {role}'s layer {i} attention has no {', '.join(missing)}: the Gemma 4 shared-KV "
                             "states contract moved (surgery/hf/compat.py lists what the loop relies on)")


def check_assisted(target) -> None:
    """SRG436 unless transformers' assisted generation still builds its candidate generator where the
    guard's per-draft counts are read (standalone.py ``_per_draft``)."""
    if not callable(getattr(target, "_get_candidate_generator", None)):
        raise refuse("GenerationMixin has no _get_candidate_generator: the assistant's candidate generator moved, "
                     "so the per-draft counts of assisted generation cannot be read")
    try:
        from transformers.generation.candidate_generator import AssistedCandidateGenerator
    except ImportError as exc:
        raise refuse(f"the assistant class moved (transformers.generation.candidate_generator."
                     f"AssistedCandidateGenerator: {exc})") from None
    if not callable(getattr(AssistedCandidateGenerator, "update_candidate_strategy", None)):
        raise refuse("AssistedCandidateGenerator has no update_candidate_strategy: the per-draft counts of "
                     "assisted generation cannot be read")
