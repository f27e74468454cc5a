"""SGLang on the GPU with surgery's plugin (issues 36, 58): greedy identity and SGLang's own acceptance.

    . /tmp/sbundle/env.sh && PYTHONPATH=$PWD:$PYTHONPATH python3 bench/gpu/sglang_gpu.py [--only eagle,mtp]
    python3 bench/gpu/sglang_gpu.py --cpu      # dry run: pairs, variants, plans, engine kwargs; no SGLang

Releases: 0.5.17 (sglang-kernel 0.4.5, the image's torch 2.11; H200, 2026-12-04) and 0.5.23
(sglang-kernel 0.4.10, flashinfer 0.7.2, transformers 5.19, on the vLLM 0.34 bundle's torch 2.14.0),
each from bench/gpu/sglang_bundle/. What this script and surgery/sglang/ use is the same in both
(read from the two wheels, README.md of the bundle): the Engine kwargs, the V2 draft workers'
init_lm_head, ModelRunner.init_attention_backends, DefaultModelLoader.load_weights_and_postprocess,
the `sglang.srt.plugins` group, meta_info's spec counters (0.5.23 adds spec_correct_drafts_histogram,
kept) and output_top_logprobs. 0.5.23 moved the speculative tree ops out of sgl_kernel into
SGLang's own triton / JIT kernels (sglang/kernels/ops/speculative): `jit` compiles that module too.

The pairs of surgery/data/pairs/index.yaml the vLLM runs use (bench/gpu/vllm_families_gpu.py), so the
acceptance figures compare: eagle3, eagle (llama-target), mtp (MiMo, NEXTN), deepseek-mtp (NEXTN).
Every engine runs in its own child process (surgery/sglang/engine.py `run_engine`: a failure stops
only that row). Per target one target-only greedy engine (the reference), then per row a speculative
engine: 3 steps, top-k 1, 4 draft tokens, triton attention, bf16, the pair's held-out prompts, 48
tokens. The recipe reaches SGLang's scheduler through surgery's `sglang.srt.plugins` entry point
(`SURGERY_RECIPE`; a checkout gets a generated dist-info folder on the child's PYTHONPATH) and the
hook writes what it did to `SURGERY_REPORT` (JSON lines), read back per row.

Parts (`--only`, comma-separated; default all, in this order):
- `jit`: the first call of each JIT-compiled op the engines reach (sgl_kernel.rmsnorm /
  fused_add_rmsnorm in bf16 hand over to flashinfer.norm; SGLang's rope), timed: the compile cost
  lands here once, not inside the first engine's start-up (caches under /tmp/sjit, env.sh).
- `apply-eagle3`, `apply-eagle`, `apply-mtp`: the user's command, `python -m surgery apply RECIPE
  --engine sglang --json` on the built-in pair (SGLang's: for eagle3 the head trained on ids
  [1, 4, 7]), its JSON kept.
- the family rows below.

Rows:
- eagle3 `recipe, built-in head`: the head's ids [0, 7, 8] cannot be captured by SGLang: SRG362 at
  plan time (expected, recorded; no engine). The head SGLang's built-in pair uses (ids [1, 4, 7],
  tools/build_formats_head.py): `stock` (no recipe: SGLang reads no top-level ids and captures its
  default [2, 4, 5]) vs `recipe` (the hook sets [1, 4, 7] after SGLang's set_eagle3_layers_to_capture).
- eagle `recipe`: the EAGLE-1 head, served with SGLang's EAGLE class (engine.served_draft: SGLang does
  not rename LlamaForCausalLM and would drop the head's fc); ablation `own_different`: the head given
  its own random embedding and lm_head: `stock` (SGLang replaces them by the target's) vs `recipe`
  (keeps them, as vLLM does).
- mtp, deepseek-mtp `recipe` (NEXTN).

Writes $OUT/sglang_gpu[-TAG].json after every engine (a run cut short keeps what it measured); a row
that raises is recorded with the exception, its module and, for a library that does not load, the
library and symbol (bench/gpu/rowlog.py `failure`), and the next row runs. Exit 1 when a recipe row is
not verified or a speculative output differs from its greedy reference.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, failure, failure_from_text, guarded, log, save  # noqa: E402

from surgery.sglang import engine, report  # noqa: E402

RESULT = "sglang_gpu"
FAMILIES = ("eagle3", "eagle", "mtp", "deepseek-mtp")
APPLY = {"apply-eagle3": "eagle3", "apply-eagle": "eagle", "apply-mtp": "mtp"}
PARTS = ("jit", *APPLY, *FAMILIES)
ALGORITHMS = {"eagle3": "EAGLE3", "eagle": "EAGLE", "mtp": "NEXTN", "deepseek-mtp": "NEXTN"}


def copy_draft(src: Path, dest: Path) -> Path:
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(src, dest)
    return dest


def jit_first_calls(dtype: str = "bfloat16") -> dict:
    """Each JIT op the llama / MiMo / DeepSeek forwards reach, called once on the GPU: seconds of the
    first call (compile + load) and of a second one (cached), or the error."""
    import torch

    dt = getattr(torch, dtype)
    x = torch.randn(8, 64, device="cuda", dtype=dt)
    w = torch.ones(64, device="cuda", dtype=dt)

    def rmsnorm():
        from sgl_kernel import rmsnorm as op

        ref = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)
        return {"max_abs_err": float((op(x, w, 1e-6) - ref).abs().max())}

    def fused_add_rmsnorm():
        from sgl_kernel import fused_add_rmsnorm as op

        op(x.clone(), x.clone(), w, 1e-6)
        return {}

    def silu_and_mul():
        from sgl_kernel import silu_and_mul as op

        y = torch.randn(8, 128, device="cuda", dtype=dt)
        ref = torch.nn.functional.silu(y[:, :64].float()) * y[:, 64:].float()
        return {"max_abs_err": float((op(y).float() - ref).abs().max())}

    def rope():
        from sglang.srt.layers.rotary_embedding import RotaryEmbedding

        # the class, not get_rope(): that reads SGLang's published server config ('exec' namespace),
        # which exists only inside an engine
        r = RotaryEmbedding(32, 32, 512, 10000, True, dt).to("cuda")
        q = torch.randn(8, 2 * 32, device="cuda", dtype=dt)
        k = torch.randn(8, 2 * 32, device="cuda", dtype=dt)
        pos = torch.arange(8, device="cuda")
        qn, kn = r.forward_native(pos, q.clone(), k.clone())
        qc, kc = r.forward_cuda(pos, q.clone(), k.clone())
        return {"max_abs_err_vs_native": float(max((qn - qc).abs().max(), (kn - kc).abs().max()))}

    def spec_tree():
        """0.5.23: the tree build / greedy verify kernels are SGLang's own JIT module (tvm_ffi, nvcc on
        first use; sglang/kernels/ops/speculative/tree.py), no longer sgl_kernel ops: compiled here once."""
        import importlib.util

        if importlib.util.find_spec("sglang.kernels.ops.speculative.tree") is None:
            return {"skipped": "this SGLang has no sglang.kernels.ops.speculative.tree (tree ops in sgl_kernel)"}
        from sglang.kernels.ops.speculative import tree

        tree._jit_tree_module()
        return {}

    out = {}
    for name, fn in (("rmsnorm", rmsnorm), ("fused_add_rmsnorm", fused_add_rmsnorm), ("silu_and_mul", silu_and_mul),
                     ("rope", rope), ("spec_tree", spec_tree)):
        row = {}
        for attempt in ("first_s", "second_s"):
            t = time.perf_counter()
            try:
                row.update(fn())
                torch.cuda.synchronize()
            except Exception as exc:  # noqa: BLE001 - the error is the finding
                row.update(failure(exc))
                break
            finally:
                row[attempt] = round(time.perf_counter() - t, 2)
        out[name] = row
        log(f"jit {name}: {row}")
    return out


def apply_command(recipe: str, timeout: float, dtype: str) -> dict:
    """`python -m surgery apply RECIPE --engine sglang --dtype D --json`, as a user runs it (built-in pair)."""
    cmd = [sys.executable, "-m", "surgery", "apply", recipe, "--engine", "sglang", "--dtype", dtype, "--json"]
    t = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}"})
    except subprocess.TimeoutExpired:
        return {"command": " ".join(cmd[1:]), "rc": "timeout", "wall_s": round(time.perf_counter() - t, 1)}
    row: dict = {"command": "surgery " + " ".join(cmd[3:]), "rc": proc.returncode,
                 "wall_s": round(time.perf_counter() - t, 1), "stderr_tail": proc.stderr[-3000:]}
    try:
        row["json"] = json.loads(proc.stdout)
    except json.JSONDecodeError:
        row["stdout_tail"] = proc.stdout[-3000:]
    return row


def own_different(src: Path, dest: Path) -> Path:
    """The EAGLE-1 head with its own random embedding and lm_head (as tests/sglang_engine/
    test_live_draft_load.py builds it), served with SGLang's EAGLE class."""
    import torch
    from safetensors.torch import load_file, save_file

    d = copy_draft(src, dest)
    cfg = json.loads((d / "config.json").read_text())
    tensors = load_file(str(d / "model.safetensors"))
    g = torch.Generator().manual_seed(7)
    rows, width = cfg["vocab_size"], cfg["hidden_size"]
    tensors["embed_tokens.weight"] = torch.randn(rows, width, generator=g) * 0.02
    tensors["lm_head.weight"] = torch.randn(rows, width, generator=g) * 0.02
    save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})
    served, _ = engine.served_draft(d, "EAGLE", dest.parent / (dest.name + "-served"))
    return served


