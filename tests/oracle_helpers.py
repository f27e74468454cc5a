"""Shared helpers for the oracle tests: build Gemma 4 config dicts, and ask transformers' and vLLM's
own code (never a re-typed copy of it) which target layer each draft layer reads its KV from.

Each oracle returns ``{draft_index: target_index}``; a draft layer absent from the dict has no
producer in that engine (transformers: ``shared_kv_states[type]`` would raise KeyError; vLLM: the
layer's attention gets no ``kv_sharing_target_layer_name``).
"""
from __future__ import annotations

import functools
import importlib.util
import json
import re
import shutil
import sys
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if importlib.util.find_spec("surgery") is None:  # not pip-installed: plain `pytest` from the checkout
    sys.path.insert(0, str(REPO))
DATA = Path(__file__).resolve().parent / "data"
CONFIGS = DATA / "configs"
SHARED_CONFIGS = REPO.parent / "shared" / "configs"
RECIPE_FILE = REPO / "recipes" / "gemma4-mtp.yaml"
SCHEMA_FILE = REPO / "schemas" / "recipe.schema.json"

SLIDING = "sliding_attention"
FULL = "full_attention"

# tiny dims: the attention modules built from them are cheap (and we build them on the meta device)
TINY = dict(hidden_size=16, num_attention_heads=2, num_key_value_heads=1, head_dim=8, global_head_dim=8,
            intermediate_size=16, vocab_size=32, hidden_size_per_layer_input=0, vocab_size_per_layer_input=0,
            sliding_window=4)


def recipe_text() -> str:
    return RECIPE_FILE.read_text(encoding="utf-8")


def e2b_configs() -> tuple[dict, dict]:
    """(draft, target) config dicts of the real E2B pair, from our own copy in tests/data/configs/."""
    dst = CONFIGS / "gemma4"
    names = ("gemma-4-E2B-it-assistant.json", "gemma-4-E2B-it.json")
    if not all((dst / n).exists() for n in names):  # first run: copy from the shared corpus
        dst.mkdir(parents=True, exist_ok=True)
        for n in names:
            shutil.copyfile(SHARED_CONFIGS / "gemma4" / n, dst / n)
    return tuple(json.loads((dst / n).read_text(encoding="utf-8")) for n in names)  # type: ignore[return-value]


def strip_annotations(obj):
    """Drop the corpus's `_source` / `_notes` keys (transformers would keep them as attributes)."""
    if isinstance(obj, dict):
        return {k: strip_annotations(v) for k, v in obj.items() if not k.startswith("_")}
    return obj


def target_text_config(layer_types: list[str], num_kv_shared_layers: int, **extra) -> dict:
    return {"model_type": "gemma4_text", "architectures": ["Gemma4ForCausalLM"], **TINY,
            "num_hidden_layers": len(layer_types), "layer_types": list(layer_types),
            "num_kv_shared_layers": num_kv_shared_layers, **extra}


def assistant_config(layer_types: list[str], **extra) -> dict:
    text = {"model_type": "gemma4_text", **TINY, "num_hidden_layers": len(layer_types),
            "layer_types": list(layer_types), "num_kv_shared_layers": len(layer_types)}
    return {"model_type": "gemma4_assistant", "architectures": ["Gemma4AssistantForCausalLM"],
            "backbone_hidden_size": TINY["hidden_size"], "text_config": text, **extra}


# ---------------------------------------------------------------- transformers -----------------------
def hf_target_config(cfg: dict):
    import transformers

    cfg = strip_annotations(cfg)
    if cfg.get("model_type") == "gemma4":
        return transformers.Gemma4Config(**cfg)
    return transformers.Gemma4TextConfig(**{k: v for k, v in cfg.items() if k != "model_type"})


def hf_draft_config(cfg: dict):
    import transformers

    cfg = strip_annotations(cfg)
    return transformers.Gemma4AssistantConfig(**{k: v for k, v in cfg.items() if k != "model_type"})


def hf_attention_modules(text_config) -> list:
    """transformers' own Gemma4TextAttention for every layer (meta device: no memory, no init cost)."""
    import torch
    from transformers.models.gemma4.modeling_gemma4 import Gemma4TextAttention

    with torch.device("meta"):
        return [Gemma4TextAttention(text_config, i) for i in range(text_config.num_hidden_layers)]


def hf_kv_map(draft_hf, target_hf) -> dict[int, int]:
    """transformers' rule, read off its modules: a KV-shared draft layer of type T reads
    ``shared_kv_states[T]``, written by the target layer with ``store_full_length_kv`` and
    ``layer_type == T`` (later writers overwrite earlier ones, so the last such layer wins)."""
    target_attn = hf_attention_modules(target_hf.get_text_config())
    draft_attn = hf_attention_modules(draft_hf.get_text_config())
    writers: dict[str, int] = {}
    for a in target_attn:
        if a.store_full_length_kv:
            writers[a.layer_type] = a.layer_idx
    out = {}
    for a in draft_attn:
        assert a.is_kv_shared_layer, f"draft layer {a.layer_idx} is not KV-shared in transformers"
        if a.layer_type in writers:  # else: shared_kv_states[a.layer_type] -> KeyError
            out[a.layer_idx] = writers[a.layer_type]
    return out


# ---------------------------------------------------------------- vLLM ------------------------------
_NAME = re.compile(r"^model\.layers\.(\d+)\.self_attn\.attn$")


