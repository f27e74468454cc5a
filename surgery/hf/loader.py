"""Loading the tiny Gemma 4 pair (or any Gemma 4 target + assistant folders) into transformers."""
from __future__ import annotations


def load_pair(target_dir, draft_dir, device="cpu", dtype=None):
    """Load (target, draft) from HF folders: safetensors only, no remote code, eval mode."""
    import torch

    from ..live.hf import record_missing_keys
    from .compat import check_release, gemma4_classes

    Gemma4ForCausalLM, Gemma4AssistantForCausalLM = gemma4_classes()  # SRG436 where the release moved them

    dtype = dtype or torch.float32
    kwargs = dict(use_safetensors=True, trust_remote_code=False, dtype=dtype, output_loading_info=True)
    models = []
    for cls, folder in ((Gemma4ForCausalLM, target_dir), (Gemma4AssistantForCausalLM, draft_dir)):
        model, info = cls.from_pretrained(str(folder), **kwargs)
        # what the checkpoint did not bring (read by `keep ... must_exist` and `if_draft_has_own`)
        record_missing_keys(model, info.get("missing_keys", ()))
        models.append(model.to(device).eval())
    check_release(models[0], models[1])  # SRG436: the KV-sharing contract and DynamicCache.crop the loop needs
    return models[0], models[1]