def rows_for(fam: str, pair, work: Path) -> list[dict]:
    """The speculative rows of one family: label, draft folder, recipe (None: stock)."""
    algo = ALGORITHMS[fam]
    if fam == "eagle3":
        from surgery.pairs import builtin_pair

        sgl = builtin_pair("eagle3", engine="sglang").draft
        return [dict(label="recipe, built-in head [0, 7, 8]", draft=pair.draft, recipe="eagle3", expect_refusal="SRG362"),
                dict(label="head [1, 4, 7]: stock", draft=sgl, recipe=None),
                dict(label="head [1, 4, 7]: recipe", draft=sgl, recipe="eagle3")]
    if fam == "eagle":
        served, note = engine.served_draft(pair.draft, algo, work / "eagle-served")
        od = own_different(pair.draft, work / "eagle-own-different")
        return [dict(label="recipe", draft=served, recipe="eagle", served=note),
                dict(label="ablation own_different: stock", draft=od, recipe=None),
                dict(label="ablation own_different: recipe", draft=od, recipe="eagle")]
    return [dict(label="recipe", draft=pair.draft, recipe=fam)]


def plan_check(recipe: str, draft: Path, target: Path) -> dict:
    from surgery.text.diagnostics import SurgeryError
    from surgery.sglang.live_apply import plan_for

    try:
        plan = plan_for(recipe, str(draft), str(target))
        return {"ok": True, "operations": [op.kind for op in plan.operations]}
    except SurgeryError as exc:
        return {"ok": False, "diagnostics": [f"{d.code} {d.message}" for d in exc.diagnostics]}


