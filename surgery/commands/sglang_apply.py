"""`surgery apply RECIPE --engine sglang`: the pair in real SGLang on a CUDA device; elsewhere a coded
error (SRG360) naming the blocker, never a traceback.

Measured on CPU (docs/sglang.md, engine card `limits.speculative_fails_on_devices`): sglang 0.5.21
runs a plain engine, but a speculative engine stops at start on CPU ops that only sgl-kernel's CPU
build has: SRG360. On a CUDA device with SGLang installed (0.5.16 / 0.5.17 beside torch 2.11, the
card's `releases`) the command runs two engines, each in a child process (surgery/sglang/engine.py):
the target alone (greedy reference), then the target with the family's algorithm and the recipe
applied in SGLang's scheduler by surgery's entry point (`SURGERY_RECIPE`), the hook's report
(`SURGERY_REPORT`, JSON lines) read back. The report has the `--engine vllm` shape: `ok`,
`verified`, `decode: {identical, drafted, accepted, acceptance_rate, ...}`, the counters SGLang's own
(meta_info `spec_verify_ct`, `spec_num_correct_drafts`, ...)."""
from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
from pathlib import Path

from .. import greedyties
from ..text.diagnostics import EXIT_INVALID, EXIT_OK, SurgeryError, diag
from ..options import ApplyOptions
from ..engine.cards import card
from ..pairs import DEFAULT_PROMPTS, builtin_pair
from ..tinymodels.bytevocab import encode
from ..recipe import load_recipe


def blocker(device: str | None = None) -> str:
    """Why `--engine sglang` cannot run here, in one sentence."""
    release = card("sglang").release
    if importlib.util.find_spec("sglang") is None:
        torch_pin = card("sglang").releases[release].torch
        installed = f"sglang is not installed (surgery pins {release}, beside torch {torch_pin}, in its own venv)"
    else:
        installed = "sglang is installed"
    if device is None:
        try:
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
        except Exception:  # noqa: BLE001 - no torch: a CPU-only question anyway
            device = "cpu"
    if device in card("sglang").limits.speculative_fails_on_devices:
        return (f"{installed}; and on {device} SGLang {release} cannot start a speculative engine: the KV pool's "
                "warm-up calls sgl_kernel.copy_all_layer_kv_cache_cpu, EAGLE needs an attention backend other than "
                "torch_native (intel_amx falls back to torch_native without AMX) and the tree ops "
                "build_tree_kernel_efficient_cpu / verify_tree_greedy_cpu, all from sgl-kernel's CPU build, which "
                "PyPI does not ship")
    return (f"{installed}; on {device} `surgery apply --engine sglang` starts SGLang's engine (the card's releases "
            "for this device) with the hook surgery.sglang.hooks.install() in its scheduler")


def device_blocker(device: str, sglang_installed: bool) -> str | None:
    """None when `--engine sglang` runs the engine on `device`; else why not (SRG360). A device the
    card measured as failing (cpu) never runs; any other needs SGLang installed."""
    if device in card("sglang").limits.speculative_fails_on_devices:
        return blocker(device)
    if not sglang_installed:
        known = [r for r, v in card("sglang").releases.items() if v.device == device]
        return f"sglang is not installed (on {device} surgery knows releases {', '.join(known) or 'none'})"
    return None


def dtype_for(requested: str | None) -> str:
    """The engine dtype: the card's first CUDA dtype when none is asked for; a dtype SGLang's CUDA
    kernels do not take is refused before any engine starts (SRG367), not found at the first forward."""
    allowed = list(card("sglang").limits.cuda_dtypes)
    spelled = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}.get(requested or "", requested)
    if spelled is None:
        return allowed[0]
    if spelled not in allowed:
        raise SurgeryError(diag("SRG367", f"--dtype {requested}: SGLang's CUDA kernels take {', '.join(allowed)} only",
                                hint=f"drop --dtype (SGLang runs {allowed[0]}), or use --engine hf / vllm for float32"))
    return spelled


def algorithm_for(recipe) -> str:
    from ..sglang.compare import ALGORITHMS

    method = ((recipe.engine or {}).get("vllm") or {}).get("method") if isinstance(recipe.engine, dict) else None
    return ALGORITHMS.get(method or "", ALGORITHMS.get(recipe.name, "EAGLE"))


