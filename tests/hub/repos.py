"""Real-size repos for the local hub (tests/hub/hubserver.py): real configs, real safetensors headers
(names, dtypes, shapes, shard layout), sparse bulk data. The geometry and files are the public
repos' (tests/data/hub/SOURCES.md says what is verbatim and what is derived).

- `meta-llama/Llama-3.1-8B-Instruct` (gated): 291 BF16 tensors over 4 shards, 16.06 GB declared;
- `RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3`: a speculators EAGLE-3 head, d2t with real
  offsets (a sorted sample of the target vocabulary), its embedding equal to the target's;
- `google/gemma-4-31B-it` + `google/gemma-4-31B-it-assistant`.
"""
from __future__ import annotations

import json
import random
import struct
from pathlib import Path

from hub.hubserver import Repo, RepoFile, safetensors_file

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
HUBDATA = DATA / "hub"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
EAGLE3 = "RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3"
GEMMA = "google/gemma-4-31B-it"
GEMMA_ASSISTANT = "google/gemma-4-31B-it-assistant"
EMBED_SAMPLE = 1 << 16  # bytes at each end of the embedding that hold real (equal) data


def _json(obj) -> bytes:
    return (json.dumps(obj, indent=2) + "\n").encode()


def _read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _hubfile(repo: str, name: str) -> Path:
    return HUBDATA / repo.replace("/", "__") / name


def _embed_sample(seed: int = 7) -> bytes:
    return random.Random(seed).randbytes(EMBED_SAMPLE)


def llama_tensors() -> list[tuple[str, str, list[int]]]:
    """Llama 3.1 8B's 291 tensors (hidden 4096, 32 layers, 32 heads / 8 KV heads of 128, MLP 14336,
    vocab 128256), BF16."""
    h, inter, kv, v = 4096, 14336, 1024, 128256
    out = [("model.embed_tokens.weight", "BF16", [v, h])]
    for i in range(32):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", "BF16", [h]), (p + "mlp.down_proj.weight", "BF16", [h, inter]),
                (p + "mlp.gate_proj.weight", "BF16", [inter, h]), (p + "mlp.up_proj.weight", "BF16", [inter, h]),
                (p + "post_attention_layernorm.weight", "BF16", [h]), (p + "self_attn.k_proj.weight", "BF16", [kv, h]),
                (p + "self_attn.o_proj.weight", "BF16", [h, h]), (p + "self_attn.q_proj.weight", "BF16", [h, h]),
                (p + "self_attn.v_proj.weight", "BF16", [kv, h])]
    out += [("model.norm.weight", "BF16", [h]), ("lm_head.weight", "BF16", [v, h])]
    return out


