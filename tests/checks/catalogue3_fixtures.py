"""Sparse real-size checkpoints for the third catalogue's weights checks (tests/data/catalogue3/SOURCES.md):
real public configs, safetensors headers with the real names, dtypes and shapes of one main layer and
the MTP layer (a few experts of each, as tests/data/hub does for its repos), and no bulk data: the file
is extended to its declared size with `truncate` (a sparse file), so a 100 GB-shaped header costs a few
kB on disk."""
from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data" / "catalogue3"
WIDTH = {"F32": 4, "BF16": 2, "F16": 2, "F8_E4M3": 1, "F8_E8M0": 1, "U8": 1, "I8": 1, "I32": 4, "I64": 8}
EXPERTS = (0, 1)  # experts listed per layer (the real layers hold 128 / 256)


def write_sparse(path: Path, tensors: list[tuple[str, str, list[int]]]) -> None:
    header, offset = {}, 0
    for name, dtype, shape in sorted(tensors):
        n = math.prod(shape) * WIDTH[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
    os.truncate(path, 8 + len(raw) + offset)


def folder(root: Path, config_name: str, tensors, **config_edits) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    cfg = json.loads((DATA / config_name).read_text())
    cfg.update(config_edits)
    (root / "config.json").write_text(json.dumps(cfg, indent=2))
    write_sparse(root / "model.safetensors", tensors)
    return root


# -- DeepSeek-V3 (native block FP8: weight F8_E4M3 + weight_scale_inv F32 per 128 x 128 block) -------------

def _fp8_block(name: str, out: int, inp: int, plain: bool = False) -> list:
    if plain:
        return [(name + ".weight", "BF16", [out, inp])]
    return [(name + ".weight", "F8_E4M3", [out, inp]), (name + ".weight_scale_inv", "F32", [-(-out // 128), -(-inp // 128)])]


def deepseek_v3_layer(prefix: str, plain: bool = False) -> list:
    """One MoE decoder layer of DeepSeek-V3 (hidden 7168, q_lora 1536, kv_lora 512 + rope 64, 128 heads of
    nope 128 + rope 64 / v 128, experts of 2048)."""
    h, t = 7168, []
    t += _fp8_block(prefix + "self_attn.q_a_proj", 1536, h, plain)
    t += _fp8_block(prefix + "self_attn.q_b_proj", 128 * 192, 1536, plain)
    t += _fp8_block(prefix + "self_attn.kv_a_proj_with_mqa", 576, h, plain)
    t += _fp8_block(prefix + "self_attn.kv_b_proj", 128 * 256, 512, plain)
    t += _fp8_block(prefix + "self_attn.o_proj", h, 128 * 128, plain)
    t += [(prefix + "self_attn.q_a_layernorm.weight", "BF16", [1536]), (prefix + "self_attn.kv_a_layernorm.weight", "BF16", [512]),
          (prefix + "input_layernorm.weight", "BF16", [h]), (prefix + "post_attention_layernorm.weight", "BF16", [h]),
          (prefix + "mlp.gate.weight", "BF16", [256, h]), (prefix + "mlp.gate.e_score_correction_bias", "F32", [256])]
    for e in EXPERTS:
        for p in ("gate_proj", "up_proj"):
            t += _fp8_block(f"{prefix}mlp.experts.{e}.{p}", 2048, h, plain)
        t += _fp8_block(f"{prefix}mlp.experts.{e}.down_proj", h, 2048, plain)
    for p in ("gate_proj", "up_proj"):
        t += _fp8_block(f"{prefix}mlp.shared_experts.{p}", 2048, h, plain)
    t += _fp8_block(prefix + "mlp.shared_experts.down_proj", h, 2048, plain)
    return t


def deepseek_v3(mtp_plain: bool = False) -> list:
    mtp = "model.layers.61."
    return (deepseek_v3_layer("model.layers.60.") + deepseek_v3_layer(mtp, plain=mtp_plain)
            + [(mtp + "embed_tokens.weight", "BF16", [129280, 7168]), (mtp + "enorm.weight", "BF16", [7168]),
               (mtp + "hnorm.weight", "BF16", [7168]), (mtp + "eh_proj.weight", "BF16", [7168, 14336]),
               (mtp + "shared_head.norm.weight", "BF16", [7168]), (mtp + "shared_head.head.weight", "BF16", [129280, 7168]),
               ("model.embed_tokens.weight", "BF16", [129280, 7168]), ("model.norm.weight", "BF16", [7168]),
               ("lm_head.weight", "BF16", [129280, 7168])])


# -- DeepSeek-V4 Flash (native: FP8 linears with `.scale`, MXFP4 experts I8 + `.scale` E8M0 per 32;
#    NVIDIA's NVFP4 export: routed experts U8 packed + weight_scale F8_E4M3 per 16 + weight_scale_2 + input_scale)

def deepseek_v4_layer(prefix: str, experts: str) -> list:
    h, inter, t = 4096, 2048, []
    for name, out, inp in (("attn.wq_a", 1024, h), ("attn.wkv", 512, h), ("attn.wo_b", h, 1024)):
        t += [(prefix + name + ".weight", "F8_E4M3", [out, inp]), (prefix + name + ".scale", "F8_E8M0", [out // 128, inp // 128])]
    t += [(prefix + "attn_norm.weight", "BF16", [h]), (prefix + "ffn_norm.weight", "BF16", [h]),
          (prefix + "ffn.gate.weight", "BF16", [256, h])]
    for e in EXPERTS:
        for p, out, inp in (("w1", inter, h), ("w3", inter, h), ("w2", h, inter)):
            base = f"{prefix}ffn.experts.{e}.{p}"
            if experts == "nvfp4":
                t += [(base + ".weight", "U8", [out, inp // 2]), (base + ".weight_scale", "F8_E4M3", [out, inp // 16]),
                      (base + ".weight_scale_2", "F32", []), (base + ".input_scale", "F32", [])]
            elif experts == "bf16":
                t += [(base + ".weight", "BF16", [out, inp])]
            else:  # native MXFP4
                t += [(base + ".weight", "I8", [out, inp // 2]), (base + ".scale", "F8_E8M0", [out, inp // 32])]
    for p, out, inp in (("w1", inter, h), ("w3", inter, h), ("w2", h, inter)):
        t += [(f"{prefix}ffn.shared_experts.{p}.weight", "F8_E4M3", [out, inp]),
              (f"{prefix}ffn.shared_experts.{p}.scale", "F8_E8M0", [out // 128, inp // 128])]
    return t


def deepseek_v4(mtp_experts: str = "mxfp4") -> list:
    return (deepseek_v4_layer("layers.42.", "nvfp4") + deepseek_v4_layer("mtp.0.", mtp_experts)
            + [("mtp.0.e_proj.weight", "F8_E4M3", [4096, 4096]), ("mtp.0.e_proj.scale", "F8_E8M0", [32, 32]),
               ("mtp.0.h_proj.weight", "F8_E4M3", [4096, 4096]), ("mtp.0.h_proj.scale", "F8_E8M0", [32, 32]),
               ("embed.weight", "BF16", [129280, 4096]), ("head.weight", "BF16", [129280, 4096])])


# -- GLM-4.5-Air, compressed-tensors W4A16 (pack-quantized: weight_packed I32 [out, in/8], weight_scale
#    BF16 [out, in/128], weight_shape I64 [2]); the ignore list keeps attention of layers 0 / 46 and every
#    shared expert BF16

def _w4a16(name: str, out: int, inp: int, plain: bool) -> list:
    if plain:
        return [(name + ".weight", "BF16", [out, inp])]
    return [(name + ".weight_packed", "I32", [out, inp // 8]), (name + ".weight_scale", "BF16", [out, inp // 128]),
            (name + ".weight_shape", "I64", [2])]


def glm_layer(prefix: str, attn_plain: bool, experts_plain: bool) -> list:
    h, heads, kv, hd, inter, t = 4096, 96, 8, 128, 1408, []
    for p, out, inp in (("q_proj", heads * hd, h), ("k_proj", kv * hd, h), ("v_proj", kv * hd, h), ("o_proj", h, heads * hd)):
        t += _w4a16(f"{prefix}self_attn.{p}", out, inp, attn_plain)
    t += [(prefix + "input_layernorm.weight", "BF16", [h]), (prefix + "post_attention_layernorm.weight", "BF16", [h]),
          (prefix + "mlp.gate.weight", "BF16", [128, h])]
    for e in EXPERTS:
        for p, out, inp in (("gate_proj", inter, h), ("up_proj", inter, h), ("down_proj", h, inter)):
            t += _w4a16(f"{prefix}mlp.experts.{e}.{p}", out, inp, experts_plain)
    for p, out, inp in (("gate_proj", inter, h), ("up_proj", inter, h), ("down_proj", h, inter)):
        t += [(f"{prefix}mlp.shared_experts.{p}.weight", "BF16", [out, inp])]
    return t


def glm(mtp_experts_plain: bool = False) -> list:
    return (glm_layer("model.layers.45.", attn_plain=False, experts_plain=False)
            + glm_layer("model.layers.46.", attn_plain=True, experts_plain=mtp_experts_plain)
            + [("model.layers.46.eh_proj.weight", "BF16", [4096, 8192]), ("model.layers.46.enorm.weight", "BF16", [4096]),
               ("model.layers.46.hnorm.weight", "BF16", [4096]), ("model.embed_tokens.weight", "BF16", [151552, 4096]),
               ("lm_head.weight", "BF16", [151552, 4096])])