def pair_for(recipe_name: str, target=None, draft=None):
    """(target, draft, prompt texts, engine variant or None): the folders given, or the built-in pair
    as SGLang gets it: where the index names an SGLang variant (the EAGLE-3 head trained on ids SGLang
    can capture), that one, and the variant says why."""
    if (target is None) != (draft is None):
        raise SurgeryError(diag("SRG011", "--engine sglang needs both --target and --draft, or neither (built-in pair)"))
    if target is not None:
        return target, draft, DEFAULT_PROMPTS, None
    pair = builtin_pair(recipe_name, engine="sglang")
    if pair is None:
        raise SurgeryError(diag("SRG450", f"no built-in miniature pair for recipe {recipe_name!r}",
                                hint="pass --target and --draft folders"))
    return pair.target, pair.draft, pair.prompts or DEFAULT_PROMPTS, pair.info.get("engine_variant")


def run_sglang_apply(recipe_ref: str, target=None, draft=None, max_tokens: int | None = None,
                     progress=lambda _m: None, dtype: str = "bfloat16") -> dict:
    """The whole `--engine sglang` check on a CUDA device; the report dict (module doc)."""
    from ..sglang import engine, report
    from ..sglang.live_apply import plan_for

    recipe = load_recipe(recipe_ref)
    algorithm = algorithm_for(recipe)
    target, draft, texts, variant = pair_for(recipe.name, target, draft)
    if variant:
        progress(f"built-in pair for SGLang: {variant['draft']} ({variant['because']})")
    plan_for(recipe_ref, str(draft), str(target))  # refusals (SRG362 ...) before any engine starts
    work = Path(tempfile.mkdtemp(prefix="surgery-sglang-apply-"))
    served, served_note = engine.served_draft(draft, algorithm, work / "draft")
    prompts = [encode(t) for t in texts]
    max_tokens = max_tokens or engine.MAX_TOKENS
    progress("target-only greedy reference (SGLang)")
    ref = engine.run_engine(engine.engine_kwargs(target, dtype=dtype), prompts, max_tokens, workdir=work / "greedy",
                            top_logprobs=5)
    _engine_ok(ref, "the target-only greedy engine")
    progress(f"speculative run ({algorithm}, recipe {recipe.name})")
    run = engine.run_engine(engine.engine_kwargs(target, served, algorithm, dtype=dtype), prompts, max_tokens,
                            recipe=recipe_ref,
                            workdir=work / "speculative")
    _engine_ok(run, f"the {algorithm} engine with recipe {recipe.name}")
    events = run.get("report") or []
    applied = [e for e in events if e["event"] == "applied"]
    verified = report.verified(events)[0]
    decode = engine.decode_summary(ref["outputs"], run["outputs"], run["meta"], engine.NUM_DRAFT_TOKENS,
                                   reference_top=ref.get("top"), noise=ref.get("noise"))
    return {"ok": verified and decode["identical_up_to_ties"], "verified": verified, "dtype": dtype, "engine": "sglang", "sglang": run.get("sglang"),
            "torch": run.get("torch"), "algorithm": algorithm, "recipe": recipe.name, "target": str(target),
            "draft": str(draft), "pair_variant": variant, "served": {"draft": str(served), "changed": served_note},
            "plugin": {"events": events, "log_lines": run.get("log_lines")},
            "wiring": {"sglang_own": applied[0].get("sglang_wiring") if applied else None,
                       "after_recipe": applied[0].get("after_recipe") if applied else None},
            "guard": guard_summary(events),
            "decode": decode, "greedy_s": ref.get("generate_s"), "speculative_s": run.get("generate_s"),
            "engine_kwargs": engine.engine_kwargs(target, served, algorithm, dtype=dtype)}