def _shard(tensors, weight_map: dict | None, n: int) -> dict[str, list]:
    """Tensors per shard file: the real index's assignment where we have it, else contiguous runs."""
    files = {f"model-{i + 1:05d}-of-{n:05d}.safetensors": [] for i in range(n)}
    if weight_map:
        for t in tensors:
            files[weight_map[t[0]]].append(t)
        return files
    per = -(-len(tensors) // n)
    names = list(files)
    for i, t in enumerate(tensors):
        files[names[i // per]].append(t)
    return files


def sharded_repo_files(tensors, n: int, weight_map: dict | None, data: dict[str, bytes]) -> dict[str, RepoFile]:
    shards = _shard(tensors, weight_map, n)
    files, wm, total = {}, {}, 0
    for fname, ts in shards.items():
        vf = safetensors_file(ts, {k: v for k, v in data.items() if any(t[0] == k for t in ts)},
                              metadata={"format": "pt"})
        files[fname] = RepoFile(vf, lfs=True)
        for t in ts:
            wm[t[0]] = fname
            size = 2
            for d in t[2]:
                size *= d
            total += size
    files["model.safetensors.index.json"] = RepoFile(_json({"metadata": {"total_size": total}, "weight_map": wm}))
    return files




def llama_repo() -> Repo:
    verbatim = _hubfile(LLAMA, "config.json")
    cfg = (verbatim if verbatim.is_file() else DATA / "configs" / "Llama-3.1-8B-Instruct.json").read_bytes()
    index = _hubfile(LLAMA, "model.safetensors.index.json")
    weight_map = _read(index)["weight_map"] if index.is_file() else None
    files = sharded_repo_files(llama_tensors(), 4, weight_map, {"model.embed_tokens.weight": _embed_sample()})
    files["config.json"] = RepoFile(cfg)
    for name in ("generation_config.json", "tokenizer_config.json", "special_tokens_map.json"):
        p = _hubfile(LLAMA, name)
        files[name] = RepoFile(p.read_bytes() if p.is_file() else _json({"bos_token": "<|begin_of_text|>",
                                                                          "eos_token": "<|eot_id|>"}))
    # a tokenizer.json of the real one's size would be 9 MB of test data: a small one stands in; it is
    # never read (the draft has none, so the identity check does not reach the target's)
    files["tokenizer.json"] = RepoFile(_json({"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0}}}))
    files["LICENSE"] = RepoFile(b"LLAMA 3.1 COMMUNITY LICENSE AGREEMENT\n")
    files["README.md"] = RepoFile(b"# Llama 3.1 8B Instruct (test double)\n")
    return Repo(LLAMA, files, gated=True)


def eagle3_tensors() -> list[tuple[str, str, list[int]]]:
    """The speculators EAGLE-3 head for Llama 3.1 8B: one decoder layer over 2 x hidden, fc from 3
    aux hidden states, a 32000-token draft vocabulary with d2t / t2d."""
    h, inter, kv, v, dv = 4096, 14336, 1024, 128256, 32000
    return [("d2t", "I64", [dv]), ("t2d", "BOOL", [v]), ("embed_tokens.weight", "BF16", [v, h]),
            ("fc.weight", "BF16", [h, 3 * h]), ("layers.0.hidden_norm.weight", "BF16", [h]),
            ("layers.0.input_layernorm.weight", "BF16", [h]), ("layers.0.mlp.down_proj.weight", "BF16", [h, inter]),
            ("layers.0.mlp.gate_proj.weight", "BF16", [inter, h]), ("layers.0.mlp.up_proj.weight", "BF16", [inter, h]),
            ("layers.0.post_attention_layernorm.weight", "BF16", [h]),
            ("layers.0.self_attn.k_proj.weight", "BF16", [kv, 2 * h]),
            ("layers.0.self_attn.o_proj.weight", "BF16", [h, h]),
            ("layers.0.self_attn.q_proj.weight", "BF16", [h, 2 * h]),
            ("layers.0.self_attn.v_proj.weight", "BF16", [kv, 2 * h]),
            ("lm_head.weight", "BF16", [dv, h]), ("norm.weight", "BF16", [h])]


def d2t_bytes(dv: int = 32000, v: int = 128256, seed: int = 3) -> bytes:
    """Offsets of a real-looking draft vocabulary: a sorted sample of target ids, d2t[i] = id_i - i."""
    ids = sorted(random.Random(seed).sample(range(v), dv))
    return struct.pack(f"<{dv}q", *(t - i for i, t in enumerate(ids)))


def eagle3_repo() -> Repo:
    cfg_path = _hubfile(EAGLE3, "config.json")
    cfg = cfg_path.read_bytes() if cfg_path.is_file() else \
        (DATA / "formats" / "speculators-llama3.1-8b-eagle3" / "config.json").read_bytes()
    data = {"d2t": d2t_bytes(), "embed_tokens.weight": _embed_sample()}
    files = {"config.json": RepoFile(cfg),
             "model.safetensors": RepoFile(safetensors_file(eagle3_tensors(), data, {"format": "pt"}), lfs=True),
             "README.md": RepoFile(b"# Llama-3.1-8B-Instruct-speculator.eagle3 (test double)\n")}
    return Repo(EAGLE3, files)


def gemma_repos() -> list[Repo]:
    """google/gemma-4-31B-it and its assistant, from the configs in tests/data/hub (real where found)."""
    out = []
    for repo in (GEMMA, GEMMA_ASSISTANT):
        folder = HUBDATA / repo.replace("/", "__")
        if not (folder / "config.json").is_file():
            continue
        cfg = _read(folder / "config.json")
        files = {"config.json": RepoFile((folder / "config.json").read_bytes())}
        for extra in ("generation_config.json", "tokenizer_config.json"):
            if (folder / extra).is_file():
                files[extra] = RepoFile((folder / extra).read_bytes())
        tensors_file = folder / "tensors.json"
        tensors = tensors_of(tensors_file) if tensors_file.is_file() else gemma_tensors(cfg)
        if len(tensors) > 400:
            files.update(sharded_repo_files(tensors, 2, None, {}))
        else:
            files["model.safetensors"] = RepoFile(safetensors_file(tensors, {}, {"format": "pt"}), lfs=True)
        out.append(Repo(repo, files))
    return out


def tensors_of(path: Path) -> list[tuple[str, str, list[int]]]:
    """A tensors.json (name -> {dtype, shape}; `_` keys are notes)."""
    data = _read(path)
    data = data.get("tensors", data) if isinstance(data.get("tensors"), dict) else data
    return [(n, t["dtype"], list(t["shape"])) for n, t in data.items() if not n.startswith("_") and isinstance(t, dict)]


def gemma_tensors(cfg: dict) -> list[tuple[str, str, list[int]]]:
    """Gemma 4 tensors from a config's geometry (derived; tests/data/hub/SOURCES.md): per layer the
    attention projections with q/k norms (k_proj/v_proj absent in KV-shared layers), MLP, norms."""
    text = cfg.get("text_config", cfg)
    h, n = text["hidden_size"], text["num_hidden_layers"]
    inter = text.get("intermediate_size", 4 * h)
    heads = text["num_attention_heads"]
    kv = text["num_key_value_heads"]
    hd, ghd = text.get("head_dim", 256), text.get("global_head_dim", text.get("head_dim", 256))
    gkv = text.get("num_global_key_value_heads") or kv
    types = text.get("layer_types") or ["full_attention"] * n
    shared = text.get("num_kv_shared_layers", 0)
    assistant = cfg.get("model_type", "").endswith("assistant")
    # the target nests its text model (`model.language_model.`); the assistant keeps `model.` (as the
    # built-in tiny pair's draft, surgery/data/tiny/weights/draft, writes it)
    pre = "model.language_model." if "text_config" in cfg and not assistant else "model."
    out = [(pre + "embed_tokens.weight", "BF16", [text["vocab_size"], h])]
    if assistant:
        backbone = cfg["backbone_hidden_size"]
        out += [("pre_projection.weight", "BF16", [h, 2 * backbone]), ("post_projection.weight", "BF16", [backbone, h])]
    for i in range(n):
        p = f"{pre}layers.{i}."
        d, k = (ghd, gkv) if types[i] == "full_attention" else (hd, kv)
        out += [(p + "input_layernorm.weight", "BF16", [h]), (p + "post_attention_layernorm.weight", "BF16", [h]),
                (p + "pre_feedforward_layernorm.weight", "BF16", [h]),
                (p + "post_feedforward_layernorm.weight", "BF16", [h]),
                (p + "mlp.gate_proj.weight", "BF16", [inter, h]), (p + "mlp.up_proj.weight", "BF16", [inter, h]),
                (p + "mlp.down_proj.weight", "BF16", [h, inter]),
                (p + "self_attn.q_proj.weight", "BF16", [heads * d, h]), (p + "self_attn.q_norm.weight", "BF16", [d]),
                (p + "self_attn.o_proj.weight", "BF16", [h, heads * d]), (p + "layer_scalar", "BF16", [1])]
        if i < n - shared:
            out += [(p + "self_attn.k_proj.weight", "BF16", [k * d, h]), (p + "self_attn.k_norm.weight", "BF16", [d])]
            if not (types[i] == "full_attention" and text.get("attention_k_eq_v")):
                out.append((p + "self_attn.v_proj.weight", "BF16", [k * d, h]))
    out.append((pre + "norm.weight", "BF16", [h]))
    return out


def all_repos() -> list[Repo]:
    return [llama_repo(), eagle3_repo(), *gemma_repos()]


TINY_TARGET = "test-org/tiny-llama"
TINY_HEAD = "test-org/tiny-eagle3"


def tiny_repos() -> list[Repo]:
    """A small target and EAGLE-3 head (the weights checks' test checkpoints, tests/tiny_checkpoints.py)
    for the hostile-server suite: cheap to serve, every check reached."""
    import sys

    sys.path.insert(0, str(ROOT / "tests"))
    import tiny_checkpoints as tc

    def file_of(tensors: dict) -> RepoFile:
        specs = [(n, d, s) for n, (d, s, _) in tensors.items()]
        data = {}
        fmt = {"F32": "f", "I64": "q", "BOOL": "?"}
        for n, (d, s, values) in tensors.items():
            data[n] = struct.pack(f"<{len(values)}{fmt[d]}", *values)
        return RepoFile(safetensors_file(specs, data, {"format": "pt"}), lfs=True)

    target = {"config.json": RepoFile(_json(tc.llama_config())), "model.safetensors": file_of(tc.target_tensors())}
    head = {"config.json": RepoFile(_json(tc.eagle3_config())),
            "model.safetensors": file_of(tc.eagle3_tensors(embed="target"))}
    return [Repo(TINY_TARGET, target, revisions={"main": "a" * 40, "v1": "b" * 40}), Repo(TINY_HEAD, head)]
