"""vLLM on the H200 (v2 model runner): the plugin in the Gemma 4 speculator, FP8 scale copy measured.

    bash /tmp/vbundle/install.sh && . /tmp/vbundle/env.sh && PYTHONPATH=$PWD:$PYTHONPATH python3 bench/gpu/vllm_gpu.py

One process, engines one after another (in-process engine core), on the distilled tiny Gemma 4
pair from surgery/data/tiny/weights:
  greedy_bf16         target alone, bf16 KV cache (reference output)
  spec_bf16_plain     MTP speculation, plugin hooks installed but no recipe (vLLM's own wiring)
  spec_bf16_recipe    MTP speculation with SURGERY_RECIPE=recipes/gemma4-mtp.yaml
  spec_fp8_recipe     FP8 KV cache, calibrated target K/V scales, recipe (scales copied)
  spec_fp8_plain      FP8 KV cache, calibrated target K/V scales, no recipe (draft keeps 1.0)
  greedy_fp8          target alone with the FP8 cache (reference for the FP8 runs)
Per engine: start time, output tokens, spec-decode counters (acceptance), and the live wiring
(target layer per draft layer, cache identity, scales) from surgery.vllm.wiring.describe_wiring.
"""
from __future__ import annotations

import os
import time

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

from common import OUT, guarded, log, save, tiny_pair_dirs  # noqa: E402

FP8_MAX = 448.0
K = 3
MAX_TOKENS = 64


def calibrate(target_dir) -> dict[int, tuple[float, float]]:
    """Per non-shared target layer: (k_scale, v_scale) = amax / 448 over a calibration pass (HF)."""
    import torch
    from transformers import DynamicCache, Gemma4ForCausalLM

    from surgery.tinymodels.bytevocab import encode
    from surgery.pairs import DEFAULT_PROMPTS

    model = Gemma4ForCausalLM.from_pretrained(str(target_dir), dtype=torch.bfloat16).cuda().eval()
    amax: dict[int, list[float]] = {}
    with torch.no_grad():
        for text in DEFAULT_PROMPTS:
            cache = DynamicCache()
            ids = torch.tensor([encode(text * 4)], device="cuda")
            model(input_ids=ids, past_key_values=cache, use_cache=True)
            for j, layer in enumerate(cache.layers):
                if getattr(layer, "keys", None) is None:
                    continue
                k, v = layer.keys.abs().max().item(), layer.values.abs().max().item()
                prev = amax.get(j, [0.0, 0.0])
                amax[j] = [max(prev[0], k), max(prev[1], v)]
    del model
    torch.cuda.empty_cache()
    return {j: (a[0] / FP8_MAX, a[1] / FP8_MAX) for j, a in amax.items()}


def set_target_scales(scales):
    """A 'before' load_model hook: after the target is loaded (its process_weights_after_loading
    has reset every scale to 1.0) and before the draft is wired, give each target attention layer
    its calibrated scales in all three representations; KV-shared target layers read their
    source layer's cache, so they get the source's scales."""
    from vllm.model_executor.models.utils import extract_layer_index

    def hook(proposer, target_model):
        layers = {}
        for _, m in target_model.named_modules():
            if hasattr(m, "kv_sharing_target_layer_name") and getattr(m, "layer_name", None):
                layers[m.layer_name] = m
        for name, attn in layers.items():
            src = attn.kv_sharing_target_layer_name or name
            j = extract_layer_index(src)
            if j not in scales:
                continue
            ks, vs = scales[j]
            attn._k_scale.fill_(ks)
            attn._v_scale.fill_(vs)
            attn._k_scale_float, attn._v_scale_float = ks, vs
            if hasattr(attn, "_k_scale_cpu"):
                attn._k_scale_cpu.fill_(ks)
                attn._v_scale_cpu.fill_(vs)

    return hook


def metrics(llm) -> dict:
    out = {}
    try:
        for m in llm.get_metrics():
            if "spec_decode" in m.name:
                out[m.name] = getattr(m, "value", None) if not hasattr(m, "values") else m.values
    except Exception as exc:  # noqa: BLE001
        out["error"] = str(exc)
    return out


