#!/usr/bin/env python
"""Build the miniature family pairs (Llama target + EAGLE-1 head, EAGLE-3 head, draft model, MiMo
MTP; DeepSeek-V3 target + MTP layer).

    python tools/build_family_pairs.py                 # into surgery/data/pairs (shipped), ~30 min
    python tools/build_family_pairs.py --out DIR       # DIR/<name>/...
    python tools/build_family_pairs.py --eagle3-only   # one stage on the built target (also --mimo-only)
    python tools/build_family_pairs.py --deepseek-only # the DeepSeek-V3 pair (own target), then the index
    python tools/build_family_pairs.py --index-only    # rewrite index.yaml (greedy stats, sizes)

One shared target (transformers ``LlamaForCausalLM``, byte-level vocabulary of the Gemma 4 pair:
pad 0, eos 1, bos 2, byte b -> b + 4) trained as a next-byte LM on Python standard-library source
(tools/pairkit.py, the corpus of the Gemma 4 pair too: its ``corpus_split`` keeps the last
``HELD_OUT_FILES`` of that file list out of every training step; the measurement prompts are line
starts from those files, ``held_out_prompts``; the same split and prompts for every pair).

Drafts are trained the way their family is, on windows ``stdlib prompt + the target's greedy
continuation`` (the text a draft has to predict at inference), against the frozen target's
distribution (KL + CE on its argmax):

- ``eagle`` (vLLM ``llama_eagle.py`` ``EagleLlamaForCausalLM``): ``fc([embed(x_{t+1}) ; h_t])`` +
  one decoder layer without input norm, output ``h + residual`` fed to the *target's* lm_head;
  ``h_t`` is the target's post-norm last hidden state.
- ``eagle3`` (``llama_eagle3.py``): ``fc`` over the target's auxiliary hidden states of the layer
  ids written in the head's config (``eagle_aux_hidden_state_layer_ids``, deliberately NOT vLLM's
  default ``(2, L//2, L-3)``; id k = residual stream after k target layers), one decoder layer
  whose qkv reads ``[input_norm(embed) ; hidden_norm(h)]``, own ``lm_head`` over a REDUCED draft
  vocabulary (``draft_vocab_size``) mapped back by ``d2t`` (vLLM's convention:
  ``target_id = draft_id + d2t[draft_id]``; ``t2d`` a bool mask over the target vocabulary).
- both heads are trained with EAGLE-3's "training-time test" unroll over ``K`` draft steps: step s
  at anchor p sits at position p+s-1, reads the previous step's own (pre-norm) output, attends to
  the step-1 keys of positions <= p and to its own earlier-step keys at that anchor: exactly what
  vLLM's proposer has in its draft KV cache when it runs step s.
- ``draft-model``: a 2-layer ``LlamaForCausalLM`` distilled on the target's logits.
- ``mtp`` (MiMo): the target as a MiMo checkpoint (Qwen2 = Llama + zero q/k/v biases,
  ``architectures: [MiMoForCausalLM]``) plus a trained MTP layer ``model.mtp_layers.0``
  (vLLM ``mimo_mtp.py``), in the same safetensors; the draft folder is the target folder.
- ``deepseek-mtp``: its own target, a ``DeepseekV3ForCausalLM`` (MLA + MoE) on the same corpus
  split, plus a trained MTP layer ``model.layers.L`` (vLLM ``deepseek_mtp.py``):
  tools/build_deepseek_pair.py.

The heads here are plain torch modules that reproduce vLLM's forward (names as in real EAGLE
checkpoints: ``fc``, ``midlayer.*`` / ``layers.0.*``, ``norm``, ``lm_head``, ``d2t``, ``t2d``); the
acceptance measured in vLLM (tests/vllm/test_families.py) is the proof they match.
Fixed seeds, CPU, float32, one thread.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

TOOLS = Path(__file__).resolve().parent
if str(TOOLS) not in sys.path:  # imported by path (tests): its siblings sit next to it
    sys.path.insert(0, str(TOOLS))

import pairkit as kit  # noqa: E402  (corpus, windows, schedule, losses, index: one definition)

import build_deepseek_pair as deepseek  # noqa: E402  (one stage of this build; it never imports this file)
from surgery.tinymodels import bytevocab  # noqa: E402  (byte-level ids shared with the Gemma pair)

SEED = kit.FAMILY_SEED
PAIRS_DIR = kit.PAIR_INDEX.parent
NUM_LAYERS = 8
HIDDEN = kit.FAMILY_HIDDEN
HEADS = 2
HEAD_DIM = 32
INTERMEDIATE = 192
# vLLM's default for 8 layers is (2, 4, 5). Ids 0 (embeddings) and L (the final pre-norm stream)
# are the states most unlike the defaults' middle layers: a head on (1, 3, 6) lost only ~10 points
# when fed the defaults (adjacent residual-stream states are alike in a model this small); on
# (0, 1, 8) ~39 points, on (0, 7, 8) ~41 (measured in vLLM, docs/recipes.md).
AUX_IDS = (0, 7, 8)
DRAFT_VOCAB = 128
K_STEPS = kit.K_STEPS
DEEPSEEK_TARGET_STEPS = 1500  # tools/build_deepseek_pair.py: its own target (MLA + MoE)

log = kit.logger("build_family_pairs")


# ----------------------------------------------------------------------------------- target


def target_config():
    from transformers import LlamaConfig

    cfg = LlamaConfig(
        vocab_size=bytevocab.VOCAB_SIZE, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
        num_hidden_layers=NUM_LAYERS, num_attention_heads=HEADS, num_key_value_heads=HEADS, head_dim=HEAD_DIM,
        max_position_embeddings=512, rms_norm_eps=1e-6, tie_word_embeddings=False,
        pad_token_id=bytevocab.PAD_ID, eos_token_id=bytevocab.EOS_ID, bos_token_id=bytevocab.BOS_ID,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )
    cfg.architectures = ["LlamaForCausalLM"]
    return cfg


def draft_model_config():
    cfg = target_config()
    cfg.num_hidden_layers = 2
    cfg.intermediate_size = 128
    return cfg


@torch.no_grad()
def target_features(target, x):
    """Target logits, post-norm last hidden state, and every residual-stream state: index k =
    after k layers = vLLM's aux id k (llama.py captures ``hidden + residual`` after layer k-1);
    index L is the pre-norm stream (transformers' last hidden state is post-norm)."""
    seen = {}
    handle = target.model.norm.register_forward_hook(lambda _m, args, _out: seen.setdefault("pre", args[0]))
    try:
        out = target(input_ids=x, output_hidden_states=True)
    finally:
        handle.remove()
    hs = list(out.hidden_states)
    last = hs[-1]
    hs[-1] = seen["pre"]
    return out.logits, last, hs


# ----------------------------------------------------------------------------------- heads


def step_attention(q, keys, values, causal):
    """Attention of draft step s (s = len(keys)) in one training pass: causal over step 1's keys (the
    prefix), plus each later step's own key at the same position (the tree a k-step drafter builds
    at inference, where step j attends to the prefix and to its own earlier drafts)."""
    scale = HEAD_DIM ** -0.5
    q_len = q.shape[-2]
    scores = [(q @ keys[0].transpose(-1, -2) * scale).masked_fill(~causal, float("-inf"))]
    scores += [(q * kj).sum(-1, keepdim=True) * scale for kj in keys[1:]]
    probs = torch.softmax(torch.cat(scores, -1), -1)
    attn = probs[..., :q_len] @ values[0]
    for j, vj in enumerate(values[1:], start=1):
        attn = attn + probs[..., q_len + j - 1 : q_len + j] * vj
    return attn


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x, pos, theta=10000.0):
    """Neox-style rotary embedding (HF ``rotate_half``, vLLM ``is_neox_style=True``)."""
    d = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    ang = pos[..., None].float() * inv  # [B, T, d/2]
    cos, sin = torch.cat([ang.cos()] * 2, -1)[:, None], torch.cat([ang.sin()] * 2, -1)[:, None]
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class HeadLayer(nn.Module):
    """One Llama decoder layer as vLLM's EAGLE heads run it (qkv input ``in_dim``)."""

    def __init__(self, in_dim, eagle3: bool, qkv_bias: bool = False, input_norm: bool = False):
        super().__init__()
        h = HIDDEN
        self.q_proj = nn.Linear(in_dim, HEADS * HEAD_DIM, bias=qkv_bias)
        self.k_proj = nn.Linear(in_dim, HEADS * HEAD_DIM, bias=qkv_bias)
        self.v_proj = nn.Linear(in_dim, HEADS * HEAD_DIM, bias=qkv_bias)
        self.o_proj = nn.Linear(HEADS * HEAD_DIM, h, bias=False)
        self.gate_proj = nn.Linear(h, INTERMEDIATE, bias=False)
        self.up_proj = nn.Linear(h, INTERMEDIATE, bias=False)
        self.down_proj = nn.Linear(INTERMEDIATE, h, bias=False)
        self.post_attention_layernorm = RMSNorm(h)
        if eagle3 or input_norm:
            self.input_layernorm = RMSNorm(h)
        if eagle3:
            self.hidden_norm = RMSNorm(h)

    def qkv(self, x, pos):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, HEADS, HEAD_DIM).transpose(1, 2)
        k = self.k_proj(x).view(b, t, HEADS, HEAD_DIM).transpose(1, 2)
        v = self.v_proj(x).view(b, t, HEADS, HEAD_DIM).transpose(1, 2)
        return rope(q, pos), rope(k, pos), v

    def finish(self, attn, residual):
        b, _, t, _ = attn.shape
        h = self.o_proj(attn.transpose(1, 2).reshape(b, t, HEADS * HEAD_DIM))
        residual = h + residual
        h = self.post_attention_layernorm(residual)
        return self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h)), residual

    def state_names(self, prefix):
        biases = {f"{prefix}.self_attn.{n}.bias": getattr(self, n).bias for n in ("q_proj", "k_proj", "v_proj")
                  if getattr(self, n).bias is not None}
        return biases | {f"{prefix}.self_attn.{n}.weight": getattr(self, n).weight for n in ("q_proj", "k_proj", "v_proj", "o_proj")} | {
            f"{prefix}.mlp.{n}.weight": getattr(self, n).weight for n in ("gate_proj", "up_proj", "down_proj")} | {
            f"{prefix}.{n}.weight": getattr(self, n).weight
            for n in ("post_attention_layernorm", "input_layernorm", "hidden_norm") if hasattr(self, n)}