def _target_names(n: int) -> set[str]:
    return {f"model.layers.{i}.self_attn.attn" for i in range(n)}


def _read_names(layers) -> dict[int, int]:
    out = {}
    for i, layer in enumerate(layers):
        name = getattr(layer.self_attn.attn, "kv_sharing_target_layer_name", None)
        if name is not None:
            m = _NAME.match(name)
            assert m, f"unexpected target layer name {name!r}"
            out[i] = int(m.group(1))
    return out


def _stand_in_layers(n: int, scales: bool = False) -> list:
    layers = []
    for _ in range(n):
        attn = types.SimpleNamespace()
        if scales:
            import torch

            attn._k_scale = torch.tensor(1.0)
            attn._v_scale = torch.nn.Parameter(torch.tensor(1.0), requires_grad=False)
            attn._k_scale_float = attn._v_scale_float = 1.0
            attn._k_scale_cpu = torch.tensor(1.0)
            attn._v_scale_cpu = torch.tensor(1.0)
        layers.append(types.SimpleNamespace(self_attn=types.SimpleNamespace(attn=attn)))
    return layers


def vllm_legacy_kv_map(draft_hf, target_hf) -> dict[int, int]:
    """`Gemma4Proposer._setup_gemma4_kv_sharing` (legacy runner), called unbound on a stand-in."""
    from vllm.v1.spec_decode.gemma4 import Gemma4Proposer

    n_draft = draft_hf.get_text_config().num_hidden_layers
    n_target = target_hf.get_text_config().num_hidden_layers
    layers = _stand_in_layers(n_draft)
    self = types.SimpleNamespace(
        speculative_config=types.SimpleNamespace(draft_model_config=types.SimpleNamespace(hf_config=draft_hf)),
        vllm_config=types.SimpleNamespace(model_config=types.SimpleNamespace(hf_config=target_hf)),
        model=types.SimpleNamespace(model=types.SimpleNamespace(layers=layers)),
    )
    Gemma4Proposer._setup_gemma4_kv_sharing(self, _target_names(n_target))
    return _read_names(layers)


def vllm_v2_kv_map(draft_hf, target_hf, check_scales: bool = True) -> dict[int, int]:
    """`Gemma4Speculator._setup_gemma4_kv_sharing` (v2 GPU runner), called unbound on a stand-in.
    It also copies each mapped target layer's KV scales onto the draft layer (through
    `compilation_config.static_forward_context`); with `check_scales` we give every target layer
    distinct scales and check each draft layer got those of the layer it was mapped to."""
    import torch
    from vllm.v1.worker.gpu.spec_decode.gemma4.speculator import Gemma4Speculator

    n_draft = draft_hf.get_text_config().num_hidden_layers
    n_target = target_hf.get_text_config().num_hidden_layers
    layers = _stand_in_layers(n_draft, scales=True)
    ctx = {}
    for t in range(n_target):
        k, v = 2.0 + t, 100.0 + t
        ctx[f"model.layers.{t}.self_attn.attn"] = types.SimpleNamespace(
            _k_scale=torch.tensor(k), _v_scale=torch.tensor(v), _k_scale_float=k, _v_scale_float=v,
            _k_scale_cpu=torch.tensor(k), _v_scale_cpu=torch.tensor(v))
    self = types.SimpleNamespace(
        speculative_config=types.SimpleNamespace(draft_model_config=types.SimpleNamespace(hf_config=draft_hf)),
        vllm_config=types.SimpleNamespace(
            model_config=types.SimpleNamespace(hf_config=target_hf),
            compilation_config=types.SimpleNamespace(static_forward_context=ctx)),
    )
    model = types.SimpleNamespace(model=types.SimpleNamespace(layers=layers))
    Gemma4Speculator._setup_gemma4_kv_sharing(self, model, _target_names(n_target))
    out = _read_names(layers)
    if check_scales:
        for d, layer in enumerate(layers):
            a = layer.self_attn.attn
            t = out.get(d)
            k, v = (2.0 + t, 100.0 + t) if t is not None else (1.0, 1.0)
            assert (float(a._k_scale), float(a._v_scale), a._k_scale_float, a._v_scale_float,
                    float(a._k_scale_cpu), float(a._v_scale_cpu)) == (k, v, k, v, k, v), d
            assert isinstance(a._v_scale, torch.nn.Parameter) and not isinstance(a._k_scale, torch.nn.Parameter)
    return out


# ---------------------------------------------------------------- ours ------------------------------
@functools.lru_cache(maxsize=1)
def shipped_recipe():
    """The shipped gemma4-mtp recipe, parsed once (resolve only reads it)."""
    from surgery import parse_recipe

    return parse_recipe(recipe_text(), str(RECIPE_FILE))


def our_plan(draft: dict, target: dict, runtime=None):
    from surgery import Runtime, facts_from_config, resolve

    return resolve(shipped_recipe(), facts_from_config(draft, "draft.json"), facts_from_config(target, "target.json"),
                   runtime or Runtime())


def our_kv_map(plan) -> dict[int, int]:
    return {row.draft: row.target for row in plan.layer_maps["kv_source"]}


def srg302_draft_layers(plan) -> set[int]:
    out = set()
    for d in plan.diagnostics:
        if d.code == "SRG302":
            m = re.search(r"draft layer (\d+)", d.message)
            assert m, d.message
            out.add(int(m.group(1)))
    return out
