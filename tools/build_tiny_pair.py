#!/usr/bin/env python
"""Build the tiny Gemma 4 target + MTP assistant pair used by spec-surgery's HF demo and tests.

    python tools/build_tiny_pair.py                # into the cache (see surgery.tinymodels.tinypair.cache_root)
    python tools/build_tiny_pair.py --out DIR      # DIR/target, DIR/draft
    python tools/build_tiny_pair.py --commit       # into surgery/data/tiny/weights (shipped) + index entry
    python tools/build_tiny_pair.py --index-only   # recompute the index entry from the shipped weights

1. Train the target (``Gemma4ForCausalLM``, shipped ``target_config.json``) as a byte-level LM on
   Python standard-library source (a fixed, sorted file list: present on every machine), minus the
   last ``HELD_OUT_FILES`` files: the measurement prompts come from those (``held_out_prompts``,
   recorded with the target's greedy distinct ratios in surgery/data/pairs/index.yaml, entry
   ``gemma4-mtp``). Long enough that its greedy text does not collapse into repetition: a looping
   target makes any draft look good.
2. Distil the assistant (``Gemma4AssistantForCausalLM``, ``draft_config.json``) from the frozen
   target with the MTP recipe of transformers' ``SinglePositionMultiTokenCandidateGenerator``:
   draft input ``[target embedding of the bonus token ; target last hidden state]``, constant
   position, K/V read from the target (sliding layers <- last unshared sliding target layer, full
   <- last unshared full layer), later steps fed the draft's own projected hidden state. The
   draft is trained for ``--draft-steps`` MTP steps against the target's distribution, on windows
   whose second half is the target's own greedy continuation (the text the draft sees at
   inference).

The corpus split, the held-out prompts, the training loop and the greedy statistics are
tools/pairpy's, shared with ``tools/build_family_pairs.py``: one definition for every built-in pair.

Fixed seeds, CPU, float32, one thread: about 25 min of CPU time. Exact bits depend on the torch
build and on the Python version's stdlib text, hence the committed weights are the reference copy.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

TOOLS = Path(__file__).resolve().parent
if str(TOOLS) not in sys.path:  # loaded by path (tests): pairkit sits next to this file
    sys.path.insert(0, str(TOOLS))

from pairkit import (  # noqa: E402  (pairkit also puts the repository on sys.path)
    HELD_OUT_FILES, PAIR_INDEX, corpus_files, corpus_split, distil, greedy_pool, greedy_stats, held_out_prompts,
    line_starts, logger, param_count, sample_windows, train_lm, update_index, write_hf_folder,
)

from surgery.tinymodels import bytevocab  # noqa: E402
from surgery.tinymodels import tinypair as pair  # noqa: E402
from surgery.live.kvrouting import cache_kv, default_kv_sources  # noqa: E402

SEED = 1234
TARGET_STEPS = 1500  # the first pair's 250 left a target whose greedy text looped (held-out 4-gram ratio 0.35)
DRAFT_STEPS = 300
PAIR_NAME = "gemma4-mtp"  # this pair's entry in pairkit.PAIR_INDEX

log = logger("build_tiny_pair")


# ----------------------------------------------------------------------------------- draft


def target_features(target, x: torch.Tensor):
    """Target logits, post-norm last hidden states and full-length K/V for the wired layers."""
    from transformers import DynamicCache

    cache = DynamicCache()  # no config: full-length K/V in every layer (see kvrouting)
    out = target(input_ids=x, past_key_values=cache, use_cache=True, output_hidden_states=True)
    kv = {t: cache_kv(cache, j) for t, j in default_kv_sources(target.config).items()}
    return out.logits, out.hidden_states[-1], kv


def draft_masks(q: int, kv_len: int, window: int, dtype) -> dict:
    """Additive masks for q parallel draft queries: query t is "committed context x[0..t]",
    so it sees K/V 0..t (full) or its last ``window + 1`` entries (sliding). The ``+1`` mirrors
    the assistant's own flipped bidirectional sliding mask for a single query (checked at build
    time against the real single-query path by :func:`check_parallel_matches_sequential`)."""
    t = torch.arange(q)[:, None]
    j = torch.arange(kv_len)[None, :]
    neg = torch.finfo(dtype).min
    full = torch.where(j <= t, 0.0, neg).to(dtype)
    sliding = torch.where((j <= t) & (t - j <= window), 0.0, neg).to(dtype)
    return {"full_attention": full[None, None], "sliding_attention": sliding[None, None]}


def draft_step_parallel(draft, embed, tokens, hidden, positions, kv, masks):
    """One MTP step for many independent queries at once (equivalent to the assistant's forward
    applied per query, because the draft attends only to target K/V and writes none)."""
    x = draft.pre_projection(torch.cat([embed(tokens), hidden], dim=-1))
    out = draft.model(
        inputs_embeds=x,
        attention_mask=masks,
        position_ids=positions,
        shared_kv_states=dict(kv),
        use_cache=False,
    )
    last = out.last_hidden_state
    return draft.lm_head(last), draft.post_projection(last)


def mtp_loss(draft, embed, x, t_logits, t_hidden, kv, k_steps: int):
    """Sum over MTP steps of KL(target || draft) + CE(target argmax), teacher-forced on ``x``.

    Query t: committed context x[0..t], bonus x[t+1], hidden h_t, position t+1. Step k feeds
    token x[t+k] and the draft's previous projected state, and is scored on the target's
    distribution at t+k (the token after x[t+k]).
    """
    batch, length = x.shape
    q = length - k_steps
    masks = draft_masks(q, length, draft.config.get_text_config().sliding_window, t_hidden.dtype)
    positions = torch.arange(1, q + 1)[None].expand(batch, q)
    hidden = t_hidden[:, :q]
    total, accs = 0.0, []
    for k in range(1, k_steps + 1):
        logits, hidden = draft_step_parallel(draft, embed, x[:, k : k + q], hidden, positions, kv, masks)
        teacher = t_logits[:, k : k + q].float()
        logp = F.log_softmax(logits.float(), -1)
        kl = F.kl_div(logp, F.log_softmax(teacher, -1), log_target=True, reduction="none").sum(-1).mean()
        ce = F.cross_entropy(logp.flatten(0, 1), teacher.argmax(-1).flatten())
        total = total + kl + ce
        accs.append((logits.argmax(-1) == teacher.argmax(-1)).float().mean().item())
    return total, accs


def distil_draft(target, draft, pool, steps, batch, k_steps, gen) -> None:
    embed = target.get_input_embeddings()
    for p in target.parameters():
        p.requires_grad_(False)
    params = [p for p in draft.parameters() if p.requires_grad]

    def losses(x):
        with torch.no_grad():
            t_logits, t_hidden, kv = target_features(target, x)
        return mtp_loss(draft, embed, x, t_logits, t_hidden, kv, k_steps)

    draft.train()
    distil(params, pool, steps, batch, gen, losses, log, "draft", peak=2e-3)
    draft.eval()


@torch.no_grad()
def check_parallel_matches_sequential(target, draft, corpus, starts, gen) -> float:
    """The parallel training forward must equal the real single-query inference path
    (``surgery.hf.generate._decode`` conventions), or the distillation trains the wrong thing."""
    from surgery.live.kvrouting import build_shared_kv_states
    from transformers import DynamicCache

    x = sample_windows(corpus, starts, gen, 1, 100)
    t_logits, t_hidden, kv = target_features(target, x)
    embed = target.get_input_embeddings()
    masks = draft_masks(x.shape[1] - 1, x.shape[1], draft.config.get_text_config().sliding_window, t_hidden.dtype)
    q = x.shape[1] - 1
    par, _ = draft_step_parallel(draft, embed, x[:, 1:], t_hidden[:, :q], torch.arange(1, q + 1)[None], kv, masks)
    cache = DynamicCache()
    target(input_ids=x, past_key_values=cache, use_cache=True)
    worst = 0.0
    for t in (0, 5, 40, 63, 64, 65, 80, q - 1):
        states = build_shared_kv_states(cache, target.config, draft, length=t + 1)
        inp = torch.cat([embed(x[:, t + 1 : t + 2]), t_hidden[:, t : t + 1]], -1)
        seq = draft(inputs_embeds=inp, position_ids=torch.tensor([[t + 1]]), shared_kv_states=states).logits
        worst = max(worst, (seq[0, -1] - par[0, t]).abs().max().item())
    return worst


# ----------------------------------------------------------------------------------- main


def global_head_dim_extra(shipped_json: Path) -> dict:
    """transformers 5.19 writes the full-layer head size only inside ``per_layer_config``; keep the
    public ``global_head_dim`` key too (real configs and older transformers read that one)."""
    cfg = pair.load_config_json(shipped_json)
    return {"global_head_dim": cfg.get("global_head_dim", cfg.get("text_config", {}).get("global_head_dim"))}


def build(out_dir: Path, target_steps=TARGET_STEPS, draft_steps=DRAFT_STEPS, k_steps=3, pool_size=512,
          info: dict | None = None) -> tuple[Path, Path]:
    """Train + distil, then write ``out_dir/target`` and ``out_dir/draft`` atomically (with the
    byte-level tokenizer files). ``info``, when given, receives what the pair index records: the
    held-out prompts, the target's greedy stats on them, seed, steps and sizes."""
    torch.set_num_threads(1)  # reproducible sums; also robust on a busy 2-core box (no OMP spin)
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    from transformers import Gemma4AssistantForCausalLM, Gemma4ForCausalLM

    from surgery.tinymodels.bytetokenizer import write_tokenizer

    t_cfg, d_cfg = pair.make_configs()
    corpus, _ = corpus_split()
    starts = line_starts(corpus)
    log(f"corpus: {len(corpus)} training tokens; last {HELD_OUT_FILES} of {len(corpus_files())} stdlib files held out")
    t0 = time.perf_counter()

    target = Gemma4ForCausalLM(t_cfg)
    train_lm(target, corpus, starts, target_steps, batch=16, length=128, gen=gen, log=log)
    log(f"target trained in {time.perf_counter() - t0:.0f}s")
    prompts = held_out_prompts()
    stats = greedy_stats(target, prompts, log)

    torch.manual_seed(SEED + 1)
    draft = Gemma4AssistantForCausalLM(d_cfg)
    pool = greedy_pool(target, corpus, starts, gen, pool_size)
    log(f"greedy pool: {tuple(pool.shape)} in {time.perf_counter() - t0:.0f}s")
    distil_draft(target, draft, pool, draft_steps, batch=16, k_steps=k_steps, gen=gen)
    err = check_parallel_matches_sequential(target, draft, corpus, starts, gen)
    log(f"parallel vs sequential draft logits: max abs diff {err:.2e}")
    if err > 1e-3:
        raise RuntimeError("parallel draft training path disagrees with the inference path")
    log(f"built in {time.perf_counter() - t0:.0f}s")

    for p in target.parameters():
        p.requires_grad_(True)
    target_dir, draft_dir = out_dir / "target", out_dir / "draft"
    write_hf_folder(target, target_dir, extra_config=global_head_dim_extra(pair.TARGET_CONFIG_JSON))
    write_hf_folder(draft, draft_dir, extra_config={"text_config": global_head_dim_extra(pair.DRAFT_CONFIG_JSON)})
    for folder in (target_dir, draft_dir):
        write_tokenizer(folder)  # serving takes text (surgery.tinymodels.bytetokenizer); the cache copy skips them
        (folder / "generation_config.json").unlink(missing_ok=True)  # defaults only; never shipped
    if info is not None:
        info.update(index_entry(prompts, stats, target_steps, draft_steps, target_dir, draft_dir))
    return target_dir, draft_dir


