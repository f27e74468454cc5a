"""Write the reconstructed MTP-family configs under tests/data/configs/<family>/ (issue 18).

This machine has no network, so no checkpoint's config.json can be fetched. Each file is built from
the config class the installed libraries ship for the model type (transformers 5.19 `CONFIG_MAPPING`,
else vLLM 0.32's `vllm.transformers_utils.config._CONFIG_REGISTRY`) with its defaults, plus the fields
vLLM's `SpeculativeConfig.hf_config_override` and the family's MTP model code read (architecture, MTP
layer count field). Families without any config class are written by hand from the fields vLLM's model
code reads. Every file says so in its `_source` key (facts readers drop `_`-keys).

Run once, review, commit: `PYTHONPATH=$PWD .venv/bin/python tools/build_mtp_configs.py`. Tests read
the committed files only.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "configs"
VLLM = "vllm 0.32"

# file, base model type (config class), edits (dotted keys), architecture, what vLLM reads
FAMILIES = [
    ("deepseek_v4/DeepSeek-V4.json", "deepseek_v4", {"num_nextn_predict_layers": 1}, "DeepseekV4ForCausalLM",
     "models/deepseek_v4/*/mtp.py DeepSeekV4MultiTokenPredictor"),
    ("glm_moe_dsa/GLM-MoE-DSA.json", "glm_moe_dsa", {"num_nextn_predict_layers": 1}, "GlmMoeDsaForCausalLM",
     "hf_config_override (-> deepseek_mtp, DeepseekV32MTPModel), models/deepseek_v32/*/mtp.py"),
    ("dots3_note/Dots3-Note.json", "dots3_note",
     {"num_nextn_predict_layers": 1, "layer_types": ["full_attention"] * 61}, "Dots3NoteForCausalLM",
     "hf_config_override (mtp_layer_types), models/dots3_note/nvidia/mtp.py"),
    ("kimi_k3/Kimi-K3.json", "kimi_k3", {"text_config.num_nextn_predict_layers": 1}, "KimiK3ForConditionalGeneration",
     "hf_config_override (text_config.num_nextn_predict_layers), models/kimi_k3/*/mtp.py"),
    ("mimo_v2/MiMo-V2-Flash.json", "mimo_v2_flash", {"num_nextn_predict_layers": 3}, "MiMoV2FlashForCausalLM",
     "hf_config_override (_MIMO_V2_FLASH_NUM_MTP_LAYERS: vLLM serves the first MTP layer), mimo_v2_mtp.py"),
    ("glm4_moe_lite/GLM-4.7-Flash.json", "glm4_moe_lite", {"num_nextn_predict_layers": 1}, "Glm4MoeLiteForCausalLM",
     "hf_config_override (num_hidden_layers 0), glm4_moe_lite_mtp.py"),
    ("glm_ocr/GLM-OCR.json", "glm_ocr", {"num_nextn_predict_layers": 1, "text_config.num_nextn_predict_layers": 1},
     "GlmOcrForConditionalGeneration", "hf_config_override (num_hidden_layers 0), glm_ocr_mtp.py"),
    ("ernie4_5_moe/ERNIE-4.5-MoE.json", "ernie4_5_moe", {"num_nextn_predict_layers": 1}, "Ernie4_5_MoeForCausalLM",
     "hf_config_override (-> ernie_mtp), ernie_mtp.py"),
    ("nemotron_h/Nemotron-H-MTP.json", "nemotron_h", {"num_nextn_predict_layers": 1, "mtp_hybrid_override_pattern": "*E"},
     "NemotronHForCausalLM", "hf_config_override (num_nextn_predict_layers > 0), nemotron_h_mtp.py "
     "(mtp_hybrid_override_pattern: one physical layer per pattern character)"),
    ("qwen4_exp/Qwen4-Exp.json", "qwen4_exp", {"text_config.mtp_num_hidden_layers": 1},
     "Qwen4ExpForConditionalGeneration", "hf_config_override (mtp_num_hidden_layers, hc_count), models/qwen4_exp/*/mtp.py"),
    ("exaone_moe/EXAONE-MoE.json", "exaone_moe", {"num_nextn_predict_layers": 1}, "ExaoneMoeForCausalLM",
     "hf_config_override, exaone_moe_mtp.py"),
    ("exaone4_5/EXAONE-4.5.json", "exaone4_5", {"num_nextn_predict_layers": 1}, "Exaone4_5_ForConditionalGeneration",
     "hf_config_override (substring exaone4_5), exaone4_5_mtp.py (text_config.num_hidden_layers)"),
    ("qwen3_5/Qwen3.5.json", "qwen3_5", {"text_config.mtp_num_hidden_layers": 1}, "Qwen3_5ForConditionalGeneration",
     "hf_config_override (mtp_num_hidden_layers), qwen3_5_mtp.py"),
    ("qwen3_5/Qwen3.5-MoE.json", "qwen3_5_moe", {"text_config.mtp_num_hidden_layers": 1},
     "Qwen3_5MoeForConditionalGeneration", "hf_config_override (mtp_num_hidden_layers), qwen3_5_mtp.py"),
    ("qwen3_5/Qwen3.5-text.json", "qwen3_5_text", {"mtp_num_hidden_layers": 1}, "Qwen3_5ForCausalLM",
     "hf_config_override (text-only checkpoint), qwen3_5_mtp.py"),
    ("qwen3_5/Qwen3.5-MoE-text.json", "qwen3_5_moe_text", {"mtp_num_hidden_layers": 1}, "Qwen3_5MoeForCausalLM",
     "hf_config_override (text-only checkpoint), qwen3_5_mtp.py"),
    ("longcat_flash/LongCat-Flash.json", "longcat_flash", {}, "LongcatFlashForCausalLM",
     "hf_config_override, longcat_flash_mtp.py (mtp_start_layer_idx = num_layers * 2, one MTP layer)"),
    ("step3p5/Step-3.5.json", "step3p5", {"num_nextn_predict_layers": 1}, "Step3p5ForCausalLM",
     "hf_config_override, step3p5_mtp.py"),
    ("step3p5/Step-3.7.json", "step3p7", {"text_config.num_nextn_predict_layers": 1}, "Step3p7ForConditionalGeneration",
     "hf_config_override (promotes text_config), step3p5_mtp.py"),
    ("hy_v3/HY-V3.json", "hy_v3", {"num_nextn_predict_layers": 1}, "HYV3ForCausalLM", "hf_config_override, hy_v3_mtp.py"),
    ("hy_v4/HY-V4.json", "hy_v4", {"num_nextn_predict_layers": 1}, "HYV4ForCausalLM",
     "hf_config_override, models/hy_v4/nvidia/mtp.py"),
    ("inkling/Inkling.json", "inkling_mm_model", {"mtp_config": {"num_nextn_predict_layers": 2}},
     "InklingForConditionalGeneration", "hf_config_override (mtp_config.num_nextn_predict_layers), models/inkling/*/mtp.py"),
    ("inkling/Inkling-text.json", "inkling_model", {"mtp_config": {"num_nextn_predict_layers": 2}},
     "InklingForCausalLM", "hf_config_override (mtp_config.num_nextn_predict_layers), models/inkling/*/mtp.py"),
    ("minimax_m3/MiniMax-M3.json", "minimax_m3_vl", {"text_config.num_mtp_modules": 1},
     "MiniMaxM3SparseForConditionalGeneration", "hf_config_override (num_mtp_modules), models/minimax_m3/*/mtp.py"),
    ("bailing_hybrid/Ling-3-VL.json", "bailing_moe_v3_vl", {"text_config.num_nextn_predict_layers": 1},
     "BailingMoeV3VLForConditionalGeneration",
     "hf_config_override (promotes text_config, -> bailing_hybrid_v3_mtp), bailing_moe_v3_mtp.py"),
    ("nemotron_h/Nemotron-H-Omni-MTP.json", "nemotron_h_omni",
     {"text_config.num_nextn_predict_layers": 1, "text_config.mtp_hybrid_override_pattern": "*E"},
     "NemotronH_Omni_Reasoning_V3", "hf_config_override (promotes text_config), nemotron_h_mtp.py"),
    ("glm5_next/GLM-5-Next.json", "glm5_next",
     {"text_config.num_nextn_predict_layers": 1, "text_config.head_dim": 256}, "Glm5NextForConditionalGeneration",
     "hf_config_override (text_config.num_nextn_predict_layers), models/glm5next/common/mtp.py"),
]

# derived from another family's file: (file, from file, edits, architecture, what vLLM reads)
DERIVED = [
    ("mimo_v2/MiMo-V2.json", "mimo_v2/MiMo-V2-Flash.json", {"model_type": "mimo_v2"}, "MiMoV2ForCausalLM",
     "hf_config_override keys on the architecture (MiMoV2ForCausalLM); model_type not known offline"),
    ("mimo_v2/MiMo-V2-Omni.json", "mimo_v2/MiMo-V2-Flash.json", {"model_type": "mimo_v2_omni"}, "MiMoV2OmniForCausalLM",
     "hf_config_override keys on the architecture (MiMoV2OmniForCausalLM); model_type not known offline"),
    ("nemotron_h/Nemotron-H-Puzzle-MTP.json", "nemotron_h/Nemotron-H-MTP.json", {"model_type": "nemotron_h_puzzle"},
     "NemotronHPuzzleForCausalLM", "hf_config_override ({nemotron_h, nemotron_h_puzzle}), nemotron_h_mtp.py"),
    ("qwen4_exp/Qwen4-Exp-text.json", "qwen4_exp/Qwen4-Exp.json", {"__text_only__": True}, "Qwen4ExpForCausalLM",
     "hf_config_override (qwen4_exp_text), models/qwen4_exp/*/mtp.py"),
    ("bailing_hybrid/Ling-3.json", "bailing_hybrid/Ling-3-VL.json", {"__text_only__": True}, "BailingMoeV3ForCausalLM",
     "hf_config_override (BailingMoeV3ForCausalLM -> bailing_hybrid_v3_mtp), bailing_moe_v3_mtp.py"),
    ("bailing_hybrid/Ling-2.5.json", "bailing_hybrid/Ling-3-VL.json", {"__text_only__": True}, "BailingMoeV2_5ForCausalLM",
     "hf_config_override (bailing_hybrid / BailingMoeV2_5ForCausalLM -> bailing_hybrid_mtp), bailing_moe_mtp.py"),
    ("nemotron_h/Nemotron-H-Super-Omni-MTP.json", "nemotron_h/Nemotron-H-Omni-MTP.json", {},
     "NemotronH_Super_Omni_Reasoning_V3", "hf_config_override (promotes text_config), nemotron_h_mtp.py"),
    ("intern_s2/Intern-S2-Preview.json", "qwen3_5/Qwen3.5-MoE.json", {"model_type": "intern_s2_preview"},
     "InternS2PreviewForConditionalGeneration", "hf_config_override (text_config.mtp_num_hidden_layers, -> qwen3_5_mtp)"),
    ("intern_s2/Intern-S2-Mobius.json", "qwen3_5/Qwen3.5-MoE.json",
     {"model_type": "interns2_mobius", "text_config.mtp_num_experts": 64, "text_config.mtp_num_experts_per_tok": 8},
     "InternS2MobiusForConditionalGeneration",
     "hf_config_override (mtp_num_experts / mtp_num_experts_per_tok, -> InternS2MobiusMTP)"),
]

HAND = {
    # no config class in transformers 5.19 or vLLM 0.32: the fields vLLM's model code reads
    "pangu_ultra_moe/openPangu-Ultra-MoE.json": {
        "_source": f"reconstructed from {VLLM} model code (openpangu.py / openpangu_mtp.py read these fields: "
                   "DeepSeek-V3-style MLA MoE); sizes are openPangu-Ultra-MoE-718B's public values as remembered "
                   "offline, not fetched",
        "architectures": ["PanguUltraMoEForCausalLM"], "model_type": "pangu_ultra_moe",
        "hidden_size": 7680, "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
        "vocab_size": 153600, "num_nextn_predict_layers": 1, "kv_lora_rank": 512, "q_lora_rank": 1536,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 256,
        "num_experts_per_tok": 8, "first_k_dense_replace": 3, "moe_intermediate_size": 2048,
        "intermediate_size": 18432, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
        "rope_theta": 25600000, "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 1},
    "mimo/MiMo-7B-MTP-3.json": None,  # filled from the shared MiMo-7B-RL config below
}


def _set(cfg: dict, dotted: str, value) -> None:
    *path, last = dotted.split(".")
    node = cfg
    for key in path:
        node = node.setdefault(key, {})
    node[last] = value


def _defaults(model_type: str) -> tuple[dict, str]:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if model_type in CONFIG_MAPPING:
        cls = CONFIG_MAPPING[model_type]
        where = f"transformers {cls.__module__}.{cls.__name__}"
    else:
        from vllm.transformers_utils.config import _CONFIG_REGISTRY

        cls = _CONFIG_REGISTRY[model_type]
        where = f"{VLLM} {cls.__module__}.{cls.__name__}"
    data = cls().to_dict()
    for key in ("transformers_version", "_name_or_path", "output_attentions", "output_hidden_states",
                "return_dict", "dtype", "torch_dtype", "id2label", "label2id", "problem_type",
                "chunk_size_feed_forward", "is_encoder_decoder", "tokenizer_class", "prefix",
                "task_specific_params", "finetuning_task", "sep_token_id", "decoder_start_token_id",
                "cross_attention_hidden_size", "add_cross_attention", "tie_encoder_decoder", "pruned_heads",
                "architectures"):
        data.pop(key, None)
        if isinstance(data.get("text_config"), dict):
            data["text_config"].pop(key, None)
    return data, where


def _finite(obj):
    """transformers' to_dict keeps float('inf') (e.g. Nemotron-H `time_step_limit`), which JSON cannot hold."""
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    if isinstance(obj, float) and obj != obj or obj in (float("inf"), float("-inf")):
        return None
    return obj