def versions() -> dict:
    import importlib.metadata as md

    import torch

    out = {"torch": torch.__version__, "torch_from": str(Path(torch.__file__).parent.parent),
           "python": sys.version.split()[0]}
    for dist in ("sglang", "sglang-kernel", "flashinfer-python", "transformers", "tokenizers", "xgrammar", "triton"):
        try:
            out[f"dist:{dist}"] = md.version(dist)
        except md.PackageNotFoundError:
            out[f"dist:{dist}"] = None
    for mod in ("sglang", "sgl_kernel", "sglang_kernel", "transformers", "flashinfer"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception as exc:  # noqa: BLE001 - recorded, not fatal
            out[mod] = f"unavailable ({type(exc).__name__})"
    out["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    return out


def run_row(fam: str, row: dict, i: int, out: dict, ctx: dict) -> None:
    """One speculative row: plan check, engine, decode summary, verification; appends to failures."""
    args, pair, prompts, skw, references, key, failures, work = (ctx[k] for k in (
        "args", "pair", "prompts", "skw", "references", "key", "failures", "work"))
    if row["recipe"] is not None:
        out["plan"] = plan_check(row["recipe"], row["draft"], pair.target)
        if not out["plan"]["ok"]:
            expected = row.get("expect_refusal")
            out["refused_as_expected"] = bool(expected) and any(d.startswith(expected)
                                                                for d in out["plan"]["diagnostics"])
            if not out["refused_as_expected"]:
                failures.append(f"{fam} {row['label']}: plan refused {out['plan']['diagnostics']}")
            return
    if args.cpu:
        log(f"{fam} [{row['label']}] recipe={row['recipe']} kwargs={json.dumps(skw)}")
        return
    log("engine:", fam, row["label"])
    res = engine.run_engine(skw, prompts, args.max_tokens, recipe=row["recipe"], timeout=args.timeout,
                            workdir=work / f"{fam}-{i}")
    out.update({k: res.get(k) for k in ("rc", "wall_s", "engine_start_s", "generate_s", "report",
                                        "log_lines", "applied_lines", "error", "codes", "sglang")})
    if "outputs" not in res:
        out["tail"] = res.get("tail")
        out["failure"] = failure_from_text(res.get("tail") or "")
        failures.append(f"{fam} {row['label']}: {res.get('error')}")
        return
    ref = references[key].get("outputs")
    out["decode"] = engine.decode_summary(ref or [], res["outputs"], res["meta"], engine.NUM_DRAFT_TOKENS,
                                          reference_top=references[key].get("top"),
                                          noise=references[key].get("noise"))
    out["outputs"] = res["outputs"]
    out["meta"] = res["meta"]
    if row["recipe"] is not None:
        out["verified"], out["problems"] = report.verified(res.get("report") or [])
        if not out["verified"]:
            failures.append(f"{fam} {row['label']}: not verified {out['problems']}")
    if not out["decode"]["identical_up_to_ties"]:  # a divergence outside the measured noise (SRG366)
        failures.append(f"{fam} {row['label']}: outputs differ from greedy at {out['decode']['mismatched_prompts']}")
    d = out["decode"]
    log(f"  {fam} [{row['label']}] identical={d['identical']} up_to_ties={d['identical_up_to_ties']} (tolerance {d['tolerance']:.3g}) acceptance={d['acceptance_rate']:.3f} "
        f"accept_length={d['accept_length']} verified={out.get('verified')}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cpu", action="store_true", help="dry run: no SGLang, plans and engine kwargs only")
    p.add_argument("--only", default=",".join(PARTS), help=f"parts, comma-separated: {', '.join(PARTS)}")
    p.add_argument("--tag", default="", help="result file sglang_gpu-TAG.json (one per call)")
    p.add_argument("--max-tokens", type=int, default=engine.MAX_TOKENS)
    p.add_argument("--dtype", default="bfloat16", help="bfloat16 (default) or float16: sgl_kernel's rmsnorm takes no "
                   "float32 (SRG367; measured 2026-12-04)")
    p.add_argument("--cuda-graph", action="store_true", help="let SGLang capture CUDA graphs (default: disabled)")
    p.add_argument("--timeout", type=float, default=420, help="seconds per engine")
    args = p.parse_args(argv)

    from surgery.tinymodels.bytevocab import encode
    from surgery.pairs import builtin_pair

    work = Path(tempfile.mkdtemp(prefix="sglang-gpu-"))
    results: dict = {"dry_run": args.cpu, "settings": {"num_steps": engine.NUM_STEPS, "topk": engine.TOPK,
                                                       "num_draft_tokens": engine.NUM_DRAFT_TOKENS,
                                                       "max_tokens": args.max_tokens, "dtype": args.dtype,
                                                       "cuda_graph": args.cuda_graph},
                     "plugin_registered_by_install": engine.plugin_registered()}
    name = RESULT + (f"-{args.tag}" if args.tag else "")
    only = [f for f in args.only.split(",") if f]
    unknown = sorted(set(only) - set(PARTS))
    if unknown:
        p.error(f"unknown parts {unknown}; known: {', '.join(PARTS)}")
    failures: list[str] = []
    if not args.cpu:
        guarded(results, "versions", versions)
        if "jit" in only:
            for dt in dict.fromkeys((args.dtype, "bfloat16", "float32")):
                jit = guarded(results, f"jit_{dt}", jit_first_calls, dt)
                if dt == args.dtype and isinstance(jit, dict):
                    failures += [f"jit {k}: {v['error'][:300]}" for k, v in jit.items() if isinstance(v, dict) and "error" in v]
            save(name, results)
    for part in [x for x in only if x in APPLY]:
        if args.cpu:
            results[part] = {"command": f"surgery apply {APPLY[part]} --engine sglang --json"}
            continue
        log("command:", part)
        row = results[part] = apply_command(APPLY[part], timeout=2 * args.timeout, dtype=args.dtype)
        rj = row.get("json") or {}
        d = rj.get("decode") or {}
        log(f"  {part}: rc={row['rc']} ok={rj.get('ok')} verified={rj.get('verified')} identical={d.get('identical')} "
            f"acceptance={d.get('acceptance_rate')} accept_length={d.get('accept_length')}")
        if row["rc"] != 0 or not rj.get("ok"):
            row["failure"] = failure_from_text(row.get("stderr_tail") or "")
            failures.append(f"{part}: rc {row['rc']}")
        save(name, results)
    references: dict = {}
    kw = dict(dtype=args.dtype, cuda_graph=args.cuda_graph)
    for fam in [f for f in only if f in FAMILIES]:
        pair = builtin_pair(fam)
        if pair is None:
            results[fam] = {"error": f"no built-in pair {fam}"}
            continue
        prompts = [encode(t) for t in pair.prompts]
        fam_res: dict = {"target": str(pair.target), "algorithm": ALGORITHMS[fam], "prompts": len(prompts), "rows": {}}
        results[fam] = fam_res
        key = str(pair.target)
        if key not in references:
            gkw = engine.engine_kwargs(pair.target, **kw)
            if args.cpu:
                references[key] = {"engine_kwargs": gkw}
            else:
                log("engine: target-only greedy", pair.target.name)
                references[key] = engine.run_engine(gkw, prompts, args.max_tokens, timeout=args.timeout,
                                                    workdir=work / f"greedy-{len(references)}", top_logprobs=5)
                references[key]["engine_kwargs"] = gkw
                if "outputs" not in references[key]:
                    references[key]["failure"] = failure_from_text(references[key].get("tail") or "")
                    failures.append(f"greedy {pair.target.name}: {references[key].get('error')}")
        fam_res["greedy"] = references[key]
        rows = guarded(fam_res, "_rows", rows_for, fam, pair, work)
        if not isinstance(rows, list):
            failures.append(f"{fam}: variants not built")
            continue
        del fam_res["_rows"]
        for i, row in enumerate(rows):
            skw = engine.engine_kwargs(pair.target, row["draft"], ALGORITHMS[fam], **kw)
            out: dict = {"recipe": row["recipe"], "draft": str(row["draft"]), "engine_kwargs": skw,
                         "served": row.get("served")}
            fam_res["rows"][row["label"]] = out
            try:
                run_row(fam, row, i, out, dict(args=args, pair=pair, prompts=prompts, skw=skw, references=references,
                                               key=key, failures=failures, work=work))
            except Exception as exc:  # noqa: BLE001 - one row's failure is recorded; the next row runs
                out.update(failure(exc))
                failures.append(f"{fam} {row['label']}: {type(exc).__name__}: {str(exc)[:300]}")
                log(f"  {fam} [{row['label']}] FAILED: {type(exc).__name__}: {exc}")
            save(name, results)
        if args.cpu:
            fam_res["greedy"] = {"engine_kwargs": references[key]["engine_kwargs"]}
    results["failures"] = failures
    save(name, results)
    for f in failures:
        log("FAILURE", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
