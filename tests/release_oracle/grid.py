"""The release-oracle grid (issue 53): real public config pairs x serving settings, the same cases for
every release. Each case is what a user types (`--tp`, `--pp`, `--max-model-len`, `--kv-cache-dtype`);
each release's own config layer answers it (runner.py) and `surgery validate --engine-version <release>`
must agree.

Why these settings: tp {1, 2, 3, 4, 8} x pp {1, 2} is where heads, KV heads and pipeline rules bite; the
lengths cross each target's derived length; every cache dtype any judged release accepts is asked of
every release (the lists differ between releases); the block drafters and EAGLE-3 at pp 2 are where 0.34
refuses targets that cannot relay aux hidden states between stages.
"""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "tests" / "data" / "configs"
VERDICTS = ROOT / "tests" / "verdicts" / "configs"
SHARED = ROOT.parent / "shared" / "configs"

# (id, recipe, target, draft, method)
PAIRS = [
    ("llama31-eagle3", "eagle3", CONFIGS / "Llama-3.1-8B-Instruct.json", CONFIGS / "EAGLE3-LLaMA3.1-Instruct-8B.json", "eagle3"),
    ("llama31-eagle", "eagle", CONFIGS / "Llama-3.1-8B-Instruct.json", CONFIGS / "EAGLE-LLaMA3.1-Instruct-8B.json", "eagle"),
    ("llama31-draft-model", "draft-model", CONFIGS / "Llama-3.1-8B-Instruct.json", CONFIGS / "Llama-3.2-1B-Instruct.json",
     "draft_model"),
    ("gemma4-e2b", "gemma4-mtp", CONFIGS / "gemma-4-E2B-it.json", CONFIGS / "gemma-4-E2B-it-assistant.json", "mtp"),
    ("deepseek-v3-mtp", "deepseek-mtp", CONFIGS / "DeepSeek-V3.json", CONFIGS / "DeepSeek-V3.json", "mtp"),
    ("qwen3-next-mtp", "mtp", CONFIGS / "Qwen3-Next-80B-A3B-Instruct.json", CONFIGS / "Qwen3-Next-80B-A3B-Instruct.json", "mtp"),
    ("glm45-air-mtp", "mtp", CONFIGS / "GLM-4.5-Air.json", CONFIGS / "GLM-4.5-Air.json", "mtp"),
    ("kimi-k2-eagle3", "eagle3", CONFIGS / "Kimi-K2-Instruct.json", CONFIGS / "kimi-k2-eagle3-specforge.json", "eagle3"),
    ("phi4-mini-eagle3", "eagle3", CONFIGS / "Phi-4-mini-instruct.json", CONFIGS / "phi4-mini-eagle3-specforge.json",
     "eagle3"),
    ("qwen3-8b-eagle3", "eagle3", CONFIGS / "Qwen3-8B.json", VERDICTS / "specforge-qwen3-8b-eagle3.json", "eagle3"),
    ("qwen3-8b-dflash", "dflash", CONFIGS / "Qwen3-8B.json", VERDICTS / "specforge-qwen3-8b-dflash.json", "dflash"),
    ("qwen3-8b-dspark", "dspark", CONFIGS / "Qwen3-8B.json", VERDICTS / "specforge-qwen3-8b-dspark.json", "dspark"),
    ("gpt-oss-20b-eagle3", "eagle3", VERDICTS / "gpt-oss-20b.json", VERDICTS / "specforge-gpt-oss-20B-eagle3.json", "eagle3"),
]
if (SHARED / "gemma4" / "gemma-4-E4B-it.json").is_file():
    PAIRS.append(("gemma4-e4b", "gemma4-mtp", SHARED / "gemma4" / "gemma-4-E4B-it.json",
                  SHARED / "gemma4" / "gemma-4-E4B-it-assistant.json", "mtp"))

# (tp, pp, max_model_len, kv_cache_dtype): the tp x pp grid at the configs' own length, then lengths
# (131072: within every target here; 200000: within Qwen3-Next's 262144 only; 1000000: none), a known
# cache dtype and one no release has
SETTINGS = ([(tp, pp, None, "auto") for tp in (1, 2, 3, 4, 8) for pp in (1, 2)]
            + [(1, 1, 131072, "auto"), (2, 1, 200000, "auto"), (1, 1, 1000000, "auto"), (2, 1, None, "fp8"),
               (1, 1, None, "fp9")])
# the block drafters and the EAGLE-3 heads on other targets: the pipeline rows are what differs
SHORT = {"qwen3-8b-eagle3", "qwen3-8b-dflash", "qwen3-8b-dspark", "gpt-oss-20b-eagle3"}
SHORT_SETTINGS = [(tp, pp, None, "auto") for tp in (1, 2) for pp in (1, 2)]