def guard_summary(events: list[dict]) -> dict | None:
    """The acceptance guard's last record in the plugin's report (surgery/sglang/guard.py writes one at
    each trip or episode end and at 32, 64, 128, ... drafts): drafts judged and trips. None: no record
    (the guard was off, or judged fewer than 32 drafts)."""
    records = [e for e in events if e.get("event") == "guard"]
    if not records:
        return None
    last = records[-1]
    seen = ((last.get("streams") or {}).get("all") or {}).get("drafts_seen")
    return {"drafts_seen": seen, "trips": [t.get("code") for t in last.get("trips") or ()],
            "expect_source": last.get("expect_source"), "records": len(records)}


def guard_line(guard: dict | None) -> str:
    if guard is None:
        return "guard: no record (off, or fewer than 32 drafts judged)"
    trips = ", ".join(guard["trips"]) if guard["trips"] else "none (silent)"
    return f"guard: {guard['drafts_seen']} drafts judged, trips: {trips}"


def _engine_ok(res: dict, what: str) -> None:
    if "outputs" in res:
        return
    tail = [line for line in res.get("tail", "").splitlines() if line.strip()][-8:]
    raise SurgeryError(diag("SRG364", f"{what} gave no result: {res.get('error')}; last lines: " + " | ".join(tail)[-1500:],
                            hint="codes in the output: " + (", ".join(res.get("codes") or ()) or "none")))


def render(result: dict) -> str:
    d = result["decode"]
    lines = [f"recipe {result['recipe']} in SGLang {result['sglang']} ({result['algorithm']}): "
             f"{'OK' if result['ok'] else 'FAILED'}",
             f"  target {result['target']}", f"  draft  {result['draft']}",
             *([f"  built-in pair for SGLang: {result['pair_variant']['because']}"] if result.get("pair_variant") else []),
             *([f"  served: {result['served']['changed']['because']}"] if result["served"]["changed"] else []),
             *(f"  hook: {line}" for line in result["plugin"]["log_lines"] or ()),
             f"  {guard_line(result.get('guard'))}",
             f"  verified {result['verified']}; live wiring SGLang's own {result['wiring']['sglang_own']}, after the "
             f"recipe {result['wiring']['after_recipe']}",
             f"  output identical to target-only greedy ({result.get('dtype')}): "
             f"{'yes' if d['identical'] else 'up to ties within the measured noise' if d['identical_up_to_ties'] else 'NO'}"
             + ("" if d["identical"] else f" (prompts {d['mismatched_prompts']})"),
             *(f"    {greedyties.divergence_line(v)}" for v in d.get("divergences") or ()),
             *([f"    SRG369 {d['tolerance_line']}"] if d.get("tolerance_line") else []),
             f"  drafted {d['drafted']}, accepted {d['accepted']}, acceptance {d['acceptance_rate']:.1%}, accept length "
             f"{'-' if d['accept_length'] is None else format(d['accept_length'], '.2f')} ({d['prompts']} prompts, "
             "SGLang's meta_info counters)"]
    return "\n".join(lines)


def run_apply_sglang(options: ApplyOptions, out) -> int:
    from ..sglang.engine import cuda_available

    device = "cuda" if cuda_available() else "cpu"
    why = device_blocker(device, importlib.util.find_spec("sglang") is not None)
    if why is not None:
        raise SurgeryError(diag("SRG360", f"cannot run {options.recipe} in SGLang here: {why}",
                                hint="docs/sglang.md: the install attempts, the errors, and the plan-level comparison "
                                     "with vLLM (`python -m surgery.sglang.compare`); run the recipe with --engine "
                                     "vllm or hf meanwhile"))
    if options.pp != 1 or options.tp != 1 or options.ablate:
        raise SurgeryError(diag("SRG364", "--engine sglang runs one engine on one device, without --ablate "
                                "(the ablation rows: bench/gpu/sglang_gpu.py)"))
    say = (lambda m: sys.stderr.write(f"[surgery] {m}\n")) if (sys.stderr.isatty() and options.progress) \
        else (lambda _m: None)
    dtype = dtype_for(options.dtype)
    result = run_sglang_apply(options.recipe, options.target, options.draft, max_tokens=options.max_new_tokens, progress=say,
                              dtype=dtype)
    out.write((json.dumps(result, indent=2) if options.json else render(result)) + "\n")
    return EXIT_OK if result["ok"] else EXIT_INVALID