class EagleHead(nn.Module):
    """EAGLE-1 (``eagle3=False``), EAGLE-3, or (``mimo=True``) a MiMo MTP layer (vLLM
    ``mimo_mtp.py``: ``input_proj([hidden_layernorm(h) ; token_layernorm(embed)])`` (embedding
    zeroed at position 0), one Qwen2 decoder layer, ``final_layernorm`` whose output is both the
    logits input (target lm_head) and the next step's hidden state). Trained with the TTT unroll."""

    def __init__(self, eagle3: bool, n_aux: int = 0, draft_vocab: int = 0, mimo: bool = False):
        super().__init__()
        self.eagle3, self.mimo = eagle3, mimo
        if mimo:
            self.token_layernorm, self.hidden_layernorm, self.final_layernorm = RMSNorm(HIDDEN), RMSNorm(HIDDEN), RMSNorm(HIDDEN)
            self.input_proj = nn.Linear(2 * HIDDEN, HIDDEN, bias=False)
            self.layer = HeadLayer(HIDDEN, False, qkv_bias=True, input_norm=True)
            return
        self.fc = nn.Linear(HIDDEN * (n_aux if eagle3 else 2), HIDDEN, bias=False)
        self.layer = HeadLayer(2 * HIDDEN if eagle3 else HIDDEN, eagle3)
        if eagle3:
            self.norm = RMSNorm(HIDDEN)
            self.lm_head = nn.Linear(HIDDEN, draft_vocab, bias=False)

    def layer_input(self, emb, hidden, pos):
        """(qkv input, residual) of the one decoder layer."""
        if self.mimo:
            emb = emb * (pos != 0)[..., None]
            x = self.input_proj(torch.cat([self.hidden_layernorm(hidden), self.token_layernorm(emb)], -1))
            return self.layer.input_layernorm(x), x
        if self.eagle3:
            return torch.cat([self.layer.input_layernorm(emb), self.layer.hidden_norm(hidden)], -1), hidden
        h = self.fc(torch.cat([emb, hidden], -1))
        return h, h

    def output(self, mlp_out, residual, target_lm_head):
        """(logits, hidden fed to the next step)."""
        if self.mimo:
            out = self.final_layernorm(mlp_out + residual)
            return target_lm_head(out), out
        if self.eagle3:
            pre = mlp_out + residual
            return self.lm_head(self.norm(pre)), pre
        out = mlp_out + residual
        return target_lm_head(out), out

    def unroll(self, embed, target_lm_head, x, first_hidden, k_steps):
        """Logits of every step: step s, anchor p (0..Q-1) predicts the token after x[p+s]."""
        b, length = x.shape
        q_len = length - k_steps
        anchors = torch.arange(q_len)[None].expand(b, q_len)
        hidden = first_hidden[:, :q_len]
        causal = torch.ones(q_len, q_len, dtype=torch.bool).tril()
        keys, values, logits_per_step = [], [], []
        for s in range(1, k_steps + 1):
            inp, residual = self.layer_input(embed(x[:, s : s + q_len]), hidden, anchors + (s - 1))
            q, k, v = self.layer.qkv(inp, anchors + (s - 1))
            keys.append(k)
            values.append(v)
            mlp_out, residual = self.layer.finish(step_attention(q, keys, values, causal), residual)
            logits, hidden = self.output(mlp_out, residual, target_lm_head)
            logits_per_step.append(logits)
        return logits_per_step

    def state_dict_vllm(self, layer_prefix: str) -> dict:
        if self.mimo:
            sd = self.layer.state_names(layer_prefix) | {
                f"{layer_prefix}.{n}.weight": getattr(self, n).weight
                for n in ("token_layernorm", "hidden_layernorm", "final_layernorm", "input_proj")}
            return {k: v.detach().contiguous().clone() for k, v in sd.items()}
        sd = {"fc.weight": self.fc.weight} | self.layer.state_names(layer_prefix)
        if self.eagle3:
            sd |= {"norm.weight": self.norm.weight, "lm_head.weight": self.lm_head.weight}
        return {k: v.detach().contiguous().clone() for k, v in sd.items()}


