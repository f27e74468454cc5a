"""Audit mode on the H200 (vLLM 0.25, v2 runner): the field's FP8 failure (vllm-project/vllm#49262)
caught on stock vLLM, then gone once the recipe is applied.

    bash /tmp/vbundle/install.sh && . /tmp/vbundle/env.sh && PYTHONPATH=$PWD:$PYTHONPATH python3 bench/gpu/vllm_audit_gpu.py

Distilled tiny Gemma 4 pair, calibrated target K/V scales (amax / 448, HF pass), MTP k=3, greedy.
Engines, one after another in one process:
  greedy_fp8        target alone, FP8 cache: the reference output for the FP8 runs
  audit_fp8_stock   SURGERY_MODE=audit + SURGERY_RECIPE=gemma4-mtp: the plugin changes nothing and
                    compares vLLM's stock wiring with the plan (findings expected: scales, impl copy)
  fixed_fp8_recipe  the recipe applied (normal mode), then the same audit run on the live objects by
                    this script (findings expected: none)
  audit_bf16_stock  audit on a bf16 cache: the scale difference is reported but cannot matter
Per engine: findings (code, severity, message), acceptance overall and per draft position, per-prompt
identity with the FP8 target-only greedy output. Results: $OUT/vllm_audit_gpu.json.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import guarded, log, save, tiny_pair_dirs  # noqa: E402
from vllm_gpu import K, MAX_TOKENS, acceptance, calibrate, identity, metrics, set_target_scales  # noqa: E402

RECIPE = str(Path(__file__).resolve().parents[2] / "recipes" / "gemma4-mtp.yaml")


def _findings(audit) -> list[dict]:
    return [{"code": f["code"], "severity": f["severity"], "stage": f.get("stage"), "message": f["message"][:300]}
            for f in audit.to_dict()["findings"]]


def run(label, target_dir, draft_dir, prompts, *, spec: bool, mode: str | None, recipe: str | None,
        kv_dtype: str, scales) -> dict:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from surgery.vllm import audit as audit_mod
    from surgery.vllm import engine, hooks, plugin, state, wiring

    for key, value in (("SURGERY_RECIPE", recipe), ("SURGERY_MODE", mode)):
        if value:
            os.environ[key] = value
        else:
            os.environ.pop(key, None)
    plugin.register()
    scale_hook = set_target_scales(scales)
    hooks.install_load_model_hook(scale_hook, when="before")
    kwargs = dict(model=str(target_dir), skip_tokenizer_init=True, enforce_eager=True, dtype="bfloat16",
                  max_model_len=512, max_num_seqs=8, gpu_memory_utilization=0.25, seed=0,
                  enable_prefix_caching=False, disable_log_stats=False, kv_cache_dtype=kv_dtype)
    if spec:
        kwargs["speculative_config"] = {"method": "mtp", "model": str(draft_dir), "num_speculative_tokens": K}
    t = time.perf_counter()
    llm = LLM(**kwargs)
    res = {"label": label, "engine_start_s": round(time.perf_counter() - t, 2), "kv_cache_dtype": kv_dtype,
           "mode": mode or "apply", "recipe": recipe, "spec": spec}
    try:
        params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True, detokenize=False)
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
        res["tokens"] = [list(o.outputs[0].token_ids) for o in outs]
        res["metrics"] = metrics(llm)
        res["acceptance"] = acceptance(res) if spec else None
        if spec:
            runner = wiring.find_live_runner(llm)
            proposer = getattr(runner, "drafter", None) or getattr(runner, "speculator", None)
            res["runner"] = type(runner).__module__ + "." + type(runner).__name__
            st = state.get(proposer) or state.PluginState()  # nothing recorded: every field None
            audit = st.audit
            if audit is None and st.plan is not None:
                # the recipe was applied: audit the live objects afterwards, as audit mode would have
                audit = audit_mod.Audit(st.plan)
                audit_mod.audit_after_load(audit, proposer, wiring.observed(proposer, runner.model))
                audit_mod.audit_after_kv_cache(audit, proposer, runner.model)
                res["audited_after_apply"] = True
            if audit is not None:
                res["findings"] = _findings(audit)
                res["audit_ok"] = not audit.errors
                res["audit_checked"] = dict(audit.checked)
                res["audit_not_applicable"] = list(audit.not_applicable)
            v = st.verification
            res["plugin_verify_ok"] = v.ok if v is not None else None
    finally:
        hooks.remove_hook(scale_hook)
        engine.shutdown(llm)
    return res


def main():
    import torch
    import transformers
    import vllm

    from surgery.tinymodels.bytevocab import encode
    from surgery.pairs import DEFAULT_PROMPTS

    results = {"date": time.strftime("%Y-%m-%d %H:%M"), "vllm": vllm.__version__, "torch": torch.__version__,
               "transformers": transformers.__version__, "gpu": torch.cuda.get_device_name(0)}
    log("versions", results)
    target_dir, draft_dir = tiny_pair_dirs(Path("/tmp/tiny_vllm_audit"))
    prompts = [encode(p) for p in DEFAULT_PROMPTS]
    scales = guarded(results, "calibration", calibrate, target_dir)
    if not isinstance(scales, dict) or "error" in scales:
        save("vllm_audit_gpu", results)
        return
    results["calibration"] = {str(k): v for k, v in scales.items()}
    runs = [
        ("greedy_fp8", dict(spec=False, mode=None, recipe=None, kv_dtype="fp8")),
        ("audit_fp8_stock", dict(spec=True, mode="audit", recipe=RECIPE, kv_dtype="fp8")),
        ("fixed_fp8_recipe", dict(spec=True, mode=None, recipe=RECIPE, kv_dtype="fp8")),
        ("audit_bf16_stock", dict(spec=True, mode="audit", recipe=RECIPE, kv_dtype="auto")),
    ]
    only = set(sys.argv[1:])  # e.g. `python3 vllm_audit_gpu.py greedy_fp8 fixed_fp8_recipe`: a subset, own file
    name = "vllm_audit_gpu" + ("_" + "_".join(sorted(only)) if only else "")
    for label, kw in runs:
        if only and label not in only:
            continue
        log("engine", label)
        r = guarded(results, label, run, label, target_dir, draft_dir, prompts, scales=scales, **kw)
        if isinstance(r, dict) and "tokens" in r:
            log(label, "acceptance", r.get("acceptance"), "findings", [f["code"] for f in r.get("findings", [])])
        save(name, results)
    ref8 = results.get("greedy_fp8", {}).get("tokens")
    for label in ("audit_fp8_stock", "fixed_fp8_recipe"):
        if ref8 and "tokens" in results.get(label, {}):
            results[label]["identity_vs_greedy_fp8"] = identity(results[label]["tokens"], ref8)
    save(name, results)


if __name__ == "__main__":
    main()
