"""Plan-level comparison of three wirings of one pair: the recipe's (on SGLang), SGLang's own and
vLLM's own, per role (input_embeddings, lm_head: `target` or `own`) and for the captured layers.

Plan level: computed from the configs, the checkpoints' tensor names and values, SGLang's rules
(rules.py, checked against its code) and vLLM's (`vllm_stock`). No engine runs:
SGLang cannot run speculative decoding on this CPU (docs/sglang.md). `variant="own_different"`
gives the draft its own, different weights for every role (what a checkpoint with a trained or a
random head / embedding brings: TorchSpec#38, sglang#27908's opposite)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from . import rules
from ..facts import read_facts
from ..plan import Runtime
from ..recipe import load_recipe
from ..resolver import resolve

ROLE_KEYS = {"input_embeddings": ("model.embed_tokens.weight", "embed_tokens.weight"),
             "lm_head": ("lm_head.weight",)}
ALGORITHMS = {"eagle3": "EAGLE3", "eagle": "EAGLE", "mtp": "NEXTN", "deepseek_mtp": "NEXTN",
              "draft_model": "STANDALONE"}


def _tensors(folder: Path, names) -> dict:
    from safetensors import safe_open

    out = {}
    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(str(f), "pt") as st:
            for k in st.keys():
                if k in names:
                    out[k] = st.get_tensor(k)
    return out


def brings(draft_dir: Path, target_dir: Path, role: str) -> tuple[bool, bool]:
    """(the draft checkpoint has the role's weight, it equals the target's)."""
    import torch

    keys = ROLE_KEYS[role]
    d, t = _tensors(draft_dir, keys), _tensors(target_dir, keys)
    dw = next((d[k] for k in keys if k in d), None)
    tw = next((t[k] for k in keys if k in t), None)
    if dw is None:
        return False, False
    return True, tw is not None and dw.shape == tw.shape and bool(torch.equal(dw, tw))


def vllm_stock(method: str, has_own: bool, identical: bool) -> str:
    """vLLM 0.32's own wiring (v1/spec_decode/llm_base_proposer.py): MTP always shares; a draft
    model keeps everything (its loader requires every weight); EAGLE / EAGLE-3 share when the draft
    brings none or identical weights (`_maybe_share_embeddings` / `_maybe_share_lm_head`)."""
    if method == "mtp":
        return "target"
    if method == "draft_model":
        return "own"
    return "target" if not has_own or identical else "own"


def _shared(policy: str | None, has_own: bool, identical: bool) -> bool:
    policy = policy or "share"
    return policy == "share" or not has_own or (policy == "share_if_identical" and identical)


def wiring_rows(recipe_ref: str, draft_dir, target_dir, variant: str = "as_is", engine_version: str | None = None) -> dict:
    """`engine_version`: the SGLang release whose capture range `capturable_by_sglang` is judged for (None:
    the installed one, else the newest the engine card read; surgery/engine/capture.py)."""

    draft_dir, target_dir = Path(draft_dir), Path(target_dir)
    recipe = load_recipe(recipe_ref)
    plan = resolve(recipe, read_facts(draft_dir), read_facts(target_dir), Runtime(engine="sglang", engine_version=engine_version))
    method = ((recipe.engine or {}).get("vllm") or {}).get("method", recipe.name)
    algorithm = ALGORITHMS.get(method, ALGORITHMS.get(recipe.name, "EAGLE"))
    d_cfg = json.loads((draft_dir / "config.json").read_text())
    t_cfg = json.loads((target_dir / "config.json").read_text())
    sglang = rules.stock_wiring(algorithm, d_cfg, t_cfg)
    rows = []
    for role in ROLE_KEYS:
        has_own, identical = (True, False) if variant == "own_different" else brings(draft_dir, target_dir, role)
        recipe_says = "(no step)"
        for op in plan.operations:
            if getattr(op, "role", None) != role:
                continue
            recipe_says = ("target" if _shared(op.if_draft_has_own, has_own, identical) else "own") \
                if op.kind == "share_module" else "own"
        vllm = vllm_stock(method, has_own, identical)
        row = {"role": role, "draft_brings_own": has_own, "identical_to_target": identical, "recipe": recipe_says,
               "sglang_stock": sglang[role], "vllm_stock": vllm}
        row["sglang_differs_from_vllm"] = row["sglang_stock"] != vllm
        rows.append(row)
    capture = None
    planned = [op.layers for op in plan.operations if op.kind == "capture_hidden_states"]
    if "layers_to_capture" in sglang:
        capture = {"recipe": list(planned[0]) if planned else None, "sglang_stock": sglang["layers_to_capture"],
                   "sglang_reads": rules.aux_ids_read(d_cfg),
                   "capturable_by_sglang": [i for i in (planned[0] if planned else ())
                                            if i in rules.capturable(int(t_cfg["num_hidden_layers"]), engine_version)]}
    return {"recipe": recipe.name, "algorithm": algorithm, "variant": variant, "level": "plan (no engine ran)",
            "sglang_call": sglang["call"], "roles": rows, "capture": capture}


def main(argv=None) -> int:
    """`python -m surgery.sglang.compare RECIPE --target T --draft D [--variant own_different]`: JSON."""

    p = argparse.ArgumentParser(prog="python -m surgery.sglang.compare", description=__doc__.splitlines()[0])
    p.add_argument("recipe")
    p.add_argument("--target", required=True)
    p.add_argument("--draft", required=True)
    p.add_argument("--variant", choices=["as_is", "own_different"], default="as_is")
    a = p.parse_args(argv)
    print(json.dumps(wiring_rows(a.recipe, a.draft, a.target, a.variant), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