# ----------------------------------------------------------------------------------- index

def index_entry(prompts, stats, target_steps, draft_steps, target_dir: Path, draft_dir: Path) -> dict:
    """The gemma4-mtp entry of surgery/data/pairs/index.yaml (the keys this builder computes)."""
    return {"target_params": param_count(target_dir), "draft_params": param_count(draft_dir),
            "target_greedy": stats, "seed": SEED, "target_steps": target_steps, "draft_steps": draft_steps,
            "builder": "tools/build_tiny_pair.py", "prompts": [bytevocab.decode(p[1:]) for p in prompts]}


def index_only() -> dict:
    """Recompute the gemma4-mtp entry from the committed weights (no training; the step counts
    are kept from the current entry)."""
    import yaml
    from transformers import Gemma4ForCausalLM

    torch.set_num_threads(1)
    target_dir, draft_dir = pair.WEIGHTS_DIR / "target", pair.WEIGHTS_DIR / "draft"
    target = Gemma4ForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32).eval()
    prompts = held_out_prompts()
    stats = greedy_stats(target, prompts, log)
    old = ((yaml.safe_load(PAIR_INDEX.read_text(encoding="utf-8")) or {}).get("pairs") or {}).get(PAIR_NAME) or {}
    return index_entry(prompts, stats, old.get("target_steps"), old.get("draft_steps"), target_dir, draft_dir)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--out", type=Path, help="output folder (default: the cache)")
    ap.add_argument("--commit", action="store_true", help="write surgery/data/tiny/weights and the pair index entry")
    ap.add_argument("--index-only", action="store_true", help="only rewrite the index entry from the committed weights")
    ap.add_argument("--target-steps", type=int, default=TARGET_STEPS)
    ap.add_argument("--draft-steps", type=int, default=DRAFT_STEPS)
    ap.add_argument("--pool", type=int, default=512, help="greedy-continuation windows")
    ap.add_argument("--draft-k", type=int, default=3, help="MTP steps trained per query")
    args = ap.parse_args(argv)
    if args.index_only:
        update_index(PAIR_INDEX, {PAIR_NAME: index_only()})
        log(f"wrote {PAIR_INDEX}")
        return 0
    out = pair.WEIGHTS_DIR if args.commit else (args.out or pair.cache_root())
    info: dict = {}
    t_dir, d_dir = build(out, args.target_steps, args.draft_steps, args.draft_k, args.pool, info=info)
    log(f"wrote {t_dir} and {d_dir}")
    log(f"index entry: {info}")
    if args.commit:
        update_index(PAIR_INDEX, {PAIR_NAME: info})
        log(f"wrote {PAIR_INDEX}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