def draft_vocab_map(pool: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(d2t, t2d): the ``size`` most frequent ids of the greedy pool (ties by id), ascending."""
    counts = torch.bincount(pool.flatten(), minlength=bytevocab.VOCAB_SIZE).float()
    counts -= torch.arange(bytevocab.VOCAB_SIZE) * 1e-6  # deterministic tie break
    keep = counts.topk(size).indices.sort().values
    d2t = keep - torch.arange(size)
    t2d = torch.zeros(bytevocab.VOCAB_SIZE, dtype=torch.bool)
    t2d[keep] = True
    return d2t, t2d


def distil_head(head, target, pool, steps, batch, gen, keep=None, name="head"):
    """KL(target || head) + CE(target argmax) summed over the K unrolled steps."""
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()

    def losses(x):
        t_logits, t_last, hs = target_features(target, x)
        first = head.fc(torch.cat([hs[i] for i in AUX_IDS], -1)) if head.eagle3 else t_last  # MTP: post-norm too
        return kit.unrolled_loss(head.unroll(embed, lm_head, x, first, K_STEPS), t_logits, keep)

    kit.distil(list(head.parameters()), pool, steps, batch, gen, losses, log, name)


def distil_draft_model(draft, target, pool, steps, batch, gen):
    opt = torch.optim.AdamW(draft.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.0)
    draft.train()
    t0 = time.perf_counter()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = kit.lr_at(step, steps, 3e-3, 30)
        x = pool[torch.randint(len(pool), (batch,), generator=gen)]
        with torch.no_grad():
            teacher = target(input_ids=x).logits
        logits = draft(input_ids=x).logits
        logp = F.log_softmax(logits, -1)
        kl = F.kl_div(logp, F.log_softmax(teacher, -1), log_target=True, reduction="none").sum(-1).mean()
        ce = F.cross_entropy(logp.flatten(0, 1), teacher.argmax(-1).flatten())
        loss = kl + ce
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        if step % 100 == 0 or step == steps - 1:
            acc = (logits.argmax(-1) == teacher.argmax(-1)).float().mean().item()
            log(f"draft-model step {step:4d} loss {loss.item():.3f} top1 {acc:.2f} ({time.perf_counter() - t0:.0f}s)")
    draft.eval()


# ----------------------------------------------------------------------------------- writing


def head_config(eagle3: bool) -> dict:
    cfg = target_config().to_dict()
    for k in ("transformers_version", "_name_or_path", "output_hidden_states", "use_cache"):
        cfg.pop(k, None)
    cfg.update(num_hidden_layers=1, dtype="float32")
    if eagle3:
        cfg.update(architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=DRAFT_VOCAB,
                   eagle_aux_hidden_state_layer_ids=list(AUX_IDS), target_hidden_size=HIDDEN)
    else:
        cfg.update(architectures=["LlamaForCausalLM"])
    return cfg


def write_head(head, folder: Path, eagle3: bool, extra: dict | None = None) -> None:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    sd = head.state_dict_vllm("midlayer" if eagle3 else "layers.0")
    sd.update(extra or {})
    save_file(sd, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "model.safetensors").chmod(0o644)  # save_file creates 0600
    (folder / "config.json").write_text(json.dumps(head_config(eagle3), indent=2, sort_keys=True) + "\n")


def write_lm(model, folder: Path) -> None:
    kit.write_hf_folder(model, folder, extra_config={"dtype": "float32"})
    for junk in ("generation_config.json",):
        (folder / junk).unlink(missing_ok=True)


def build(out: Path, target_steps=1500, head_steps=400, dm_steps=400, deepseek_steps=DEEPSEEK_TARGET_STEPS) -> dict:
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    from transformers import LlamaForCausalLM

    corpus, _ = kit.corpus_split()
    starts = kit.line_starts(corpus)
    log(f"corpus: {len(corpus)} training tokens; held-out files: {kit.HELD_OUT_FILES}")
    t0 = time.perf_counter()
    target = LlamaForCausalLM(target_config())
    kit.train_lm(target, corpus, starts, target_steps, batch=16, length=128, gen=gen, log=log)
    for p in target.parameters():
        p.requires_grad_(False)
    prompts = kit.held_out_prompts()
    stats = kit.greedy_stats(target, prompts, log)

    pool = kit.greedy_pool(target, corpus, starts, gen, 512)
    log(f"greedy pool {tuple(pool.shape)} ({time.perf_counter() - t0:.0f}s)")

    torch.manual_seed(SEED + 1)
    eagle = EagleHead(eagle3=False)
    distil_head(eagle, target, pool, head_steps, 16, gen, name="eagle")

    # The shipped EAGLE-3 head comes from its own stage (build_eagle3, own generator: it was retrained
    # on other aux ids after this run). Its slot in this run drew one batch index tensor per step from
    # ``gen``; drawing them here keeps the draft model's batches, hence its weights, as shipped.
    for _ in range(head_steps):
        torch.randint(len(pool), (16,), generator=gen)

    torch.manual_seed(SEED + 3)
    dm = LlamaForCausalLM(draft_model_config())
    distil_draft_model(dm, target, pool, dm_steps, 16, gen)

    for p in target.parameters():
        p.requires_grad_(True)
    write_lm(target, out / "llama-target")
    write_head(eagle, out / "eagle" / "draft", eagle3=False)
    write_lm(dm, out / "draft-model" / "draft")
    build_eagle3(out, head_steps)
    build_mimo(out, head_steps)
    deepseek_stats = deepseek.build_deepseek(out, deepseek_steps, head_steps)
    write_index(out, prompts, stats, deepseek_stats)
    log(f"built in {time.perf_counter() - t0:.0f}s")
    return stats


def write_index(out: Path, prompts: list[list[int]], stats: dict, deepseek_stats: dict | None = None) -> None:
    """surgery/data/pairs/index.yaml: what surgery.pairs reads (data, not code). Merged into the file
    by pairkit.update_index: each builder owns its own entries' figures (gemma4-mtp is build_tiny_pair's)."""
    kit.update_index(out / "index.yaml", index_entries(out, prompts, stats, deepseek_stats))


def index_entries(out: Path, prompts: list[list[int]], stats: dict, deepseek_stats: dict | None = None) -> dict:
    """name -> every key this builder computes for the pairs built under ``out`` (sizes counted from
    the safetensors); ``deepseek_stats`` None keeps the DeepSeek entry's measured greedy stats."""
    DS_LAYERS, DS_PAIR = deepseek.NUM_LAYERS, deepseek.PAIR
    params = {name: kit.param_count(out / name) for name in ("llama-target",)}
    params |= {name: kit.param_count(out / name / "draft") for name in ("eagle", "eagle3", "draft-model")}
    params["mtp"] = kit.param_count(out / "mtp" / "target")
    params[DS_PAIR] = kit.param_count(out / DS_PAIR / "target")

    texts = [bytevocab.decode(p[1:]) for p in prompts]
    common = {"target": "llama-target", "target_params": params["llama-target"], "target_greedy": stats,
              "seed": SEED, "builder": "tools/build_family_pairs.py", "prompts": texts}
    pairs = {
        "eagle3": {"method": "eagle3", "draft": "eagle3/draft", "draft_params": params["eagle3"],
                   "draft_vocab_size": DRAFT_VOCAB, "eagle_aux_hidden_state_layer_ids": list(AUX_IDS), **common},
        "eagle": {"method": "eagle", "draft": "eagle/draft", "draft_params": params["eagle"], **common},
        "draft-model": {"method": "draft_model", "draft": "draft-model/draft", "draft_params": params["draft-model"],
                        **common},
        "mtp": {"tokenizer": "byte",
                "summary": f"MiMo target (Qwen2 layout, {NUM_LAYERS} layers) with one trained MTP layer (model.mtp_layers.0)",
                "method": "mtp", **common, "target": "mtp/target", "draft": "mtp/target",
                "target_params": params["mtp"], "family": "MiMo (MiMoForCausalLM, Qwen2 layers + model.mtp_layers.0)",
                "num_nextn_predict_layers": 1},
        DS_PAIR: {"tokenizer": "byte",
                  "summary": f"DeepSeek-V3 target (MLA + MoE, {DS_LAYERS} layers) with one trained MTP layer "
                             f"(model.layers.{DS_LAYERS})",
                  "method": "mtp", **common, "target": f"{DS_PAIR}/target", "draft": f"{DS_PAIR}/target",
                  "target_params": params[DS_PAIR],
                  "family": f"DeepSeek-V3 (DeepseekV3ForCausalLM, MLA + MoE layers + MTP layer model.layers.{DS_LAYERS})",
                  "num_nextn_predict_layers": 1},
    }
    if deepseek_stats is not None:
        pairs[DS_PAIR]["target_greedy"] = deepseek_stats
    else:
        pairs[DS_PAIR].pop("target_greedy")
    return pairs