def build() -> list[Path]:
    written: list[Path] = []
    made: dict[str, dict] = {}
    for rel, model_type, edits, arch, reads in FAMILIES:
        cfg, where = _defaults(model_type)
        cfg["model_type"] = model_type
        cfg["architectures"] = [arch]
        for key, value in edits.items():
            _set(cfg, key, copy.deepcopy(value))
        cfg = {"_source": f"reconstructed: defaults of {where}, with the fields {VLLM} reads set "
                          f"({', '.join(f'{k}={v!r}' for k, v in edits.items()) or 'none'}; architecture {arch} "
                          f"as vLLM's registry names it); vLLM code: {reads}. Not a downloaded checkpoint config.",
               **cfg}
        made[rel] = cfg
    for rel, base, edits, arch, reads in DERIVED:
        cfg = copy.deepcopy(made[base])
        edits = dict(edits)
        if edits.pop("__text_only__", False):
            cfg = {**{k: v for k, v in cfg.items() if k.startswith("_")}, **cfg["text_config"]}
        for key, value in edits.items():
            _set(cfg, key, value)
        cfg["architectures"] = [arch]
        cfg["_source"] = f"reconstructed from {base} ({cfg['_source'][:60]}...), changed: " \
                         f"{', '.join(f'{k}={v!r}' for k, v in edits.items()) or 'text_config promoted'}; " \
                         f"architecture {arch}; vLLM code: {reads}"
        made[rel] = cfg
    for rel, cfg in HAND.items():
        if cfg is not None:
            made[rel] = cfg
    mimo = json.loads((OUT / "MiMo-7B-RL.json").read_text())
    mimo["num_nextn_predict_layers"] = 3
    mimo = {"_source": "MiMo-7B-RL.json (public values, reconstructed offline) with num_nextn_predict_layers 3: "
                       "a variant (not a published checkpoint) that exercises multi-layer MTP numbering; vLLM's "
                       "mimo_mtp.py builds all of them",
            **{k: v for k, v in mimo.items() if not k.startswith("_")}}
    made["mimo/MiMo-7B-MTP-3.json"] = mimo
    for rel, cfg in sorted(made.items()):
        path = OUT / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(_finite(cfg), indent=2, sort_keys=False) + "\n", encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    for p in build():
        print(p.relative_to(ROOT))