def summarize_wiring(w: dict) -> dict:
    return {
        "proposer_class": w["proposer_class"],
        "embed_tokens_shared": w["embed_tokens_shared"],
        "draft_lm_head_is_target_lm_head": w["draft_lm_head_is_target_lm_head"],
        "layers": [{
            "draft": lay["draft_index"], "target": lay["target_index"],
            "target_name": lay["kv_sharing_target_layer_name"],
            "impl_name": lay["impl_kv_sharing_target_layer_name"],
            "kv_cache_is_target": lay["kv_cache_is_target"],
            "k_scale": lay["scales"]["_k_scale"]["value"], "k_scale_float": lay["scales"]["_k_scale_float"]["value"],
            "v_scale_float": lay["scales"]["_v_scale_float"]["value"],
            "k_scale_kind": lay["scales"]["_k_scale"]["kind"],
            "target_k_scale_float": (lay["target_scales"] or {}).get("_k_scale_float", {}).get("value"),
            "target_v_scale_float": (lay["target_scales"] or {}).get("_v_scale_float", {}).get("value"),
        } for lay in w["layers"]],
    }


def run_engine(label, target_dir, draft_dir, prompts, *, spec: bool, recipe: str | None, kv_dtype: str, scales=None):
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from surgery.vllm import engine, hooks, plugin, state, wiring

    if recipe:
        os.environ["SURGERY_RECIPE"] = recipe
    else:
        os.environ.pop("SURGERY_RECIPE", None)
    plugin.register()
    scale_hook = set_target_scales(scales) if scales else None
    if scale_hook:
        hooks.install_load_model_hook(scale_hook, when="before")
    kwargs = dict(model=str(target_dir), skip_tokenizer_init=True, enforce_eager=True, dtype="bfloat16",
                  max_model_len=512, max_num_seqs=8, gpu_memory_utilization=0.25, seed=0,
                  enable_prefix_caching=False, disable_log_stats=False, kv_cache_dtype=kv_dtype)
    if spec:
        kwargs["speculative_config"] = {"method": "mtp", "model": str(draft_dir), "num_speculative_tokens": K}
    t = time.perf_counter()
    llm = LLM(**kwargs)
    start_s = time.perf_counter() - t
    res = {"label": label, "engine_start_s": round(start_s, 2), "kv_cache_dtype": kv_dtype, "recipe": recipe,
           "spec": spec}
    try:
        params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True, detokenize=False)
        t = time.perf_counter()
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
        res["generate_s"] = round(time.perf_counter() - t, 3)
        res["tokens"] = [list(o.outputs[0].token_ids) for o in outs]
        res["metrics"] = metrics(llm)
        if spec:
            runner = wiring.find_live_runner(llm)
            proposer = getattr(runner, "drafter", None) or getattr(runner, "speculator", None)
            res["runner"] = type(runner).__module__ + "." + type(runner).__name__
            res["wiring"] = summarize_wiring(wiring.describe_wiring(proposer, runner.model))
            st = state.get(proposer) or state.PluginState()  # nothing recorded: every field None
            v = st.verification
            res["plugin_verify_ok"] = v.ok if v is not None else None
            res["plugin_kv_checks_ok"] = (all(c.ok for c in st.kv_checks)
                                          if st.kv_checks else None)
    finally:
        if scale_hook:
            hooks.remove_hook(scale_hook)
        engine.shutdown(llm)
    return res


def acceptance(res: dict) -> dict:
    m = res.get("metrics", {})

    def total(key):
        for name, v in m.items():
            if name.endswith(key):
                return sum(v) if isinstance(v, list) else v
        return None

    drafted, accepted = total("num_draft_tokens"), total("num_accepted_tokens")
    drafts = total("num_drafts")
    per_pos = None
    for name, v in m.items():
        if name.endswith("num_accepted_tokens_per_pos") and isinstance(v, list):
            per_pos = v
    return {"drafted": drafted, "accepted": accepted, "drafts": drafts,
            "acceptance_rate": (accepted / drafted) if drafted else None,
            # position i: share of draft rounds whose i-th proposed token was accepted
            "acceptance_per_position": [round(a / drafts, 4) for a in per_pos] if per_pos and drafts else None}