def build_eagle3(out: Path, head_steps=400) -> None:
    """Train the EAGLE-3 head on the built target (its own seed and generator: a stage that can be
    rerun alone, ``--eagle3-only``)."""
    from transformers import LlamaForCausalLM

    torch.set_num_threads(1)
    torch.manual_seed(SEED + 2)
    gen = torch.Generator().manual_seed(SEED + 2)
    target = LlamaForCausalLM.from_pretrained(str(out / "llama-target"), dtype=torch.float32).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    corpus, _ = kit.corpus_split()
    pool = kit.greedy_pool(target, corpus, kit.line_starts(corpus), gen, 512)
    d2t, t2d = draft_vocab_map(pool, DRAFT_VOCAB)
    head = EagleHead(eagle3=True, n_aux=len(AUX_IDS), draft_vocab=DRAFT_VOCAB)
    distil_head(head, target, pool, head_steps, 16, gen, keep=d2t + torch.arange(DRAFT_VOCAB), name="eagle3")
    write_head(head, out / "eagle3" / "draft", eagle3=True, extra={"d2t": d2t.contiguous(), "t2d": t2d.contiguous()})
    log(f"wrote {out / 'eagle3' / 'draft'} (aux ids {AUX_IDS})")


def mimo_config(target_cfg: dict) -> dict:
    """The Llama target's config as a MiMo (Qwen2-based) checkpoint with one MTP layer: vLLM picks
    ``MiMoForCausalLM`` by architecture and rewrites the draft to ``mimo_mtp`` (hf_config_override)."""
    keep = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "hidden_act", "max_position_embeddings", "rms_norm_eps", "rope_parameters",
            "tie_word_embeddings", "bos_token_id", "eos_token_id", "pad_token_id")
    cfg = {k: target_cfg[k] for k in keep}
    cfg.update(model_type="qwen2", architectures=["MiMoForCausalLM"], num_nextn_predict_layers=1,
               use_sliding_window=False, attention_dropout=0.0, dtype="float32")
    return cfg


