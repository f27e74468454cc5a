"""Build a tiny random-weight Gemma 4 target + Gemma 4 MTP assistant pair.

Usage: python bench/vllm_probe/build_tiny.py [OUT_DIR]   (default /tmp/vllm_probe)

Target layer layout (6 layers, num_kv_shared_layers=2):
    idx : 0 s, 1 s, 2 f, 3 s | 4 s (-> 3), 5 f (-> 2)   (| = first KV-shared layer)
so the last non-shared sliding layer is 3 and the last non-shared full layer is 2.
Draft (assistant) layers [s, s, s, f] therefore map to target [3, 3, 3, 2].
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

TARGET_LAYER_TYPES = [
    "sliding_attention",
    "sliding_attention",
    "full_attention",
    "sliding_attention",
    "sliding_attention",
    "full_attention",
]
TARGET_NUM_KV_SHARED = 2
DRAFT_LAYER_TYPES = [
    "sliding_attention",
    "sliding_attention",
    "sliding_attention",
    "full_attention",
]
VOCAB = 512
TARGET_HIDDEN = 64
DRAFT_HIDDEN = 32
ROPE = {
    "full_attention": {
        "partial_rotary_factor": 0.25,
        "rope_theta": 1000000.0,
        "rope_type": "proportional",
    },
    "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"},
}


def expected_draft_to_target() -> dict[int, int]:
    """What vLLM's Gemma4Proposer._setup_gemma4_kv_sharing should produce."""
    n_non_shared = len(TARGET_LAYER_TYPES) - TARGET_NUM_KV_SHARED
    last = {}
    for i, lt in enumerate(TARGET_LAYER_TYPES[:n_non_shared]):
        last[lt] = i
    return {d: last[lt] for d, lt in enumerate(DRAFT_LAYER_TYPES)}


def _common_text_kwargs() -> dict:
    return dict(
        vocab_size=VOCAB,
        head_dim=32,
        global_head_dim=64,
        num_key_value_heads=1,
        num_attention_heads=2,
        max_position_embeddings=1024,
        sliding_window=16,
        rope_parameters=ROPE,
        rms_norm_eps=1e-6,
        hidden_activation="gelu_pytorch_tanh",
        attention_k_eq_v=False,
        enable_moe_block=False,
        tie_word_embeddings=True,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
        # Bigger init than 0.02 so greedy argmax is not a near-tie everywhere.
        initializer_range=0.2,
    )


def _make_copy_draft(draft, target) -> None:
    """Turn the random draft into a "predict the input token again" draft.

    The target's embedding is shared into the draft by vLLM; pre_projection
    keeps the first DRAFT_HIDDEN dims of [target_embed(tok) ; hidden], the
    decoder layers become identities (o_proj = down_proj = 0) and the tied
    lm_head / embed_tokens is set to the same slice of the target embedding,
    so argmax(logits) is (almost always) the input token itself. Random tiny
    targets repeat tokens a lot, so this draft gets real acceptances and the
    spec-decode == greedy oracle exercises the accept path, not only rejects.
    """
    import torch

    with torch.no_grad():
        temb = target.get_input_embeddings().weight
        draft.model.embed_tokens.weight.copy_(temb[:, :DRAFT_HIDDEN])
        pre = draft.pre_projection.weight  # (DRAFT_HIDDEN, 2 * TARGET_HIDDEN)
        pre.zero_()
        pre[:, :DRAFT_HIDDEN] = torch.eye(DRAFT_HIDDEN)
        for layer in draft.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()


def build(
    out_dir: str | Path = "/tmp/vllm_probe", seed: int = 0, draft_kind: str = "copy"
) -> tuple[Path, Path]:
    """draft_kind: "copy" (accepting draft, see _make_copy_draft) or "random"."""
    import torch
    from transformers import (
        Gemma4AssistantConfig,
        Gemma4AssistantForCausalLM,
        Gemma4ForCausalLM,
        Gemma4TextConfig,
    )

    out = Path(out_dir)
    tdir, ddir = out / "target", out / "draft"
    tdir.mkdir(parents=True, exist_ok=True)
    ddir.mkdir(parents=True, exist_ok=True)

    tcfg = Gemma4TextConfig(
        hidden_size=TARGET_HIDDEN,
        intermediate_size=128,
        num_hidden_layers=len(TARGET_LAYER_TYPES),
        layer_types=TARGET_LAYER_TYPES,
        num_kv_shared_layers=TARGET_NUM_KV_SHARED,
        hidden_size_per_layer_input=16,
        vocab_size_per_layer_input=VOCAB,
        use_double_wide_mlp=False,
        final_logit_softcapping=30.0,
        **_common_text_kwargs(),
    )
    tcfg.architectures = ["Gemma4ForCausalLM"]
    torch.manual_seed(seed)
    target = Gemma4ForCausalLM(tcfg).to(torch.float32).eval()
    target.save_pretrained(tdir, safe_serialization=True)

    dtext = Gemma4TextConfig(
        hidden_size=DRAFT_HIDDEN,
        intermediate_size=64,
        num_hidden_layers=len(DRAFT_LAYER_TYPES),
        layer_types=DRAFT_LAYER_TYPES,
        num_kv_shared_layers=len(DRAFT_LAYER_TYPES),
        hidden_size_per_layer_input=0,
        vocab_size_per_layer_input=0,
        use_double_wide_mlp=False,
        final_logit_softcapping=None,
        **_common_text_kwargs(),
    )
    dcfg = Gemma4AssistantConfig(
        text_config=dtext,
        backbone_hidden_size=TARGET_HIDDEN,
        use_ordered_embeddings=False,  # centroid masking captures CUDA graphs
        tie_word_embeddings=True,
    )
    dcfg.architectures = ["Gemma4AssistantForCausalLM"]
    torch.manual_seed(seed + 1)
    draft = Gemma4AssistantForCausalLM(dcfg).to(torch.float32).eval()
    if draft_kind == "copy":
        _make_copy_draft(draft, target)
    elif draft_kind != "random":
        raise ValueError(draft_kind)
    draft.save_pretrained(ddir, safe_serialization=True)

    for d in (tdir, ddir):
        cfg = json.loads((d / "config.json").read_text())
        cfg["dtype"] = "float32"
        (d / "config.json").write_text(json.dumps(cfg, indent=2))
    return tdir, ddir


if __name__ == "__main__":
    t, d = build(sys.argv[1] if len(sys.argv) > 1 else "/tmp/vllm_probe")
    print(t, d)
    from safetensors import safe_open

    for p in (t, d):
        with safe_open(str(p / "model.safetensors"), "pt") as f:
            for k in sorted(f.keys()):
                print(p.name, k, tuple(f.get_slice(k).get_shape()))
