"""Train the extra miniature EAGLE-3 heads on the built-in Llama target, one per id set.

``eagle3-outputs`` (issue 24): the built-in pair's head reads vLLM ids
(0, 7, 8), and id 0 (the embedding output) has no spelling in an output-of-layer convention
(ModelOpt, SpecForge: SRG662), so that head cannot be exported to ModelOpt at all. This head reads
vLLM ids (1, 7, 8) = ModelOpt / SpecForge ids (0, 6, 7): every format can hold it, and the
convention mismatch the field hits (output-of-layer ids read as vLLM's, one layer early) can be
served for real (docs/formats.md ablation rows).

``eagle3-sglang`` (issue 36): vLLM ids (1, 4, 7). SGLang captures the input of layers 1..L-1 only
(no embedding output, no final state: SRG362 for the built-in head's 0 and 8), so this is the head
`surgery apply eagle3 --engine sglang` runs. Its ids differ from what stock SGLang captures for an
8-layer target when the config has no ``eagle_config`` ((2, 4, 5): ``set_eagle3_layers_to_capture``),
so the recipe's capture list is what makes it work there (docs/sglang.md).

Same target (surgery/data/pairs/llama-target), same recipe as tools/build_family_pairs.py's
EAGLE-3 stage (its functions, its draft vocabulary map), its own seed; written in the EAGLE format
with the ids in vLLM's convention:

    python tools/build_formats_head.py                       # -> surgery/data/pairs/eagle3-outputs/draft
    python tools/build_formats_head.py --head eagle3-sglang  # -> surgery/data/pairs/eagle3-sglang/draft
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

# folder -> (aux ids in vLLM's convention, seed)
HEADS = {
    "eagle3-outputs": ((1, 7, 8), kit.FAMILY_SEED + 24),  # ModelOpt / SpecForge (output of layer k): (0, 6, 7)
    "eagle3-sglang": ((1, 4, 7), kit.FAMILY_SEED + 36),  # all inside SGLang's capturable 1..7
}

# heads that stand in for the built-in one on an engine (surgery.pairs.builtin_pair(engine=...))
ENGINE_VARIANTS = {
    "eagle3-sglang": ("sglang", "SGLang captures the input of layers 1..L-1 only: the built-in head's ids "
                                "[0, 7, 8] are SRG362 there, so SGLang runs this head of the same recipe, trained "
                                "on ids [1, 4, 7]"),
}


def build(out: Path, head_steps: int = 400, folder: str = "eagle3-outputs") -> Path:
    from transformers import LlamaForCausalLM

    aux_ids, seed = HEADS[folder]
    fam.AUX_IDS = aux_ids  # read by fam.distil_head and fam.head_config
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    target = LlamaForCausalLM.from_pretrained(str(out / "llama-target"), dtype=torch.float32).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    corpus, _ = kit.corpus_split()
    pool = kit.greedy_pool(target, corpus, kit.line_starts(corpus), gen, 512)
    d2t, t2d = fam.draft_vocab_map(pool, fam.DRAFT_VOCAB)
    head = fam.EagleHead(eagle3=True, n_aux=len(aux_ids), draft_vocab=fam.DRAFT_VOCAB)
    fam.distil_head(head, target, pool, head_steps, 16, gen, keep=d2t + torch.arange(fam.DRAFT_VOCAB), name=folder)
    dest = out / folder / "draft"
    fam.write_head(head, dest, eagle3=True, extra={"d2t": d2t.contiguous(), "t2d": t2d.contiguous()})
    fam.log(f"wrote {dest} (aux ids {aux_ids}, vLLM's convention)")
    if folder in ENGINE_VARIANTS:
        engine, because = ENGINE_VARIANTS[folder]
        kit.update_index(out / "index.yaml", {"eagle3": {"engines": {engine: {
            "draft": f"{folder}/draft", "eagle_aux_hidden_state_layer_ids": list(aux_ids),
            "draft_params": kit.param_count(dest), "seed": seed, "builder": "tools/build_formats_head.py",
            "because": because}}}})
    return dest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=fam.PAIRS_DIR)
    ap.add_argument("--head-steps", type=int, default=400)
    ap.add_argument("--head", choices=sorted(HEADS), default="eagle3-outputs")
    args = ap.parse_args(argv)
    build(args.out, args.head_steps, args.head)
    return 0


if __name__ == "__main__":
    sys.exit(main())