def build_mimo(out: Path, head_steps=400) -> None:
    """MiMo pair from the built Llama target: Qwen2 is Llama plus q/k/v biases, so the target
    becomes a MiMo (Qwen2) checkpoint with zero biases and the same function; its MTP layer
    (``model.mtp_layers.0.*`` in the same safetensors, as MiMo-7B ships it) is trained here."""
    from safetensors.torch import load_file, save_file
    from transformers import LlamaForCausalLM

    torch.set_num_threads(1)
    torch.manual_seed(SEED + 10)
    gen = torch.Generator().manual_seed(SEED + 10)
    src = out / "llama-target"
    target = LlamaForCausalLM.from_pretrained(str(src), dtype=torch.float32).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    corpus, _ = kit.corpus_split()
    pool = kit.greedy_pool(target, corpus, kit.line_starts(corpus), gen, 512)
    head = EagleHead(eagle3=False, mimo=True)
    distil_head(head, target, pool, head_steps, 16, gen, name="mimo-mtp")
    sd = load_file(str(src / "model.safetensors"))
    for i in range(NUM_LAYERS):
        for n in ("q_proj", "k_proj", "v_proj"):
            w = sd[f"model.layers.{i}.self_attn.{n}.weight"]
            sd[f"model.layers.{i}.self_attn.{n}.bias"] = torch.zeros(w.shape[0])
    sd |= head.state_dict_vllm("model.mtp_layers.0")
    dest = out / "mtp" / "target"
    dest.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in sd.items()}, str(dest / "model.safetensors"), metadata={"format": "pt"})
    (dest / "model.safetensors").chmod(0o644)
    cfg = mimo_config(json.loads((src / "config.json").read_text()))
    (dest / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    log(f"wrote {dest}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--out", type=Path, default=PAIRS_DIR)
    ap.add_argument("--target-steps", type=int, default=1500)
    ap.add_argument("--head-steps", type=int, default=400)
    ap.add_argument("--draft-model-steps", type=int, default=400)
    ap.add_argument("--index-only", action="store_true", help="only rewrite index.yaml from the built folders")
    ap.add_argument("--mimo-only", action="store_true", help="only (re)build the MiMo MTP pair from llama-target")
    ap.add_argument("--eagle3-only", action="store_true", help="only (re)train the EAGLE-3 head on llama-target")
    ap.add_argument("--deepseek-only", action="store_true",
                    help="only (re)build the DeepSeek-V3 MTP pair (its own target) and rewrite index.yaml")
    ap.add_argument("--deepseek-target-steps", type=int, default=DEEPSEEK_TARGET_STEPS)
    args = ap.parse_args(argv)
    if args.eagle3_only:
        build_eagle3(args.out, args.head_steps)
        return 0
    if args.mimo_only:
        build_mimo(args.out, args.head_steps)
        return 0
    if args.deepseek_only:
        deepseek.build_deepseek(args.out, args.deepseek_target_steps, args.head_steps)
        args.index_only = True
    if args.index_only:
        from transformers import LlamaForCausalLM

        torch.set_num_threads(1)
        target = LlamaForCausalLM.from_pretrained(str(args.out / "llama-target"), dtype=torch.float32).eval()
        prompts = kit.held_out_prompts()
        write_index(args.out, prompts, kit.greedy_stats(target, prompts, log),
                    kit.greedy_stats(deepseek.load_target(args.out / deepseek.PAIR / "target"), prompts, log))
        return 0
    stats = build(args.out, args.target_steps, args.head_steps, args.draft_model_steps,
                  deepseek_steps=args.deepseek_target_steps)
    log(json.dumps(stats))
    return 0


if __name__ == "__main__":
    sys.exit(main())
