"""HF generate side by side: plain greedy, compiled static greedy, transformers' assisted generation, ours
(issues 16, 37, 56, 69).

    cd bench/gpu && PYTHONPATH=$PWD/../.. python3 hf_generate_gpu.py            # H200, ~3-4 min
    cd bench/gpu && PYTHONPATH=$PWD/../.. python3 hf_generate_gpu.py --cpu      # this machine, ~1-2 min, 5 repeats
    cd bench/gpu && PYTHONPATH=$PWD/../.. python3 hf_generate_gpu.py --headline --prompts default   # issues 37, 69:
        # k=3, 9 interleaved repeats after a full warm-up, median + range, compiled static greedy always
        # beside default greedy and transformers' assisted generation, the round-cost model
        # (--cpu --headline: the dry run here; bash bench/gpu/hfspeed56.sh: the GPU call)

Results: $OUT/hf_generate.json (``--cpu``: $OUT/hf_generate_cpu.json); versions are in the file.

Parts (each guarded: a failure is recorded, the rest still runs):
  side_by_side    the distilled tiny Gemma 4 pair wired by ``surgery.apply`` (gemma4-mtp): median
                  tokens/s over >= 3 interleaved repeats (warm-up excluded) of
                  - greedy:        target.generate(ids, do_sample=False)
                  - greedy_static_compiled (--headline): the same with cache_implementation="static"
                                   (transformers compiles the decoding step on CUDA)
                  - tf_assisted_k: target.generate(ids, assistant_model=draft)  (transformers' MTP path;
                                   crashes in transformers 5.19, recorded as an error)
                  - ours_k:        target.generate(ids, assistant_model=draft,
                                   custom_generate=surgery.hf.speculative_decoding)
                                   (--headline: also ours_dynamic_k3, the verify forward on a DynamicCache)
                  with output identity against greedy and ratios against greedy / the peers.
  tf_path_maps    transformers' own assisted generation on pairs wired with the default map, an
                  explicit non-default map and a deliberately wrong one: output identical to greedy
                  and target forwards counted (fewer forwards = more drafts accepted), so a map
                  silently replaced by the default would show as equal counts.
  round_cost      E2B width (``--cpu``: the tiny pair), random weights, our loop with an accept-all
                  oracle: cost of one round of k drafts relative to one greedy step, and the tokens/s
                  this implies at Gemma 4 MTP's published per-position acceptance 92/79/68/59 %
                  (a model with its inputs, not a measurement of acceptance).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

from common import ROOT, guarded, log, save
from hf_common import Clock, instrumented, sync as _sync, versions as _versions, wired_tiny as _wired_tiny

CONFIGS = ROOT / "tests" / "data" / "configs"
ACCEPTANCE = (0.92, 0.79, 0.68, 0.59)  # P(draft position i accepted), Gemma 4 MTP, published figures


def _methods(target, draft, ks, tf_ks, hoisted_ks=(), peer_static=False, static_greedy=False, dynamic_ks=()):
    """Name -> fn(ids, n). ``ours_k``: the loop as shipped (draft_mode and verify_mode auto: on the GPU
    the draft round one CUDA graph and the verify step one CUDA graph per k over the rewindable static
    cache); ``ours_dynamic_k``: the same loop with the verify forward eager on a DynamicCache (issue 56's
    path), ``ours_hoisted_k``: the issue 47 per-step draft path, each for before/after in the same run.
    ``static_greedy``: greedy with ``cache_implementation="static"``, which transformers compiles itself
    on CUDA (the fastest baseline a user gets from one flag). ``peer_static``: also transformers'
    assisted generation with it (5.17 refuses a static cache there: that refusal is the recorded finding)."""
    import surgery.hf

    spec = surgery.hf.speculative_decoding

    def greedy(ids, n):
        return target.generate(ids, max_new_tokens=n, do_sample=False)

    def tf(k, **extra):
        def run(ids, n):
            draft.generation_config.num_assistant_tokens = k
            draft.generation_config.num_assistant_tokens_schedule = "constant"
            return target.generate(ids, assistant_model=draft, max_new_tokens=n, do_sample=False, **extra)
        return run

    def ours(k, mode=None, verify=None):
        def run(ids, n):
            return target.generate(ids, assistant_model=draft, custom_generate=spec, max_new_tokens=n,
                                   do_sample=False, num_assistant_tokens=k, draft_mode=mode, verify_mode=verify)
        return run

    methods = {"greedy": greedy}
    if peer_static or static_greedy:
        methods["greedy_static_compiled"] = lambda ids, n: target.generate(
            ids, max_new_tokens=n, do_sample=False, cache_implementation="static")
    methods.update({f"tf_assisted_k{k}": tf(k) for k in tf_ks})
    if peer_static:
        methods.update({f"tf_assisted_static_k{k}": tf(k, cache_implementation="static") for k in tf_ks})
    methods.update({f"ours_k{k}": ours(k) for k in ks})
    methods.update({f"ours_dynamic_k{k}": ours(k, verify="dynamic") for k in dynamic_ks})
    methods.update({f"ours_hoisted_k{k}": ours(k, "hoisted") for k in hoisted_ks})
    return methods


def side_by_side(device, dtype, prompts, max_new, repeats, ks, tf_ks, hoisted_ks=(), warmup=1, peer_static=False,
                 cost_model=False, static_greedy=False, dynamic_ks=(), budget_s=None):
    """Every method interleaved on the same prompts. Warm-up: ``warmup`` full untimed repeats of
    every method (every prompt at full length: every shape, cuBLAS heuristic, allocator block, graph
    bucket and torch.compile recompilation the timed repeats use; the 2026-12-04/06 warm-up of one
    8-token call left the first timed repeat 2-3x slower). ``first_vs_median`` per method says whether it
    sufficed. ``budget_s``: no new timed repeat starts past this many seconds from the first (the run
    keeps what it measured, ``repeats_done`` says how many: a device call's time limit never loses the
    whole result)."""
    import torch

    import surgery.hf
    from surgery.tinymodels.bytevocab import encode

    target, draft = _wired_tiny(device, dtype)
    ids = [torch.tensor([encode(p)], device=device) for p in prompts]
    methods = _methods(target, draft, ks, tf_ks, hoisted_ks, peer_static, static_greedy, dynamic_ks)
    res = {"prompts": len(prompts), "max_new_tokens": max_new, "repeats": repeats, "warmup_repeats": warmup,
           "methods": {}}
    outputs, errors, warm_s = {}, {}, {}
    for name, fn in methods.items():  # errors recorded once (transformers' own path crashes on 5.19)
        try:
            fn(ids[0], 8)
        except Exception as exc:  # noqa: BLE001 - a finding
            errors[name] = f"{type(exc).__name__}: {str(exc)[:300]}"
    times = {name: [] for name in methods if name not in errors}
    started = None
    for rep in range(warmup + repeats):  # interleaved, so drifting clocks or neighbours hit every method alike
        if rep == warmup:
            started = time.perf_counter()
        elif started is not None and budget_s is not None and time.perf_counter() - started > budget_s:
            log(f"time budget {budget_s} s spent after {rep - warmup} timed repeats")
            break
        for name in times:
            out, acc = [], [0, 0, 0]
            _sync()
            t = time.perf_counter()
            for x in ids:
                out.append(methods[name](x, max_new))
                if name.startswith("ours"):
                    st = surgery.hf.speculative_decoding.last_stats
                    acc = [acc[0] + st.drafted, acc[1] + st.accepted, acc[2] + st.rounds]
            _sync()
            if rep < warmup:
                warm_s.setdefault(name, []).append(round(time.perf_counter() - t, 4))
                continue
            times[name].append(time.perf_counter() - t)
            outputs[name] = out
            if name.startswith("ours"):
                row = res["methods"].setdefault(name, {})
                row["acceptance_rate"] = acc[1] / acc[0] if acc[0] else None
                row["rounds"] = acc[2]
                row["draft_path"] = surgery.hf.speculative_decoding.last_stats.draft_path
                row["verify_path"] = surgery.hf.speculative_decoding.last_stats.verify_path
    res["repeats_done"] = len(times["greedy"])
    new_tokens = sum(o.shape[1] - x.shape[1] for o, x in zip(outputs["greedy"], ids))
    for name, ts in times.items():
        med = statistics.median(ts)
        row = res["methods"].setdefault(name, {})
        row.update({"seconds": [round(t, 4) for t in ts], "warmup_seconds": warm_s.get(name), "median_s": round(med, 4),
                    "tokens_per_s": new_tokens / med,
                    # the range over the repeats (slowest, fastest), with the median: what the README quotes
                    "tokens_per_s_range": [new_tokens / max(ts), new_tokens / min(ts)],
                    "first_vs_median": ts[0] / med,
                    # > 1: the first timed repeat was slower than every later one (the warm-up missed something)
                    "first_vs_slowest_other": ts[0] / max(ts[1:]) if len(ts) > 1 else None,
                    "identical_to_greedy": all(torch.equal(a, b) for a, b in zip(outputs[name], outputs["greedy"]))})
    g = res["methods"]["greedy"]["tokens_per_s"]
    static = res["methods"].get("greedy_static_compiled", {}).get("tokens_per_s")
    for name, row in res["methods"].items():
        if "tokens_per_s" in row:
            row["x_greedy"] = row["tokens_per_s"] / g
            if static:
                row["x_static_greedy"] = row["tokens_per_s"] / static
    peers = [res["methods"][n]["tokens_per_s"] for n in res["methods"] if n.startswith("tf_") and
             "tokens_per_s" in res["methods"][n]]
    if peers:
        best = max(peers)
        for name, row in res["methods"].items():
            if name.startswith("ours") and "tokens_per_s" in row:
                row["x_best_tf_assisted"] = row["tokens_per_s"] / best
    for name, err in errors.items():
        res["methods"][name] = {"error": err}
    res["new_tokens"] = new_tokens
    if cost_model:
        res["round_cost_model"] = _measured_round_model(target, draft, ids, max_new, res, methods)
    del target, draft
    return res


def _measured_round_model(target, draft, ids, max_new, res, methods) -> dict:
    """Per ``ours`` method: predicted x greedy = tokens per round x greedy step / (draft round + verify
    step), the two costs measured on one instrumented pass (bench/gpu/hf_common.py's clock: the larger
    of host and device time per round; a graph's replay is timed as the verify step), against the
    measured median; the same against compiled static greedy's step where it ran."""
    import torch

    import surgery.hf

    cuda = ids[0].device.type == "cuda"
    greedy = res["methods"]["greedy"]
    step_s = greedy["median_s"] / res["new_tokens"]
    static = res["methods"].get("greedy_static_compiled", {})
    static_step_s = static["median_s"] / res["new_tokens"] if "median_s" in static else None
    out = {"greedy_step_ms": 1000 * step_s,
           "static_greedy_step_ms": 1000 * static_step_s if static_step_s else None,
           "meaning": "predicted x baseline = tokens per round x the baseline's step / (draft round + verify step), "
                      "each the larger of host and device time per round on an instrumented pass; "
                      "measured_over_predicted is the distance (the loop's own Python and the host sync are "
                      "outside the model)"}
    for name, row in res["methods"].items():
        if not name.startswith("ours") or "median_s" not in row:
            continue
        clock, syncs, rounds = Clock(cuda), {}, 0
        for x in ids:
            with instrumented(clock, syncs):
                methods[name](x, max_new)
            rounds += surgery.hf.speculative_decoding.last_stats.rounds
        dev = clock.device()
        per = {p: max(clock.host.get(p, 0.0), dev.get(p, 0.0)) / max(1, rounds) for p in ("draft_round", "verify_forward")}
        tokens_per_round = res["new_tokens"] / max(1, row["rounds"])
        predicted = tokens_per_round * step_s / (per["draft_round"] + per["verify_forward"])
        measured_round = row["median_s"] / max(1, row["rounds"])
        out[name] = {"tokens_per_round": tokens_per_round, "draft_round_ms": 1000 * per["draft_round"],
                     "verify_ms": 1000 * per["verify_forward"], "measured_round_ms": 1000 * measured_round,
                     "predicted_x_greedy": predicted, "measured_x_greedy": row["x_greedy"],
                     "measured_over_predicted": row["x_greedy"] / predicted,
                     "predicted_x_static_greedy": (tokens_per_round * static_step_s
                                                   / (per["draft_round"] + per["verify_forward"]))
                     if static_step_s else None,
                     "measured_x_static_greedy": row.get("x_static_greedy"),
                     "host_syncs_per_round": round(sum(syncs.values()) / max(1, rounds), 3)}
    return out


def tf_path_maps(device, dtype, prompts, max_new, k):
    """transformers' own assisted generation on wired pairs: is the explicit map honoured there?"""
    import torch

    from surgery.tinymodels.bytevocab import encode

    maps = {"default": None, "explicit_0-2_1-3_2-2_3-4": {0: 2, 1: 3, 2: 2, 3: 4},
            "wrong_all_sliding_to_0": {0: 0, 1: 0, 2: 0, 3: 4}}
    res = {"k": k, "prompts": len(prompts), "max_new_tokens": max_new}
    for label, pairs in maps.items():
        target, draft = _wired_tiny(device, dtype, pairs)
        calls = [0]
        hook = target.register_forward_pre_hook(lambda *a: calls.__setitem__(0, calls[0] + 1))
        ids = [torch.tensor([encode(p)], device=device) for p in prompts]
        ref = [target.generate(x, max_new_tokens=max_new, do_sample=False) for x in ids]
        greedy_forwards, calls[0] = calls[0], 0
        row = {"greedy_target_forwards": greedy_forwards}
        try:
            draft.generation_config.num_assistant_tokens = k
            draft.generation_config.num_assistant_tokens_schedule = "constant"
            out = [target.generate(x, assistant_model=draft, max_new_tokens=max_new, do_sample=False) for x in ids]
            row.update({"tf_identical_to_greedy": all(torch.equal(a, b) for a, b in zip(out, ref)),
                        "tf_target_forwards": calls[0]})
        except Exception as exc:  # noqa: BLE001
            row["tf_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        import surgery.hf

        calls[0], acc = 0, [0, 0]
        out = []
        for x in ids:
            out.append(target.generate(x, assistant_model=draft, custom_generate=surgery.hf.speculative_decoding,
                                       max_new_tokens=max_new, do_sample=False, num_assistant_tokens=k))
            st = surgery.hf.speculative_decoding.last_stats
            acc = [acc[0] + st.drafted, acc[1] + st.accepted]
        row.update({"ours_identical_to_greedy": all(torch.equal(a, b) for a, b in zip(out, ref)),
                    "ours_target_forwards": calls[0], "ours_acceptance_rate": acc[1] / acc[0]})
        hook.remove()
        res[label] = row
        del target, draft
    return res


def _build_e2b(device, dtype, configs=None):
    import torch

    from hf_gpu import build_random

    t_path, d_path = configs or (CONFIGS / "gemma-4-E2B-it.json", CONFIGS / "gemma-4-E2B-it-assistant.json")
    target, draft, build_s, t_cfg, d_cfg = build_random(t_path, d_path, dtype, device=device, ordered=True)
    if getattr(draft, "masked_embedding", None) is not None:  # a real ordering (a permutation), as in the checkpoint
        g = torch.Generator().manual_seed(0)
        draft.masked_embedding.token_ordering.copy_(torch.randperm(t_cfg.vocab_size, generator=g).to(device))
    import surgery
    from hf_gpu import resolve_for

    plan = resolve_for(t_path, d_path)
    report = surgery.apply(plan, draft, target)
    assert surgery.verify(plan, draft, target, report=report).ok
    return target, draft, build_s, t_cfg.vocab_size


def round_cost(device, dtype, width, ks, new_tokens, repeats, prompt_len=64, configs=None):
    """Our loop with every draft accepted (oracle) vs plain greedy, same prompt, same run."""
    import torch

    from surgery.hf.generate import RoundStats, _decode, _Stops

    if width == "e2b":
        target, draft, build_s, vocab = _build_e2b(device, dtype, configs)
    else:
        target, draft = _wired_tiny(device, dtype)
        build_s, vocab = None, target.config.vocab_size
    target.generation_config.eos_token_id = None  # random weights: never stop early
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (1, prompt_len), generator=g).to(device)

    def greedy():
        return target.generate(ids, max_new_tokens=new_tokens, min_new_tokens=0, do_sample=False)

    def ours(k):
        from transformers import GenerationConfig

        stats = RoundStats()
        stops = _Stops(None, GenerationConfig(max_length=prompt_len + new_tokens), prompt_len)
        _decode(target, draft, ids, k, stops, None, None, stats, accept_all=True)
        return stats

    greedy()
    for k in ks:
        ours(k)
    timed = {"greedy": []} | {k: [] for k in ks}
    rounds = {}
    for _ in range(repeats):
        _sync()
        t = time.perf_counter()
        greedy()
        _sync()
        timed["greedy"].append(time.perf_counter() - t)
        for k in ks:
            _sync()
            t = time.perf_counter()
            st = ours(k)
            _sync()
            timed[k].append(time.perf_counter() - t)
            rounds[k] = st.rounds
            draft_path = st.draft_path
    step_s = statistics.median(timed["greedy"]) / new_tokens
    greedy_tps = 1.0 / step_s
    res = {"width": width, "dtype": str(dtype), "build_s": build_s, "prompt_len": prompt_len,
           "new_tokens": new_tokens, "repeats": repeats, "draft_path": draft_path, "greedy_step_s": step_s, "greedy_tokens_per_s": greedy_tps,
           "acceptance_model": {"per_position": list(ACCEPTANCE),
                                "meaning": "P(draft position i is accepted), i = 1..4; a round of k drafts yields "
                                           "1 + sum(p_1..p_k) tokens on average (the target's own token + accepted drafts)"},
           "k": {}}
    for k in ks:
        # the prefill is one forward in both loops; rounds after it each emit k + 1 tokens
        round_s = (statistics.median(timed[k]) - step_s) / rounds[k]
        cost = round_s / step_s
        expected = 1 + sum(ACCEPTANCE[:k])
        res["k"][k] = {"round_s": round_s, "round_cost_in_greedy_steps": cost, "rounds": rounds[k],
                       "oracle_tokens_per_s": (k + 1) / round_s,
                       "expected_tokens_per_round": expected,
                       "implied_tokens_per_s": expected / round_s, "implied_x_greedy": expected / cost}
    del target, draft
    return res


BASELINES = ("greedy", "greedy_static_compiled", "tf_assisted_k3", "tf_assisted_static_k3")


def _summary(results) -> dict:
    """The headline as ratios, with the card: ours against every baseline and against the fastest one
    measured in the same run, the issue's targets, and what each method was given."""
    sbs = results["side_by_side"]
    rows = sbs["methods"]
    pick = lambda n, k: rows.get(n, {}).get(k)  # noqa: E731
    out = {"card": results["device_name"], "torch": results["torch"], "transformers": results["transformers"],
           "prompts": sbs["prompts"], "max_new_tokens": sbs["max_new_tokens"], "repeats": sbs["repeats"],
           "repeats_done": sbs.get("repeats_done"), "warmup_repeats": sbs["warmup_repeats"], "methods": {}}
    for name, row in rows.items():
        if "error" in row:
            out["methods"][name] = {"error": row["error"][:200]}
            continue
        out["methods"][name] = {k: (round(row[k], 3) if isinstance(row.get(k), float) else row.get(k))
                                for k in ("tokens_per_s", "tokens_per_s_range", "x_greedy", "x_static_greedy",
                                          "x_best_tf_assisted", "first_vs_median", "first_vs_slowest_other",
                                          "identical_to_greedy", "acceptance_rate", "draft_path", "verify_path")
                                if k in row}
    measured = {n: rows[n]["tokens_per_s"] for n in BASELINES if "tokens_per_s" in rows.get(n, {})}
    fastest = max(measured, key=measured.get) if measured else None
    ours = rows.get("ours_k3", {})
    out["fastest_baseline"] = {"method": fastest, "tokens_per_s": measured.get(fastest),
                               "ours_k3_x": (ours["tokens_per_s"] / measured[fastest]
                                             if fastest and "tokens_per_s" in ours else None)}
    first = {n: r["first_vs_median"] for n, r in rows.items() if "first_vs_median" in r}
    out["issue69_targets"] = {
        "ours_k3_x_static_greedy": pick("ours_k3", "x_static_greedy"), "want_x_static_greedy": 1.5,
        "ours_k3_x_greedy": pick("ours_k3", "x_greedy"), "want_x_greedy": 3.0,
        "identical": all(r.get("identical_to_greedy") for n, r in rows.items() if n.startswith("ours")
                         and "identical_to_greedy" in r),
        "first_vs_median": first,
        "first_repeat_no_slower_than_median": all(v <= 1.0 for v in first.values()),
        "met": bool((pick("ours_k3", "x_static_greedy") or 0) >= 1.5 and (pick("ours_k3", "x_greedy") or 0) >= 3.0
                    and ours.get("identical_to_greedy") and all(v <= 1.0 for v in first.values()))}
    static = rows.get("tf_assisted_static_k3")
    peer = ("not tried (run with --peer-static)" if static is None else
            f"tried with cache_implementation='static': refused ({static['error'][:160]})" if "error" in static else
            "ran with cache_implementation='static' (row tf_assisted_static_k3)")
    out["baselines"] = {
        "greedy": "target.generate, DynamicCache, eager (transformers' default)",
        "greedy_static_compiled": "target.generate(..., cache_implementation='static'): transformers compiles the "
                                  "decoding step itself on CUDA (torch.compile, its default compile config)",
        "tf_assisted": "transformers' own MTP assisted generation, DynamicCache, eager; its decoding loop has no "
                       "compile path in 5.17 (generation/utils.py compiles only the greedy/sample loop); static cache: "
                       + peer,
        "ours": "verify_path and draft_path say what ran: on CUDA the draft's k steps one CUDA graph per round and "
                "the target's k+1-token verify step one CUDA graph per k over the rewindable static cache "
                "(surgery/hf/verifygraph.py); ours_dynamic_k3: the same loop with the verify forward eager on a "
                "DynamicCache (issue 56)"}
    if "round_cost_model" in sbs:
        out["round_cost_model"] = sbs["round_cost_model"]
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cpu", action="store_true", help="small CPU version (tiny pair only, fp32)")
    parser.add_argument("--prompts", choices=("held-out", "default"), default="held-out",
                        help="the pair's held-out prompts (text it never trained on; default) or "
                        "surgery.pairs.DEFAULT_PROMPTS (what the 2026-12-03 figures of docs/gpu.md used)")
    parser.add_argument("--headline", action="store_true",
                        help="issues 37, 69: only the side-by-side at k=3 (greedy, greedy with a static cache compiled "
                        "by transformers, transformers assisted k=3, ours k=3 and ours with the verify forward on a "
                        "DynamicCache), --repeats interleaved repeats after warm-up, median and range, the round-cost "
                        "model; $OUT/hf_generate_headline.json")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved repeats (default 3 GPU, 5 CPU; "
                        "--headline: 9)")
    parser.add_argument("--warmup", type=int, default=1, help="--headline: untimed full repeats of every method first")
    parser.add_argument("--peer-static", action="store_true",
                        help="--headline: also transformers' assisted generation with cache_implementation='static' "
                        "(refused by 5.17; greedy with it is always in the headline)")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="--headline: start no timed repeat past this many seconds (the result keeps what ran)")
    args = parser.parse_args()
    import torch

    from surgery.pairs import DEFAULT_PROMPTS as DEFAULT, held_out_prompts

    texts = tuple(held_out_prompts()) if args.prompts == "held-out" else DEFAULT
    if not texts:
        raise SystemExit("the pair index lists no held-out prompts: pass --prompts default")

    device = "cpu" if args.cpu or not torch.cuda.is_available() else "cuda"
    if device == "cpu":
        torch.set_num_threads(1)  # two shared cores: one thread is faster and steadier for the tiny pair
    results = _versions(device)
    results["prompt_set"] = args.prompts
    name = "hf_generate_cpu" if device == "cpu" else "hf_generate"
    if device == "cpu":
        dtype, prompts, max_new, ks, tf_ks = torch.float32, texts[:3], 32, (1, 2, 3, 4), (3,)
        parts = [("side_by_side", side_by_side, (device, dtype, prompts, max_new, 5, ks, tf_ks)),
                 ("tf_path_maps", tf_path_maps, (device, dtype, texts[:2], 24, 3)),
                 ("round_cost", round_cost, (device, dtype, "tiny", (1, 2, 3, 4), 32, 5))]
    else:
        dtype, prompts, max_new, ks, tf_ks = torch.bfloat16, texts[:6], 64, (1, 2, 3, 4), (1, 3)
        parts = [("side_by_side", side_by_side, (device, dtype, prompts, max_new, 3, ks, tf_ks)),
                 ("tf_path_maps", tf_path_maps, (device, dtype, texts[:4], 48, 3)),
                 ("round_cost", round_cost, (device, dtype, "e2b", (1, 2, 3, 4), 48, 3))]
    if args.headline:
        repeats = args.repeats or 9
        name += "_headline" + ("_peer_static" if args.peer_static else "")
        parts = [("side_by_side", side_by_side, (device, dtype, prompts, max_new, repeats, (3,), (3,), (),
                                                 args.warmup, args.peer_static, True, True, (3,), args.budget_s))]
    results["repeats"] = args.repeats or (9 if args.headline else None)
    for key, fn, fn_args in parts:
        log("part", key)
        guarded(results, key, fn, *fn_args)
        save(name, results)
    if args.headline and "methods" in results.get("side_by_side", {}):
        results["summary"] = _summary(results)
        save(name, results)
        print(json.dumps(results["summary"], indent=1))
    print(json.dumps({k: v for k, v in results.items() if k != "_seconds"}, indent=1, default=str)[:6000])


if __name__ == "__main__":
    main()
