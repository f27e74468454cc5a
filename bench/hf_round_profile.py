"""Where a round of our HF speculative loop goes, on CPU, with the built-in tiny Gemma 4 pair (issues 47, 69).

    python bench/hf_round_profile.py [--threads 1 2] [--prompts 8] [--out bench/results/hf_round_profile.json]
    python bench/hf_round_profile.py --threads 1 --verify-modes dynamic static --repeats 7 \
        --out bench/results/hf_verify_modes_cpu.json     # issue 69: the verify forward's two CPU paths

``--verify-modes``: one row per thread count and verify path of the loop (surgery/hf/verifygraph.py:
"dynamic", transformers' DynamicCache cropped on rejection; "static", the rewindable static cache run
eagerly), greedy interleaved with each; what ``verify_mode="auto"`` runs on the CPU is read off them.

For each torch intra-op thread count: plain greedy and our speculative loop (k=3) on the held-out
prompts, wall time side by side in the same process (ratios, not absolute times, are the result), and
a per-round breakdown of the speculative loop from torch.profiler-free wall clocks around its parts
(draft steps, target verify, host sync). Times live here, never in the test suite.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def load():
    import torch  # noqa: F401

    from surgery import apply as apply_plan
    from surgery.facts import read_facts
    from surgery.hf.loader import load_pair
    from surgery.tinymodels.tinypair import ensure_tiny_pair
    from surgery.tinymodels.bytevocab import encode
    from surgery.pairs import held_out_prompts
    from surgery.recipe import load_recipe
    from surgery.resolver import resolve
    from surgery.plan import Runtime

    target_dir, draft_dir = ensure_tiny_pair()
    recipe = load_recipe(str(ROOT / "recipes" / "gemma4-mtp.yaml"))
    plan = resolve(recipe, read_facts(draft_dir), read_facts(target_dir), Runtime(engine="hf"))
    target, draft = load_pair(target_dir, draft_dir)
    apply_plan(plan, draft, target)
    return target, draft, [encode(p) for p in held_out_prompts()]


def run(target, draft, prompts, threads: int, new_tokens: int, k: int, repeats: int, verify_mode=None) -> dict:
    import torch

    from surgery.hf.specdec import greedy_generate, speculative_generate

    torch.set_num_threads(threads)
    greedy_generate(target, prompts[0], 8)  # warm-up
    speculative_generate(target, draft, prompts[0], 8, k, verify_mode)
    g_times, s_times, stats = [], [], None
    for _ in range(repeats):  # interleaved: greedy, then speculative, per repeat
        t = time.perf_counter()
        refs = [greedy_generate(target, p, new_tokens) for p in prompts]
        g_times.append(time.perf_counter() - t)
        t = time.perf_counter()
        res = [speculative_generate(target, draft, p, new_tokens, k, verify_mode) for p in prompts]
        s_times.append(time.perf_counter() - t)
        assert [r.tokens for r in res] == refs, "speculative output differs from greedy"
        stats = {"target_forwards": sum(r.target_forwards for r in res), "draft_forwards": sum(r.draft_forwards for r in res),
                 "greedy_forwards": sum(len(r) for r in refs),
                 "acceptance": sum(r.accepted for r in res) / max(1, sum(r.drafted for r in res))}
    g, s = statistics.median(g_times), statistics.median(s_times)
    return {"threads": threads, "verify_mode": verify_mode, "greedy_s": round(g, 3), "speculative_s": round(s, 3), "speedup": round(g / s, 3),
            "repeats": repeats, **stats}


PARTS = {  # what a round of surgery/hf/generate.py `_decode` does, by the function that does it
    "draft steps (fastdraft.step)": ("fastdraft.py", "step"),
    "draft round setup (masks, rotary)": ("fastdraft.py", "prepare_round"),
    "target verify forward": ("modeling_gemma4.py", "forward"),
    "cache crop on rejection": ("cache_utils.py", "crop"),
    "host sync (tolist)": ("~", "<method 'tolist' of 'torch._C.TensorBase' objects>"),
}


def profile_rounds(target, draft, prompts, threads: int, new_tokens: int, k: int) -> dict:
    """Where the speculative loop's time goes, per round, from cProfile's cumulative times of the
    functions that do each part (the target's outermost forward only: its `forward` entries are
    summed at the top-level model class). Attribution, not a stopwatch: profiling slows Python."""
    import cProfile
    import pstats

    import torch

    from surgery.hf.generate import speculative_decoding
    from surgery.hf.specdec import speculative_generate

    torch.set_num_threads(threads)
    speculative_generate(target, draft, prompts[0], 8, k)
    prof = cProfile.Profile()
    prof.enable()
    rounds = 0
    for p in prompts:
        speculative_generate(target, draft, p, new_tokens, k)
        rounds += speculative_decoding.last_stats.rounds
    prof.disable()
    stats = pstats.Stats(prof).stats
    total = sum(v[2] for v in stats.values())  # tottime over every function = the profiled wall
    out = {}
    outer = type(target).__name__
    import inspect

    code = inspect.unwrap(type(target).forward).__code__  # the top-level model's own forward (under its decorators)
    for label, (file, fn) in PARTS.items():
        cum = 0.0
        for (f, line, name), (cc, nc, tt, ct, callers) in stats.items():
            if name != fn or not f.endswith(file):
                continue
            if label.startswith("target") and (f, line) != (code.co_filename, code.co_firstlineno):
                continue
            cum += ct
        out[label] = {"seconds": round(cum, 4), "per_round_ms": round(1000 * cum / max(1, rounds), 3),
                      "share": round(cum / total, 3) if total else None}
    return {"threads": threads, "rounds": rounds, "profiled_total_s": round(total, 3), "parts": out,
            "note": f"target verify = {outer}.forward (the prefill of each prompt included); shares of the profiled "
                    f"total ({inspect.getsourcefile(type(target))})"}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=None)
    ap.add_argument("--profile", action="store_true", help="also attribute each round's time to its parts (cProfile)")
    ap.add_argument("--verify-modes", nargs="+", default=[None], help="verify paths to compare (dynamic static)")
    args = ap.parse_args()
    target, draft, prompts = load()
    rows = [run(target, draft, prompts, t, args.new_tokens, args.k, args.repeats, mode)
            for t in args.threads for mode in args.verify_modes]
    for r in rows:
        print(json.dumps(r))
    profile = [profile_rounds(target, draft, prompts, t, args.new_tokens, args.k) for t in args.threads] \
        if args.profile else None
    for p in profile or ():
        print(json.dumps(p))
    if args.out:
        import platform

        import torch
        import transformers

        meta = {"command": "python " + " ".join(sys.argv), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                "python": platform.python_version(), "torch": torch.__version__,
                "transformers": transformers.__version__, "cpu": platform.processor() or "cpu",
                "load_average": list(__import__("os").getloadavg())}
        Path(args.out).write_text(json.dumps({**meta, "rows": rows, "profile": profile}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
