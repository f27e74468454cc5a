"""HF transformers on the H200: our speculative loop at realistic width, and cost at scale.

    PYTHONPATH=$PWD python3 bench/gpu/hf_gpu.py          # image's torch / transformers (5.17)

Parts (each guarded; results in $OUT/hf_gpu.json):
  tiny_pair_bf16   the distilled tiny pair on CUDA in bf16: spec vs greedy, acceptance, tokens/s
  e2b_specdec      E2B-shaped target + assistant (random bf16 weights, real geometry): apply, verify,
                   spec vs greedy tokens/s in the same run, identical output, acceptance
  cost_e2b, cost_31b   resolve + apply + verify time against materialising the models on the GPU,
                   and GPU memory of the wired pair against the two models separately
Random weights give near-zero acceptance; the tiny distilled pair gives the real rate.
"""
from __future__ import annotations

import json
import statistics
import time

from common import ROOT, guarded, log, save, tiny_pair_dirs

CONFIGS = ROOT / "tests" / "data" / "configs"
GPU_CONFIGS = ROOT / "bench" / "gpu" / "configs"


def _sync():
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def build_random(target_cfg_path, draft_cfg_path, dtype, device="cuda", ordered=False):
    """Materialise both models directly on the GPU (meta init, then to_empty + normal init).
    ``ordered``: keep the assistant's centroid head (use_ordered_embeddings) as the config says."""
    import torch
    from transformers import AutoConfig, Gemma4AssistantForCausalLM, Gemma4ForCausalLM

    def strip(path):
        raw = json.loads(path.read_text())
        raw = {k: v for k, v in raw.items() if not k.startswith("_")}
        return raw

    t_raw, d_raw = strip(target_cfg_path), strip(draft_cfg_path)
    if "text_config" in t_raw:  # the multimodal E2B config: its text stack is the target
        t_raw = {**t_raw["text_config"], "architectures": ["Gemma4ForCausalLM"]}
    t_raw["model_type"] = "gemma4_text"
    t_cfg = AutoConfig.for_model(**t_raw)
    d_cfg = AutoConfig.for_model(**d_raw)
    if not ordered:
        d_cfg.use_ordered_embeddings = False  # centroid head not needed for cost / loop measurements
    _sync()
    t0 = time.perf_counter()
    with torch.device("meta"):
        target = Gemma4ForCausalLM(t_cfg)
        draft = Gemma4AssistantForCausalLM(d_cfg)
    for m in (target, draft):
        m.to_empty(device=device)
        m.to(dtype)
        with torch.no_grad():
            for p in m.parameters():
                p.normal_(0.0, 0.02)
            for name, b in m.named_buffers():
                if b.is_floating_point():
                    b.fill_(1.0)
        m.eval()
    draft.tie_weights()
    _sync()
    return target, draft, time.perf_counter() - t0, t_cfg, d_cfg


def resolve_for(target_cfg_path, draft_cfg_path):
    from surgery import Runtime, facts_from_config, load_recipe, resolve

    def facts(path, side):
        raw = json.loads(path.read_text())
        return facts_from_config(raw, str(path))

    return resolve(load_recipe(ROOT / "recipes" / "gemma4-mtp.yaml"), facts(draft_cfg_path, "draft"),
                   facts(target_cfg_path, "target"), Runtime(engine="hf"))


def cost(target_cfg_path, draft_cfg_path, repeat=5):
    import torch

    from surgery.applier import apply_plan, rollback, verify_plan

    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    target, draft, build_s, _, _ = build_random(target_cfg_path, draft_cfg_path, torch.bfloat16)
    separate = torch.cuda.memory_allocated() - base
    rows = {"resolve_s": [], "apply_s": [], "verify_s": []}
    wired = None
    copy_bytes = 0
    for _ in range(repeat):
        t = time.perf_counter()
        plan = resolve_for(target_cfg_path, draft_cfg_path)
        rows["resolve_s"].append(time.perf_counter() - t)
        t = time.perf_counter()
        report = apply_plan(plan, draft, target)
        _sync()
        rows["apply_s"].append(time.perf_counter() - t)
        t = time.perf_counter()
        ok = verify_plan(plan, draft, target, report=report).ok
        rows["verify_s"].append(time.perf_counter() - t)
        assert ok
        wired = torch.cuda.memory_allocated() - base
        copy_bytes = sum(p.numel() * p.element_size() for p in target.get_input_embeddings().parameters())
        rollback(report)
    med = {k: statistics.median(v) for k, v in rows.items()}
    overhead = sum(med.values())
    params = sum(p.numel() for p in target.parameters()) + sum(p.numel() for p in draft.parameters())
    del target, draft
    torch.cuda.empty_cache()
    return {"materialise_s": round(build_s, 3), "median_s": {k: round(v, 5) for k, v in med.items()},
            "overhead_s": round(overhead, 5), "overhead_fraction_of_materialise": overhead / build_s,
            "params": params, "gpu_bytes_separate": separate, "gpu_bytes_wired": wired,
            "copying_applier_extra_bytes": copy_bytes}


