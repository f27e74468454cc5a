"""The SGLang release-oracle grid (issue 65): real public config pairs x serving settings. Each case is
what a user types to `python -m sglang.launch_server` (--speculative-algorithm, --tp-size, --pp-size,
--context-length, --kv-cache-dtype, --attention-backend, --speculative-num-steps); SGLang's own code
answers it (surgery/engine/ask/sglang_runner.py, in the release's venv) and `surgery validate --engine
sglang --engine-version <release>` must agree.

Why these settings: tp {1, 2, 3, 4, 8} x pp {1, 2} is where heads, KV heads and SGLang's per-algorithm
pipeline rules bite; the context lengths cross each target's derived length and the drafts' shorter
ones (SGLang builds the draft at the target's length); the kv-cache dtypes cross SGLang's choices with
vLLM's (`fp8` is vLLM's name only); the attention backends include flex_attention (no speculative
decoding); the draft steps cross 1 and the MTP layer counts.
"""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "tests" / "data" / "configs"
VERDICTS = ROOT / "tests" / "verdicts" / "configs"
SHARED = ROOT.parent / "shared" / "configs"
OWN = Path(__file__).resolve().parent / "configs"  # configs made readable for SGLang here (each file's _source says how)
ALLOW_LONGER = {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}

# (id, recipe, target, draft, SGLang algorithm)
PAIRS = [
    ("llama31-eagle3", "eagle3", CONFIGS / "Llama-3.1-8B-Instruct.json", CONFIGS / "EAGLE3-LLaMA3.1-Instruct-8B.json", "EAGLE3"),
    ("llama31-eagle3-specforge", "eagle3", VERDICTS / "Meta-Llama-3.1-8B.json", VERDICTS / "specforge-llama3-8B-eagle3.json",
     "EAGLE3"),
    ("llama31-eagle", "eagle", CONFIGS / "Llama-3.1-8B-Instruct.json", CONFIGS / "EAGLE-LLaMA3.1-Instruct-8B.json", "EAGLE"),
    ("llama31-standalone", "draft-model", CONFIGS / "Llama-3.1-8B-Instruct.json", CONFIGS / "Llama-3.2-1B-Instruct.json",
     "STANDALONE"),
    ("llama33-70b-eagle3", "eagle3", VERDICTS / "Llama-3.3-70B-Instruct.json", VERDICTS / "specforge-llama3-70B-ealge3.json",
     "EAGLE3"),
    ("deepseek-v3-nextn", "deepseek-mtp", CONFIGS / "DeepSeek-V3.json", CONFIGS / "DeepSeek-V3.json", "NEXTN"),
    ("glm45-air-nextn", "mtp", CONFIGS / "GLM-4.5-Air.json", CONFIGS / "GLM-4.5-Air.json", "NEXTN"),
    ("qwen3-next-nextn", "mtp", CONFIGS / "Qwen3-Next-80B-A3B-Instruct.json", CONFIGS / "Qwen3-Next-80B-A3B-Instruct.json",
     "NEXTN"),
    ("kimi-k2-eagle3", "eagle3", CONFIGS / "Kimi-K2-Instruct.json", CONFIGS / "kimi-k2-eagle3-specforge.json", "EAGLE3"),
    ("phi4-mini-eagle3", "eagle3", CONFIGS / "Phi-4-mini-instruct.json", CONFIGS / "phi4-mini-eagle3-specforge.json", "EAGLE3"),
    ("qwen3-8b-eagle3", "eagle3", CONFIGS / "Qwen3-8B.json", VERDICTS / "specforge-qwen3-8b-eagle3.json", "EAGLE3"),
    ("qwen3-32b-eagle3", "eagle3", VERDICTS / "Qwen3-32B.json", VERDICTS / "specforge-qwen3-32b-eagle3.json", "EAGLE3"),
    ("qwen3-8b-dflash", "dflash", CONFIGS / "Qwen3-8B.json", VERDICTS / "specforge-qwen3-8b-dflash.json", "DFLASH"),
    ("qwen3-8b-dspark", "dspark", CONFIGS / "Qwen3-8B.json", VERDICTS / "specforge-qwen3-8b-dspark.json", "DSPARK"),
    ("qwen3-8b-peagle", "peagle", CONFIGS / "Qwen3-8B.json", VERDICTS / "specforge-qwen3-8b-peagle.json", "EAGLE3"),
    ("gpt-oss-20b-eagle3", "eagle3", VERDICTS / "gpt-oss-20b.json", VERDICTS / "specforge-gpt-oss-20B-eagle3.json", "EAGLE3"),
    ("gemma4-e2b-mtp", "gemma4-mtp", CONFIGS / "gemma-4-E2B-it.json", CONFIGS / "gemma-4-E2B-it-assistant.json", "EAGLE"),
    ("qwen3-30b-a3b-eagle3", "eagle3", VERDICTS / "Qwen3-30B-A3B.json", VERDICTS / "specforge-qwen3-30B-A3B-eagle3.json",
     "EAGLE3"),
    ("gpt-oss-120b-eagle3", "eagle3", VERDICTS / "gpt-oss-120b.json", VERDICTS / "specforge-gpt-oss-120B-eagle3.json",
     "EAGLE3"),
    ("deepseek-r1-eagle3", "eagle3", VERDICTS / "DeepSeek-R1.json", VERDICTS / "specforge-deepseek-r1-eagle3.json",
     "EAGLE3"),
    ("longcat-flash-nextn", "mtp", CONFIGS / "longcat_flash" / "LongCat-Flash.json",
     CONFIGS / "longcat_flash" / "LongCat-Flash.json", "NEXTN"),
    ("glm5-nextn", "deepseek-mtp", VERDICTS / "GLM-5.json", VERDICTS / "GLM-5.json", "NEXTN"),
    ("gemma3-27b-eagle3", "eagle3", VERDICTS / "gemma-3-27b-it.json", VERDICTS / "specforge-gemma3-27b-eagle3.json",
     "EAGLE3"),
    # DeepSeek-V4's own DSpark drafter: its stages ship in the target checkpoint, one config is both
    ("deepseek-v4-dspark", "dspark", OWN / "DeepSeek-V4-Flash-DSpark.sglang.json", OWN / "DeepSeek-V4-Flash-DSpark.sglang.json",
     "DSPARK"),
]
# config edits a user meets in the field, each applied to the published config before SGLang reads it:
# (id, base pair id, {"target": {key: value or None to drop}, "draft": {...}}, settings)
VARIANTS = [
    # a DeepSeek config without moe_layer_freq (the H100 miniature's, docs/gpu.md section 19)
    ("deepseek-v3-no-moe-layer-freq", "deepseek-v3-nextn", {"target": {"moe_layer_freq": None}, "draft": {"moe_layer_freq": None}}),
    # a DSpark head with markov_rank written at the top level, as SGLang reads it
    ("qwen3-8b-dspark-top-markov", "qwen3-8b-dspark", {"draft": {"markov_rank": 256}}),
    # an EAGLE-1 head named with SGLang's EAGLE class
    ("llama31-eagle-sglang-class", "llama31-eagle", {"draft": {"architectures": ["LlamaForCausalLMEagle"]}}),
    # an EAGLE-3 head trained at the target's length
    ("llama31-eagle3-long", "llama31-eagle3", {"draft": {"max_position_embeddings": 131072}}),
    # DeepSeek-V4's DSpark drafter without its rank (DeepseekV4ForCausalLMDSpark refuses), and with the rank under the
    # dense form's key only (SGLang reads markov_rank after dspark_markov_rank: it builds the drafter)
    ("deepseek-v4-dspark-no-rank", "deepseek-v4-dspark", {"draft": {"dspark_markov_rank": None}}),
    ("deepseek-v4-dspark-dense-rank-key", "deepseek-v4-dspark", {"draft": {"dspark_markov_rank": None, "markov_rank": 256}}),
]