def identity(tokens: list[list[int]], reference: list[list[int]]) -> dict:
    """Per-prompt token identity against a reference run, and where each differing prompt first diverges."""
    same = [a == b for a, b in zip(tokens, reference)]
    first = [next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
             for a, b, ok in zip(tokens, reference, same) if not ok]
    return {"identical_prompts": sum(same), "prompts": len(same), "first_divergence_at": first}


def main():
    from pathlib import Path

    from surgery.tinymodels.bytevocab import encode
    from surgery.pairs import DEFAULT_PROMPTS

    import torch
    import transformers
    import vllm

    results = {"date": time.strftime("%Y-%m-%d %H:%M"), "vllm": vllm.__version__, "torch": torch.__version__,
               "transformers": transformers.__version__,
               "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    log("versions", {k: results[k] for k in ("vllm", "torch", "transformers", "gpu")})
    target_dir, draft_dir = tiny_pair_dirs(Path("/tmp/tiny_vllm"))
    prompts = [encode(p) for p in DEFAULT_PROMPTS]
    recipe = str(Path(__file__).resolve().parents[2] / "recipes" / "gemma4-mtp.yaml")
    scales = guarded(results, "calibration", calibrate, target_dir)
    results["calibration"] = {str(k): v for k, v in scales.items()} if isinstance(scales, dict) else scales
    runs = [
        ("greedy_bf16", dict(spec=False, recipe=None, kv_dtype="auto")),
        ("spec_bf16_plain", dict(spec=True, recipe=None, kv_dtype="auto")),
        ("spec_bf16_recipe", dict(spec=True, recipe=recipe, kv_dtype="auto")),
    ]
    if isinstance(scales, dict) and "error" not in scales:
        runs += [
            ("spec_fp8_recipe", dict(spec=True, recipe=recipe, kv_dtype="fp8", scales=scales)),
            ("spec_fp8_plain", dict(spec=True, recipe=None, kv_dtype="fp8", scales=scales)),
            ("greedy_fp8", dict(spec=False, recipe=None, kv_dtype="fp8", scales=scales)),
        ]
    for label, kw in runs:
        log("engine", label)
        r = guarded(results, label, run_engine, label, target_dir, draft_dir, prompts, **kw)
        if isinstance(r, dict) and "tokens" in r:
            r["acceptance"] = acceptance(r)
            log(label, "start", r["engine_start_s"], "s; acceptance", r["acceptance"])
        save("vllm_gpu", results)
    ref = results.get("greedy_bf16", {}).get("tokens")
    ref8 = results.get("greedy_fp8", {}).get("tokens")
    for label in ("spec_bf16_plain", "spec_bf16_recipe"):
        if ref and "tokens" in results.get(label, {}):
            results[label]["identical_to_greedy"] = results[label]["tokens"] == ref
            results[label]["identity_vs_greedy_bf16"] = identity(results[label]["tokens"], ref)
    for label in ("spec_fp8_recipe", "spec_fp8_plain", "greedy_fp8"):
        if "tokens" not in results.get(label, {}):
            continue
        if ref8 and label != "greedy_fp8":
            results[label]["identical_to_greedy_fp8"] = results[label]["tokens"] == ref8
            results[label]["identity_vs_greedy_fp8"] = identity(results[label]["tokens"], ref8)
        if ref:
            results[label]["identity_vs_greedy_bf16"] = identity(results[label]["tokens"], ref)
    if "tokens" in results.get("spec_fp8_recipe", {}) and "tokens" in results.get("spec_fp8_plain", {}):
        results["fp8_recipe_vs_plain"] = identity(results["spec_fp8_recipe"]["tokens"], results["spec_fp8_plain"]["tokens"])
    save("vllm_gpu", results)


if __name__ == "__main__":
    main()