# vLLM's per-release config rewrites and load-time refusals (issue 65): (id, recipe, target, draft, method, tp,
# pp, k, speculative_config extras); configs/ holds the derived configs, each saying what it changes and why
OWN = Path(__file__).resolve().parent / "configs"
REWRITES = [
    # an MTP k above the layer count (n_predict) that is no multiple of it is refused; a multiple is not
    *[(f"deepseek-v3-mtp2 k={k}", "deepseek-mtp", OWN / "DeepSeek-V3-mtp2.json", OWN / "DeepSeek-V3-mtp2.json", "mtp",
       1, 1, k, {}) for k in (1, 2, 3, 4)],
    # FLy verification: 0.33+ need k >= 2; older releases have no "fly"
    *[(f"llama31-eagle3 fly k={k}", "eagle3", CONFIGS / "Llama-3.1-8B-Instruct.json",
       CONFIGS / "EAGLE3-LLaMA3.1-Instruct-8B.json", "eagle3", 1, 1, k, {"rejection_sample_method": "fly"})
      for k in (1, 2)],
    # DFlash with dflash_config.sample_from_anchor: the V2 speculator refuses it (0.27+), 0.25-0.26 ignore it
    ("qwen3-8b-dflash sample_from_anchor", "dflash", CONFIGS / "Qwen3-8B.json",
     OWN / "specforge-qwen3-8b-dflash-sample-from-anchor.json", "dflash", 1, 1, 2, {}),
    # DSpark's class renames: SpecForge's DSparkDraftModel/qwen3 (markov_rank where Qwen3DSparkModel reads it)
    ("qwen3-8b-dspark top markov_rank", "dspark", CONFIGS / "Qwen3-8B.json",
     OWN / "specforge-qwen3-8b-dspark-top-markov.json", "dspark", 1, 1, 7, {}),
    # P-EAGLE's registered class name, renamed by EAGLEConfig under eagle3 (Eagle3PeagleLlamaForCausalLM)
    ("llama31-peagle native", "peagle", CONFIGS / "Llama-3.1-8B-Instruct.json", OWN / "peagle-llama31-native.json",
     "eagle3", 1, 1, 4, {"parallel_drafting": True}),
    # SpecForge's P-EAGLE head as published (PEagleDraftModel): renamed Eagle3PEagleDraftModel under eagle3
    ("qwen3-8b-peagle specforge", "peagle", CONFIGS / "Qwen3-8B.json",
     ROOT / "tests" / "data" / "block_drafts" / "specforge-qwen3-8b-peagle.json", "eagle3", 1, 1, 4, {}),
    # a tp that divides the attention heads but not a Gated DeltaNet layer's conv width (Qwen3.6-27B's widths)
    *[(f"qwen3-next-qwen36-widths tp={tp}", "mtp", OWN / "Qwen3-Next-qwen36-widths.json",
       OWN / "Qwen3-Next-qwen36-widths.json", "mtp", tp, 1, 1, {}) for tp in (4, 12)],
    # Qwen3.5's MTP draft under pp (Qwen3_5MTP is no SupportsPP before 0.30, where the draft takes the target's
    # pp), judged where the release can import Qwen3.5 (0.34 here; 0.26 / 0.32 lack torchvision); not at tp 12,
    # where its vision tower's 16 heads stop the build first (no rule here reads the vision config)
    *[(f"qwen3.5-27b-mtp pp={pp}", "mtp", VERDICTS / "Qwen3.5-27B.json", VERDICTS / "Qwen3.5-27B.json", "mtp",
       1, pp, 1, {}) for pp in (1, 2)],
]


def published(src: Path, root: Path) -> Path:
    """A model folder with the config.json as published (our `_` annotations dropped)."""
    out = root / f"{src.parent.name}-{src.stem}"
    if not out.is_dir():
        out.mkdir(parents=True)
        cfg = {k: v for k, v in json.loads(src.read_text(encoding="utf-8")).items() if not k.startswith("_")}
        (out / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return out


def _overrides(target: Path) -> dict:
    """Gemma 4 targets served as their text class: transformers' Gemma4Processor needs torchvision, which
    the 0.32 CI venv lacks (same text config, same heads and lengths)."""
    cfg = json.loads(target.read_text(encoding="utf-8"))
    return {"architectures": ["Gemma4ForCausalLM"]} if cfg.get("architectures") == ["Gemma4ForConditionalGeneration"] \
        else {}


def cases(cache_dtypes: list[str]) -> list[dict]:
    """Every case: the pairs x their settings, then each cache dtype any judged release accepts."""
    out = []
    for name, recipe, target, draft, method in PAIRS:
        settings = SHORT_SETTINGS if name in SHORT else SETTINGS
        for tp, pp, mml, kv in settings:
            out.append({"id": f"{name} tp={tp} pp={pp} max_model_len={mml} kv={kv}", "recipe": recipe,
                        "target_src": str(target), "draft_src": str(draft), "method": method, "tp": tp, "pp": pp,
                        "max_model_len": mml, "kv_cache_dtype": kv, "hf_overrides": _overrides(target)})
    for name, recipe, target, draft, method, tp, pp, k, extra in REWRITES:
        out.append({"id": name, "recipe": recipe, "target_src": str(target), "draft_src": str(draft), "method": method,
                    "tp": tp, "pp": pp, "max_model_len": None, "kv_cache_dtype": "auto", "k": k, "spec_extra": extra,
                    "hf_overrides": _overrides(target)})
    name, recipe, target, draft, method = PAIRS[0]
    for kv in cache_dtypes:
        if kv in ("auto", "fp8"):
            continue
        out.append({"id": f"{name} kv={kv}", "recipe": recipe, "target_src": str(target), "draft_src": str(draft),
                    "method": method, "tp": 1, "pp": 1, "max_model_len": None, "kv_cache_dtype": kv,
                    "hf_overrides": {}})
    return out