# (tp, pp, context_length, kv_cache_dtype, attention_backend, k, env): the tp x pp grid at the configs' own
# length with the env SGLang's docs give for drafts shorter than their target, then the same without it
FULL = ([(tp, pp, None, "auto", None, 3, ALLOW_LONGER) for tp in (1, 2, 3, 4, 8) for pp in (1, 2)]
        + [(1, 1, None, "auto", None, 3, {}), (1, 1, 131072, "auto", None, 3, ALLOW_LONGER),
           (1, 1, 1000000, "auto", None, 3, ALLOW_LONGER), (1, 1, 1000000, "auto", None, 3, {}),
           (1, 1, None, "fp8", None, 3, ALLOW_LONGER), (1, 1, None, "fp8_e4m3", None, 3, ALLOW_LONGER),
           (1, 1, None, "auto", "flex_attention", 3, ALLOW_LONGER), (1, 1, None, "auto", "fa3", 3, ALLOW_LONGER),
           (1, 1, None, "auto", None, 1, ALLOW_LONGER), (1, 1, None, "auto", None, 2, ALLOW_LONGER)])
SHORT = [(tp, pp, None, "auto", None, 3, ALLOW_LONGER) for tp in (1, 2, 4) for pp in (1, 2)] \
    + [(1, 1, None, "auto", None, 3, {}), (1, 1, None, "fp8_e5m2", None, 3, ALLOW_LONGER)]
