"""Tiny Gemma 4 target + Gemma 4 MTP assistant pairs for the vLLM CPU tests, and engine helpers.

Generalises bench/vllm_probe/build_tiny.py (see its docstring and bench/vllm_probe/FINDINGS.md):
any target ``layer_types`` / ``num_kv_shared_layers`` / draft ``layer_types`` / KV head count.
No network: random weights from config classes with fixed seeds, saved as safetensors.
"""
from __future__ import annotations

import gc
import json
import os
from dataclasses import dataclass
from pathlib import Path

S, F = "sliding_attention", "full_attention"

VOCAB = 512
TARGET_HIDDEN = 64
DRAFT_HIDDEN = 32
HEAD_DIM = 32  # sliding layers
GLOBAL_HEAD_DIM = 64  # full layers
ROPE = {
    F: {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0, "rope_type": "proportional"},
    S: {"rope_theta": 10000.0, "rope_type": "default"},
}
PROMPTS = [
    [2, 17, 33, 101, 7, 250, 9],
    [2, 400, 401, 402, 5],
    [2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21],
]
MAX_TOKENS = 24
NUM_SPEC = 2


@dataclass(frozen=True)
class Layout:
    """A tiny pair's shape: target layer types (+ KV-shared tail length) and draft layer types."""

    target_types: tuple[str, ...] = (S, S, F, S, S, F)
    num_kv_shared: int = 2
    draft_types: tuple[str, ...] = (S, S, S, F)
    num_kv_heads: int = 2

    def __post_init__(self):
        # transformers' Gemma4TextConfig silently forces the last layer to full_attention
        if self.target_types[-1] != F or self.draft_types[-1] != F:
            raise ValueError("Gemma 4 configs force the last layer to full_attention; end both layouts with F")

    @property
    def name(self) -> str:
        t = "".join("s" if x == S else "f" for x in self.target_types)
        d = "".join("s" if x == S else "f" for x in self.draft_types)
        return f"t{t}-sh{self.num_kv_shared}-d{d}-kv{self.num_kv_heads}"

    def expected_map(self) -> dict[int, int]:
        """vLLM's rule (Gemma4Proposer._setup_gemma4_kv_sharing): last non-KV-shared target layer of the type."""
        n = len(self.target_types) - self.num_kv_shared
        last = {}
        for i, lt in enumerate(self.target_types[:n]):
            last[lt] = i
        return {d: last[lt] for d, lt in enumerate(self.draft_types)}


DEFAULT = Layout()


def _common_text_kwargs(layout: Layout) -> dict:
    return dict(
        vocab_size=VOCAB,
        head_dim=HEAD_DIM,
        global_head_dim=GLOBAL_HEAD_DIM,
        num_key_value_heads=layout.num_kv_heads,
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
        initializer_range=0.2,  # so greedy argmax is not a near-tie everywhere
    )


def _make_copy_draft(draft, target) -> None:
    """A "repeat the input token" draft (gets real acceptances; see build_tiny.py)."""
    import torch

    with torch.no_grad():
        temb = target.get_input_embeddings().weight
        draft.model.embed_tokens.weight.copy_(temb[:, :DRAFT_HIDDEN])
        pre = draft.pre_projection.weight
        pre.zero_()
        pre[:, :DRAFT_HIDDEN] = torch.eye(DRAFT_HIDDEN)
        for layer in draft.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()


