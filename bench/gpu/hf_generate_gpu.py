"""HF generate side by side: plain greedy, transformers' assisted generation, ours (issue 16).

    cd bench/gpu && PYTHONPATH=$PWD/../.. python3 hf_generate_gpu.py            # H200, ~3-4 min
    cd bench/gpu && PYTHONPATH=$PWD/../.. python3 hf_generate_gpu.py --cpu      # this machine, ~1-2 min, 5 repeats
    cd bench/gpu && PYTHONPATH=$PWD/../.. python3 hf_generate_gpu.py --headline --prompts default   # issue 37: k=3,
        # 7 interleaved repeats after warm-up, median + range (--cpu --headline: the dry run here)

Results: $OUT/hf_generate.json (``--cpu``: $OUT/hf_generate_cpu.json); versions are in the file.

Parts (each guarded: a failure is recorded, the rest still runs):
  side_by_side    the distilled tiny Gemma 4 pair wired by ``surgery.apply`` (gemma4-mtp): median
                  tokens/s over >= 3 interleaved repeats (warm-up excluded) of
                  - greedy:        target.generate(ids, do_sample=False)
                  - tf_assisted_k: target.generate(ids, assistant_model=draft)  (transformers' MTP path;
                                   crashes in transformers 5.19, recorded as an error)
                  - ours_k:        target.generate(ids, assistant_model=draft,
                                   custom_generate=surgery.hf.speculative_decoding)
                  with output identity against greedy and ratios against greedy / the peer.
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

from common import ROOT, guarded, log, save, tiny_pair_dirs

CONFIGS = ROOT / "tests" / "data" / "configs"
ACCEPTANCE = (0.92, 0.79, 0.68, 0.59)  # P(draft position i accepted), Gemma 4 MTP, published figures


def _sync():
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _versions(device):
    import platform

    import torch
    import transformers

    return {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "device": device,
            "device_name": torch.cuda.get_device_name(0) if device == "cuda" else platform.processor() or "cpu",
            "torch_threads": torch.get_num_threads()}


def _plan(t_dir, d_dir, pairs=None, tmp=None):
    from surgery import Runtime, load_recipe, read_facts, resolve

    path = ROOT / "recipes" / "gemma4-mtp.yaml"
    if pairs is not None:
        text = path.read_text().replace("    rule: last_unshared_of_type\n", "    rule: explicit\n    pairs: {"
                                        + ", ".join(f"{d}: {t}" for d, t in pairs.items()) + "}\n")
        path = tmp / f"explicit-{'-'.join(map(str, pairs.values()))}.yaml"
        path.write_text(text)
    plan = resolve(load_recipe(str(path)), read_facts(d_dir), read_facts(t_dir), Runtime(engine="hf"))
    assert plan.ok, plan.errors
    return plan


def _wired_tiny(device, dtype, pairs=None):
    from pathlib import Path

    import surgery
    from surgery.hf.loader import load_pair

    t_dir, d_dir = tiny_pair_dirs(Path("/tmp/tiny_hf_generate"), strip_per_layer_config=False)
    target, draft = load_pair(t_dir, d_dir, device=device, dtype=dtype)
    plan = _plan(t_dir, d_dir, pairs, Path("/tmp/tiny_hf_generate"))
    report = surgery.apply(plan, draft, target)
    verification = surgery.verify(plan, draft, target, report=report)
    assert verification.ok, verification.failed
    return target, draft


def _methods(target, draft, ks, tf_ks):
    import surgery.hf

    spec = surgery.hf.speculative_decoding

    def greedy(ids, n):
        return target.generate(ids, max_new_tokens=n, do_sample=False)

    def tf(k):
        def run(ids, n):
            draft.generation_config.num_assistant_tokens = k
            draft.generation_config.num_assistant_tokens_schedule = "constant"
            return target.generate(ids, assistant_model=draft, max_new_tokens=n, do_sample=False)
        return run

    def ours(k):
        def run(ids, n):
            return target.generate(ids, assistant_model=draft, custom_generate=spec, max_new_tokens=n,
                                   do_sample=False, num_assistant_tokens=k)
        return run

    methods = {"greedy": greedy}
    methods.update({f"tf_assisted_k{k}": tf(k) for k in tf_ks})
    methods.update({f"ours_k{k}": ours(k) for k in ks})
    return methods


def side_by_side(device, dtype, prompts, max_new, repeats, ks, tf_ks):
    import torch

    import surgery.hf
    from surgery.bytevocab import encode

    target, draft = _wired_tiny(device, dtype)
    ids = [torch.tensor([encode(p)], device=device) for p in prompts]
    methods = _methods(target, draft, ks, tf_ks)
    res = {"prompts": len(prompts), "max_new_tokens": max_new, "repeats": repeats, "methods": {}}
    outputs, errors = {}, {}
    for name, fn in methods.items():  # warm-up (kernels, allocator, lazy imports); errors recorded once
        try:
            fn(ids[0], 8)
        except Exception as exc:  # noqa: BLE001 - transformers' own path crashes on 5.19: a finding
            errors[name] = f"{type(exc).__name__}: {str(exc)[:300]}"
    times = {name: [] for name in methods if name not in errors}
    for _ in range(repeats):  # interleaved, so drifting clocks or neighbours hit every method alike
        for name in times:
            out, acc = [], [0, 0]
            _sync()
            t = time.perf_counter()
            for x in ids:
                out.append(methods[name](x, max_new))
                if name.startswith("ours"):
                    st = surgery.hf.speculative_decoding.last_stats
                    acc[0] += st.drafted
                    acc[1] += st.accepted
            _sync()
            times[name].append(time.perf_counter() - t)
            outputs[name] = out
            if name.startswith("ours"):
                row = res["methods"].setdefault(name, {})
                row["acceptance_rate"] = acc[1] / acc[0] if acc[0] else None
                row["draft_path"] = surgery.hf.speculative_decoding.last_stats.draft_path
    new_tokens = sum(o.shape[1] - x.shape[1] for o, x in zip(outputs["greedy"], ids))
    for name, ts in times.items():
        med = statistics.median(ts)
        row = res["methods"].setdefault(name, {})
        row.update({"seconds": [round(t, 4) for t in ts], "median_s": round(med, 4),
                    "tokens_per_s": new_tokens / med,
                    # the range over the repeats (slowest, fastest), with the median: what the README quotes
                    "tokens_per_s_range": [new_tokens / max(ts), new_tokens / min(ts)],
                    "identical_to_greedy": all(torch.equal(a, b) for a, b in zip(outputs[name], outputs["greedy"]))})
    g = res["methods"]["greedy"]["tokens_per_s"]
    for name, row in res["methods"].items():
        if "tokens_per_s" in row:
            row["x_greedy"] = row["tokens_per_s"] / g
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
    del target, draft
    return res


def tf_path_maps(device, dtype, prompts, max_new, k):
    """transformers' own assisted generation on wired pairs: is the explicit map honoured there?"""
    import torch

    from surgery.bytevocab import encode

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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cpu", action="store_true", help="small CPU version (tiny pair only, fp32)")
    parser.add_argument("--prompts", choices=("held-out", "default"), default="held-out",
                        help="the pair's held-out prompts (text it never trained on; default) or "
                        "surgery.pairs.DEFAULT_PROMPTS (what the 2026-12-03 figures of docs/gpu.md used)")
    parser.add_argument("--headline", action="store_true",
                        help="issue 37: only the side-by-side at k=3 (greedy, transformers assisted k=3, ours k=3), "
                        "--repeats interleaved repeats after warm-up, median and range; $OUT/hf_generate_headline.json")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved repeats (default 3 GPU, 5 CPU; "
                        "--headline: 7)")
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
        repeats = args.repeats or 7
        name += "_headline"
        parts = [("side_by_side", side_by_side, (device, dtype, prompts, max_new, repeats, (3,), (3,)))]
    elif args.repeats:
        parts = [(k, fn, fa if k == "tf_path_maps" else fa[:-1] + (args.repeats,) if k == "round_cost" else
                  fa[:4] + (args.repeats,) + fa[5:]) for k, fn, fa in parts]
    results["repeats"] = args.repeats or (7 if args.headline else None)
    for key, fn, fn_args in parts:
        log("part", key)
        guarded(results, key, fn, *fn_args)
        save(name, results)
    print(json.dumps({k: v for k, v in results.items() if k != "_seconds"}, indent=1, default=str)[:6000])


if __name__ == "__main__":
    main()
