"""Tiny safetensors checkpoints for the weights checks, written byte by byte (8-byte little-endian
header length, JSON header, raw data): no torch, numpy or safetensors needed to build them, so the
tests can also run where those are missing. tests/checks/test_weights_checks.py checks the writer against the
`safetensors` package once, when it is installed."""
from __future__ import annotations

import json
import random
import struct
from pathlib import Path

FMT = {"F32": "f", "I64": "q", "BOOL": "?", "F16": "e", "I32": "i"}
WIDTH = {"F32": 4, "I64": 8, "BOOL": 1, "F16": 2, "I32": 4}

TARGET_LAYERS = 8
HIDDEN = 16
VOCAB = 64
DRAFT_VOCAB = 32
AUX_IDS = [1, 4, 6]


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int], list]]) -> None:
    """tensors: name -> (dtype, shape, flat values)."""
    header, blobs, offset = {}, [], 0
    for name, (dtype, shape, values) in tensors.items():
        n = 1
        for d in shape:
            n *= d
        assert len(values) == n, name
        blob = struct.pack(f"<{n}{FMT[dtype]}", *values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))


def rand(shape: list[int], seed: int) -> tuple[str, list[int], list[float]]:
    rng = random.Random(seed)
    n = 1
    for d in shape:
        n *= d
    return ("F32", shape, [rng.uniform(-1, 1) for _ in range(n)])


def llama_config(**extra) -> dict:
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": HIDDEN,
            "intermediate_size": 32, "num_attention_heads": 2, "num_key_value_heads": 1,
            "num_hidden_layers": TARGET_LAYERS, "vocab_size": VOCAB, "max_position_embeddings": 256,
            "rope_theta": 10000.0, "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2, **extra}


def target_tensors(fp8_scales: bool = False) -> dict:
    t = {"model.embed_tokens.weight": rand([VOCAB, HIDDEN], 1), "lm_head.weight": rand([VOCAB, HIDDEN], 2),
         "model.norm.weight": rand([HIDDEN], 3)}
    for i in range(TARGET_LAYERS):
        t[f"model.layers.{i}.self_attn.q_proj.weight"] = rand([HIDDEN, HIDDEN], 10 + i)
        if fp8_scales:
            t[f"model.layers.{i}.self_attn.k_scale"] = ("F32", [], [0.05])
            t[f"model.layers.{i}.self_attn.v_scale"] = ("F32", [], [0.07])
    return t


def d2t_offsets() -> list[int]:
    """Draft id i -> target id 2i (every even target token): offsets d2t[i] = 2i - i = i."""
    return list(range(DRAFT_VOCAB))


def eagle3_tensors(n_aux: int = 3, lm_head: bool = True, d2t: str | None = "offsets", t2d: bool = True,
                   embed: str | None = None) -> dict:
    t = {"fc.weight": rand([HIDDEN, n_aux * HIDDEN], 20), "midlayer.self_attn.q_proj.weight": rand([HIDDEN, 2 * HIDDEN], 21),
         "norm.weight": rand([HIDDEN], 22)}
    if lm_head:
        t["lm_head.weight"] = rand([DRAFT_VOCAB, HIDDEN], 23)
    if d2t == "offsets":
        t["d2t"] = ("I64", [DRAFT_VOCAB], d2t_offsets())
    elif d2t == "absolute":
        t["d2t"] = ("I64", [DRAFT_VOCAB], [2 * i for i in range(DRAFT_VOCAB)])  # target ids, not offsets
    elif d2t == "zeros":
        t["d2t"] = ("I64", [DRAFT_VOCAB], [0] * DRAFT_VOCAB)
    if t2d:
        t["t2d"] = ("BOOL", [VOCAB], [i % 2 == 0 for i in range(VOCAB)])
    if embed == "target":
        t["embed_tokens.weight"] = rand([VOCAB, HIDDEN], 1)  # same seed as the target's: identical
    elif embed == "random":
        t["embed_tokens.weight"] = rand([VOCAB, HIDDEN], 99)
    return t


def eagle3_config(aux_ids=AUX_IDS, **extra) -> dict:
    cfg = llama_config(architectures=["LlamaForCausalLMEagle3"], num_hidden_layers=1,
                       draft_vocab_size=DRAFT_VOCAB, **extra)
    if aux_ids is not None:
        cfg["eagle_aux_hidden_state_layer_ids"] = list(aux_ids)
    return cfg


def write_folder(folder: Path, config: dict, tensors: dict, shards: int = 1) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    if shards == 1:
        write_safetensors(folder / "model.safetensors", tensors)
        return folder
    names = list(tensors)
    weight_map = {}
    for s in range(shards):
        part = {n: tensors[n] for n in names[s::shards]}
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(folder / fname, part)
        weight_map.update({n: fname for n in part})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return folder