def build(out_dir: str | Path, layout: Layout = DEFAULT, seed: int = 0, draft_kind: str = "copy") -> tuple[Path, Path]:
    import torch
    from transformers import Gemma4AssistantConfig, Gemma4AssistantForCausalLM, Gemma4ForCausalLM, Gemma4TextConfig

    out = Path(out_dir)
    tdir, ddir = out / "target", out / "draft"
    tdir.mkdir(parents=True, exist_ok=True)
    ddir.mkdir(parents=True, exist_ok=True)
    tcfg = Gemma4TextConfig(
        hidden_size=TARGET_HIDDEN, intermediate_size=128, num_hidden_layers=len(layout.target_types),
        layer_types=list(layout.target_types), num_kv_shared_layers=layout.num_kv_shared,
        hidden_size_per_layer_input=16, vocab_size_per_layer_input=VOCAB, use_double_wide_mlp=False,
        final_logit_softcapping=30.0, **_common_text_kwargs(layout))
    tcfg.architectures = ["Gemma4ForCausalLM"]
    torch.manual_seed(seed)
    target = Gemma4ForCausalLM(tcfg).to(torch.float32).eval()
    target.save_pretrained(tdir, safe_serialization=True)

    dtext = Gemma4TextConfig(
        hidden_size=DRAFT_HIDDEN, intermediate_size=64, num_hidden_layers=len(layout.draft_types),
        layer_types=list(layout.draft_types), num_kv_shared_layers=len(layout.draft_types),
        hidden_size_per_layer_input=0, vocab_size_per_layer_input=0, use_double_wide_mlp=False,
        final_logit_softcapping=None, **_common_text_kwargs(layout))
    dcfg = Gemma4AssistantConfig(text_config=dtext, backbone_hidden_size=TARGET_HIDDEN,
                                 use_ordered_embeddings=False,  # centroid masking captures CUDA graphs
                                 tie_word_embeddings=True)
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


# --------------------------------------------------------------------------- engines


def engine_kwargs(target, draft=None, **extra) -> dict:
    kw = dict(model=str(target), skip_tokenizer_init=True, enforce_eager=True, dtype="float32",
              max_model_len=128, max_num_seqs=4, max_num_batched_tokens=256,
              kv_cache_memory_bytes=32 * 1024 * 1024, seed=0, enable_prefix_caching=False,
              disable_log_stats=False)
    if draft is not None:
        kw["speculative_config"] = {"method": "mtp", "model": str(draft), "num_speculative_tokens": NUM_SPEC}
    kw.update(extra)
    return kw


def make_llm(target, draft=None, **extra):
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine + worker in this process
    from vllm import LLM

    return LLM(**engine_kwargs(target, draft, **extra))


def generate(llm, prompts=PROMPTS, max_tokens=MAX_TOKENS) -> list[list[int]]:
    """Greedy token ids per prompt (surgery.vllm.engine.generate, with this module's defaults)."""
    from surgery.vllm import engine

    return engine.generate(llm, prompts, max_tokens)


def spec_metrics(llm) -> dict:
    out = {}
    for m in llm.get_metrics():
        if m.name.startswith("vllm:spec_decode"):
            out[m.name] = getattr(m, "value", None) if hasattr(m, "value") else getattr(m, "values", None)
    return out


def shutdown(llm) -> None:
    from surgery.vllm import engine

    engine.shutdown(llm)


class StopAfterWiring(Exception):
    """Raised from a load_model "after" hook to end an engine start once the draft is wired
    (saves KV-cache init, profiling and warm-up when only the wiring is needed)."""


def wiring_only(target, draft, before=None, **extra) -> dict:
    """Start an engine only until the draft is wired (after every other "after" callback, e.g.
    the plugin's, since this one is registered last) and stop it there.

    Returns {"wiring": wiring.describe_wiring(...), "proposer": ..., "target_model": ...}; the
    live modules stay usable as plain objects (no KV cache is bound)."""
    from surgery.vllm import hooks, wiring

    seen = {}

    def grab(proposer, target_model):
        seen["wiring"] = wiring.describe_wiring(proposer, target_model)
        seen["proposer"], seen["target_model"] = proposer, target_model
        raise StopAfterWiring

    if before is not None:
        hooks.install_load_model_hook(before, when="before")
    hooks.install_load_model_hook(grab, when="after")
    try:
        llm = make_llm(target, draft, **extra)
    except Exception:  # noqa: BLE001 - vLLM may wrap it
        if "wiring" not in seen:
            raise
    else:  # pragma: no cover - the hook always raises
        shutdown(llm)
    finally:
        hooks.remove_hook(grab)
        if before is not None:
            hooks.remove_hook(before)
    gc.collect()
    return seen
