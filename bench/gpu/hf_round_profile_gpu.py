"""Where a round of our HF speculative loop goes on the GPU, per part, per draft and verify mode (issues 56, 69).

    cd bench/gpu && PYTHONPATH=$PWD/../.. python3 hf_round_profile_gpu.py            # H100/H200, ~2-3 min
    cd bench/gpu && PYTHONPATH=$PWD/../.. python3 hf_round_profile_gpu.py --cpu      # dry run here, fp32

Results: $OUT/hf_round_profile_gpu.json (``--cpu``: $OUT/hf_round_profile_cpu.json) and, per mode,
$OUT/hf_round_profile_<draft>-<verify>_ops.txt (torch.profiler's table of one prompt: kernels, launches).

The distilled tiny pair wired by ``surgery.apply`` (the pair of the README's headline), the first 6
``DEFAULT_PROMPTS`` x 64 tokens, k=3, bf16 on CUDA. For each mode of the loop, ``draft_mode+verify_mode``
(draft: "hoisted" = the issue 47 per-step path, "graph" = one CUDA graph per round; verify: "dynamic" =
the eager forward on a DynamicCache of issue 56, "graph" = one CUDA graph per k over the rewindable
static cache of issue 69; CPU: "hoisted+dynamic" and "static+static"), after a warm-up of every prompt at
full length:

* ``timed``: greedy ``generate`` and ours interleaved, median of --repeats, tokens/s, identity;
* ``parts``: one instrumented pass (bench/gpu/hf_common.py), per round: the draft round
  (``_Drafter.round``), the target's verify step (a graph's replay included), the rewind on rejection
  (a DynamicCache crop; nothing on the static cache), every host-device synchronisation (``.item()``,
  ``.tolist()``, ``.cpu()``, ``int()``/``bool()``/``float()`` of a tensor: counted per round, and the
  host time spent blocked in them), each part both as host time (Python + launches; what bounds a
  launch-bound loop) and as device time (CUDA events; on the CPU the same as host). ``python_other``:
  the round's host time outside those parts (the loop's own bookkeeping);
* ``launches``: CUDA kernel launches per round and the top operators (torch.profiler, one prompt);
* ``model``: the round-cost model, predicted x greedy = tokens per round x greedy step / (draft
  round + verify), from these measured costs, and the measured figure's distance to it.

Times live here and in bench/results/, never in the test suite.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

from common import OUT, guarded, log, save
from hf_common import PARTS, Clock, instrumented, sync as _sync, versions, wired_tiny

def profile_mode(target, draft, ids, max_new, k, mode, repeats, cuda) -> dict:
    """``mode``: "<draft_mode>" or "<draft_mode>+<verify_mode>" (verify "auto" when not given)."""
    import torch

    import surgery.hf

    spec = surgery.hf.speculative_decoding
    draft_mode, _, verify_mode = mode.partition("+")
    verify_mode = verify_mode or None

    def greedy(x):
        return target.generate(x, max_new_tokens=max_new, do_sample=False)

    def ours(x):
        return target.generate(x, assistant_model=draft, custom_generate=spec, max_new_tokens=max_new,
                               do_sample=False, num_assistant_tokens=k, draft_mode=draft_mode,
                               verify_mode=verify_mode)

    for x in ids:  # warm-up: every prompt at full length (every shape and the graph's bucket)
        greedy(x)
        ours(x)
    times = {"greedy": [], "ours": []}
    refs = outs = None
    for _ in range(repeats):
        for name, fn in (("greedy", greedy), ("ours", ours)):
            _sync()
            t = time.perf_counter()
            res = [fn(x) for x in ids]
            _sync()
            times[name].append(time.perf_counter() - t)
            if name == "greedy":
                refs = res
            else:
                outs = res
    new_tokens = sum(o.shape[1] - x.shape[1] for o, x in zip(refs, ids))

    # one instrumented pass over every prompt
    per_prompt_parts, rounds, drafted, accepted, syncs = [], 0, 0, 0, {}
    clock = Clock(cuda)
    wall = 0.0
    for x in ids:
        with instrumented(clock, syncs):
            _sync()
            t = time.perf_counter()
            ours(x)
            _sync()
            wall += time.perf_counter() - t
        st = spec.last_stats
        rounds, drafted, accepted = rounds + st.rounds, drafted + st.drafted, accepted + st.accepted
    dev = clock.device()
    host = clock.host
    per_round = lambda v: round(1000 * v / max(1, rounds), 4)  # noqa: E731
    parts = {name: {"host_ms_per_round": per_round(host.get(name, 0.0)), "device_ms_per_round": per_round(dev.get(name, 0.0)),
                    "calls": clock.calls.get(name, 0)}
             for name in PARTS}
    accounted = sum(host.get(n, 0.0) for n in PARTS)
    parts["python_other"] = {"host_ms_per_round": per_round(wall - accounted)}
    parts["round_wall_ms"] = per_round(wall)

    # torch.profiler on one prompt: launches per round and the top operators
    launches = None
    try:
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=acts) as prof:
            ours(ids[0])
            _sync()
        r = spec.last_stats.rounds
        avg = prof.key_averages()
        n_launch = sum(e.count for e in avg if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC",
                                                          "cudaGraphLaunch"))
        n_graph = sum(e.count for e in avg if e.key == "cudaGraphLaunch")
        table = None
        for key in (("self_device_time_total", "self_cuda_time_total") if cuda else ("self_cpu_time_total",)):
            try:
                table = avg.table(sort_by=key, row_limit=40)
                break
            except Exception:  # noqa: BLE001 - the key's name moved between torch releases
                continue
        table = table or avg.table(row_limit=40)
        ops = f"hf_round_profile_{mode.replace('+', '-')}_ops.txt"  # $OUT names: letters, digits, . _ -
        (OUT / ops).write_text(table + "\n")
        launches = {"rounds": r, "kernel_launches": n_launch, "graph_launches": n_graph,
                    "launches_per_round": round(n_launch / max(1, r), 1), "ops_table": ops}
    except Exception as exc:  # noqa: BLE001 - the profiler is optional: the event timings stand alone
        launches = {"error": f"{type(exc).__name__}: {exc}"}

    g, o = statistics.median(times["greedy"]), statistics.median(times["ours"])
    step_s = g / new_tokens
    tokens_per_round = new_tokens / max(1, rounds)  # includes the prefill's first token: a slight overcount
    draft_s = host.get("draft_round", 0.0) / max(1, rounds)
    verify_s = host.get("verify_forward", 0.0) / max(1, rounds)
    if cuda:  # a round cannot be faster than its device time nor its launch time: take the larger per part
        draft_s = max(draft_s, dev.get("draft_round", 0.0) / max(1, rounds))
        verify_s = max(verify_s, dev.get("verify_forward", 0.0) / max(1, rounds))
    predicted = tokens_per_round * step_s / (draft_s + verify_s)
    measured = g / o
    return {
        "mode": mode, "draft_path": spec.last_stats.draft_path, "verify_path": spec.last_stats.verify_path,
        "repeats": repeats, "new_tokens": new_tokens,
        "timed": {"greedy_s": [round(t, 4) for t in times["greedy"]], "ours_s": [round(t, 4) for t in times["ours"]],
                  "greedy_tokens_per_s": new_tokens / g, "ours_tokens_per_s": new_tokens / o, "x_greedy": measured,
                  "first_vs_median": {"greedy": times["greedy"][0] / g, "ours": times["ours"][0] / o},
                  "identical_to_greedy": all(torch.equal(a, b) for a, b in zip(outs, refs))},
        "rounds": rounds, "acceptance_rate": accepted / max(1, drafted), "tokens_per_round": tokens_per_round,
        "greedy_step_ms": 1000 * step_s,
        "parts": parts,
        "host_syncs_per_round": {k: round(v / max(1, rounds), 3) for k, v in sorted(syncs.items())},
        "host_syncs_total": sum(syncs.values()),
        "launches": launches,
        "model": {"draft_round_ms": 1000 * draft_s, "verify_ms": 1000 * verify_s,
                  "round_cost_in_greedy_steps": (draft_s + verify_s) / step_s,
                  "predicted_x_greedy": predicted, "measured_x_greedy": measured,
                  "measured_over_predicted": measured / predicted,
                  "meaning": "predicted = tokens per round x greedy step / (draft round + verify forward), each "
                             "the larger of host and device time per round; the rest of the measured round "
                             "(python_other, host_sync_wait, rewind) is the distance"},
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpu", action="store_true", help="dry run on this machine (fp32, 3 prompts x 24 tokens)")
    ap.add_argument("--modes", nargs="+", default=None,
                    help="draft_mode[+verify_mode] per part (default: graph+dynamic graph+graph, the draft round a "
                    "graph with the verify forward eager on a DynamicCache (issue 56) and in a graph too (issue 69); "
                    "--cpu: hoisted+dynamic static+static)")
    ap.add_argument("--repeats", type=int, default=None, help="interleaved timed repeats (default 3)")
    ap.add_argument("--k", type=int, default=3)
    args = ap.parse_args()
    import torch

    from surgery.tinymodels.bytevocab import encode
    from surgery.pairs import DEFAULT_PROMPTS

    cuda = torch.cuda.is_available() and not args.cpu
    device = "cuda" if cuda else "cpu"
    if not cuda:
        torch.set_num_threads(1)
    dtype = torch.bfloat16 if cuda else torch.float32
    n_prompts, max_new = (6, 64) if cuda else (3, 24)
    modes = args.modes or (["graph+dynamic", "graph+graph"] if cuda else ["hoisted+dynamic", "static+static"])
    repeats = args.repeats or 3  # the headline (hf_generate_gpu.py --headline) is the timed figure
    results = versions(device)
    results.update({"pair": "distilled tiny pair (surgery/data/tiny), wired by surgery.apply", "k": args.k,
                    "prompts": n_prompts, "max_new_tokens": max_new, "dtype": str(dtype)})
    name = "hf_round_profile_gpu" if cuda else "hf_round_profile_cpu"
    target, draft = wired_tiny(device, dtype)
    ids = [torch.tensor([encode(p)], device=device) for p in DEFAULT_PROMPTS[:n_prompts]]
    for mode in modes:
        log("mode", mode)
        guarded(results, mode, profile_mode, target, draft, ids, max_new, args.k, mode, repeats, cuda)
        save(name, results)
    print(json.dumps({m: {k: results[m].get(k) for k in ("draft_path", "verify_path", "timed", "parts",
                                                          "host_syncs_per_round",
                                                          "launches", "model")} if isinstance(results.get(m), dict)
                      else results.get(m) for m in modes}, indent=1, default=str)[:8000])


if __name__ == "__main__":
    main()