def specdec_run(target, draft, prompts, max_new_tokens, k):
    from surgery.hf.specdec import greedy_generate, speculative_generate

    out = {"prompts": len(prompts), "max_new_tokens": max_new_tokens, "k": k}
    greedy_s = spec_s = 0.0
    identical = True
    drafted = accepted = tokens = 0
    # warm-up (kernels, allocator)
    greedy_generate(target, prompts[0], 4)
    speculative_generate(target, draft, prompts[0], 4, k)
    for p in prompts:
        _sync()
        t = time.perf_counter()
        ref = greedy_generate(target, p, max_new_tokens)
        _sync()
        greedy_s += time.perf_counter() - t
        t = time.perf_counter()
        res = speculative_generate(target, draft, p, max_new_tokens, k)
        _sync()
        spec_s += time.perf_counter() - t
        identical &= list(res.tokens) == list(ref)
        drafted += res.drafted
        accepted += res.accepted
        tokens += len(ref)
    out.update({"identical": identical, "drafted": drafted, "accepted": accepted,
                "acceptance_rate": accepted / drafted if drafted else None,
                "greedy_tokens_per_s": tokens / greedy_s, "spec_tokens_per_s": tokens / spec_s,
                "speedup": greedy_s / spec_s})
    return out


def tiny_pair_bf16():
    import torch
    from pathlib import Path

    from surgery import Runtime, load_recipe, read_facts, resolve
    from surgery.applier import apply_plan, verify_plan
    from surgery.tinymodels.bytevocab import encode
    from surgery.hf.loader import load_pair
    from surgery.pairs import DEFAULT_PROMPTS

    t_dir, d_dir = tiny_pair_dirs(Path("/tmp/tiny_hf"), strip_per_layer_config=False)
    target, draft = load_pair(t_dir, d_dir, device="cuda", dtype=torch.bfloat16)
    plan = resolve(load_recipe("gemma4-mtp"), read_facts(d_dir), read_facts(t_dir), Runtime(engine="hf"))
    report = apply_plan(plan, draft, target)
    verified = verify_plan(plan, draft, target, report=report).ok
    prompts = [encode(p) for p in DEFAULT_PROMPTS]
    res = {"verified": verified}
    for k in (1, 3, 5):
        res[f"k{k}"] = specdec_run(target, draft, prompts, 64, k)
    return res


def e2b_specdec(dtype_name="bfloat16"):
    import torch

    from surgery.applier import apply_plan, verify_plan

    t_path, d_path = CONFIGS / "gemma-4-E2B-it.json", CONFIGS / "gemma-4-E2B-it-assistant.json"
    target, draft, build_s, t_cfg, _ = build_random(t_path, d_path, getattr(torch, dtype_name))
    plan = resolve_for(t_path, d_path)
    report = apply_plan(plan, draft, target)
    verified = verify_plan(plan, draft, target, report=report).ok
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, t_cfg.vocab_size, (64,), generator=g).tolist() for _ in range(4)]
    res = {"materialise_s": build_s, "verified": verified}
    res["k3"] = specdec_run(target, draft, prompts, 64, 3)
    del target, draft
    torch.cuda.empty_cache()
    return res


def main():
    import torch
    import transformers

    import sys

    results = {"date": time.strftime("%Y-%m-%d %H:%M"), "torch": torch.__version__,
               "transformers": transformers.__version__, "device": torch.cuda.get_device_name(0)}
    if sys.argv[1:] == ["e2b_fp32"]:  # the E2B-shaped loop in fp32: output identity without bf16 near-ties
        guarded(results, "e2b_specdec_fp32", e2b_specdec, "float32")
        save("hf_gpu_e2b_fp32", results)
        return
    for key, fn, args in (("tiny_pair_bf16", tiny_pair_bf16, ()), ("e2b_specdec", e2b_specdec, ()),
                          ("cost_e2b", cost, (CONFIGS / "gemma-4-E2B-it.json", CONFIGS / "gemma-4-E2B-it-assistant.json")),
                          ("cost_31b", cost, (GPU_CONFIGS / "gemma4-31B-shaped.json",
                                              GPU_CONFIGS / "gemma4-31B-shaped-assistant.json"))):
        log("part", key)
        guarded(results, key, fn, *args)
        save("hf_gpu", results)


if __name__ == "__main__":
    main()
