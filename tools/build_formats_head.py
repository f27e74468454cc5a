"""Train the second miniature EAGLE-3 head (issue 24): the built-in pair's head reads vLLM ids
(0, 7, 8), and id 0 (the embedding output) has no spelling in an output-of-layer convention
(ModelOpt, SpecForge: SRG662), so that head cannot be exported to ModelOpt at all. This head reads
vLLM ids (1, 7, 8) = ModelOpt / SpecForge ids (0, 6, 7): every format can hold it, and the
convention mismatch the field hits (output-of-layer ids read as vLLM's, one layer early) can be
served for real (docs/formats.md ablation rows).

Same target (surgery/data/pairs/llama-target), same recipe as tools/build_family_pairs.py's
EAGLE-3 stage (its functions, its draft vocabulary map), its own seed; written in the EAGLE format
with the ids in vLLM's convention:

    python tools/build_formats_head.py            # -> surgery/data/pairs/eagle3-outputs/draft
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

TOOLS = Path(__file__).resolve().parent
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))

import build_family_pairs as fam  # noqa: E402
import pairkit as kit  # noqa: E402

AUX_IDS = (1, 7, 8)  # vLLM's convention; ModelOpt / SpecForge (output of layer k): (0, 6, 7)
SEED = kit.FAMILY_SEED + 24
FOLDER = "eagle3-outputs"


def build(out: Path, head_steps: int = 400) -> Path:
    from transformers import LlamaForCausalLM

    fam.AUX_IDS = AUX_IDS  # read by fam.distil_head and fam.head_config
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    target = LlamaForCausalLM.from_pretrained(str(out / "llama-target"), dtype=torch.float32).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    corpus, _ = kit.corpus_split()
    pool = kit.greedy_pool(target, corpus, kit.line_starts(corpus), gen, 512)
    d2t, t2d = fam.draft_vocab_map(pool, fam.DRAFT_VOCAB)
    head = fam.EagleHead(eagle3=True, n_aux=len(AUX_IDS), draft_vocab=fam.DRAFT_VOCAB)
    fam.distil_head(head, target, pool, head_steps, 16, gen, keep=d2t + torch.arange(fam.DRAFT_VOCAB), name=FOLDER)
    dest = out / FOLDER / "draft"
    fam.write_head(head, dest, eagle3=True, extra={"d2t": d2t.contiguous(), "t2d": t2d.contiguous()})
    fam.log(f"wrote {dest} (aux ids {AUX_IDS}, vLLM's convention)")
    return dest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=fam.PAIRS_DIR)
    ap.add_argument("--head-steps", type=int, default=400)
    args = ap.parse_args(argv)
    build(args.out, args.head_steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