# settings a pair is not asked at, each with why: a refusal of SGLang's that no rule of surgery's names yet, kept out
# of the grid (which would fail on it) and said here instead
NOT_ASKED = {
    ("deepseek-v4-dspark", "fp8_e5m2"): "arg_groups/overrides.py _deepseek_v4_kv_cache_dtype (0.5.23: 910) asserts a "
    "DeepseekV4ForCausalLM target's cache is fp8_e4m3 or bfloat16 ('fp8_e5m2 is not supported for "
    "DeepseekV4ForCausalLM'), a rule surgery/checks/sglang_start.py does not have",
}
FULL_PAIRS = {"llama31-eagle3", "llama31-eagle", "deepseek-v3-nextn", "qwen3-8b-dflash", "gemma4-e2b-mtp",
              "qwen3-next-nextn", "phi4-mini-eagle3"}


def published(src: Path, root: Path, edits: dict | None = None, tag: str = "") -> Path:
    """A model folder with the config.json as published (our `_` annotations dropped), with `edits` applied
    (a key set to None is dropped; the text config's own copy too, where there is one)."""
    out = root / f"{src.parent.name}-{src.stem}{'-' + tag if tag else ''}"
    if not out.is_dir():
        out.mkdir(parents=True)
        cfg = {k: v for k, v in json.loads(src.read_text(encoding="utf-8")).items() if not k.startswith("_")}
        for key, value in (edits or {}).items():
            for holder in (cfg, cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else None):
                if holder is None or (holder is not cfg and key not in holder):
                    continue
                if value is None:
                    holder.pop(key, None)
                else:
                    holder[key] = value
        (out / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return out


def materialise(case: dict, root: Path) -> dict:
    """The case with its model folders written (`target`, `draft`); a variant's edited configs are also the
    files surgery reads (`target_src`, `draft_src`)."""
    edits = case.get("edits") or {}
    tag = case.get("variant") or ""
    target = published(Path(case["target_src"]), root, edits.get("target"), tag if edits.get("target") else "")
    draft = published(Path(case["draft_src"]), root, edits.get("draft"), tag if edits.get("draft") else "")
    out = {**case, "target": str(target), "draft": str(draft)}
    if edits:
        out["target_src"], out["draft_src"] = str(target / "config.json"), str(draft / "config.json")
    return out


def cases() -> list[dict]:
    out = []
    for name, recipe, target, draft, method in PAIRS:
        if not (target.is_file() and draft.is_file()):
            continue
        for tp, pp, ctx, kv, backend, k, env in (FULL if name in FULL_PAIRS else SHORT):
            if (name, kv) in NOT_ASKED:
                continue
            out.append({"id": f"{name} tp={tp} pp={pp} ctx={ctx} kv={kv} attn={backend} k={k}"
                              f"{' allow-longer' if env else ''}",
                        "recipe": recipe, "target_src": str(target), "draft_src": str(draft), "method": method,
                        "tp": tp, "pp": pp, "max_model_len": ctx, "kv_cache_dtype": kv, "attention_backend": backend,
                        "k": k, "env": env})
    pairs = {p[0]: p for p in PAIRS}
    for variant, base, edits in VARIANTS:
        _, recipe, target, draft, method = pairs[base]
        for tp, pp, ctx, kv, backend, k, env in [(1, 1, None, "auto", None, 3, ALLOW_LONGER), (2, 1, None, "auto", None, 3, {})]:
            out.append({"id": f"{variant} tp={tp} pp={pp}{' allow-longer' if env else ''}", "recipe": recipe,
                        "target_src": str(target), "draft_src": str(draft), "method": method, "tp": tp, "pp": pp,
                        "max_model_len": ctx, "kv_cache_dtype": kv, "attention_backend": backend, "k": k, "env": env,
                        "variant": variant, "edits": edits})
    return out
