"""`surgery apply` (the HF engine): load a pair with HF transformers, resolve, apply, verify, and
prove the wiring by speculative decoding against plain greedy decoding (optionally with an ablation
per step, surgery/commands/hf_ablation.py). `--engine vllm` is surgery/commands/vllm_apply.py."""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

from ..text.diagnostics import EXIT_INVALID, EXIT_OK, Location, SurgeryError, diag
from ..options import ApplyOptions
from ..pairs import DEFAULT_PROMPTS, GEMMA_PAIR, builtin_pair, held_out_prompts
from ..recipe import load_recipe
from ..tinymodels.tinypair import ensure_tiny_pair
from ..tinymodels.bytevocab import encode
from ..facts import read_facts
from ..plan import Runtime, render_table
from ..resolver import resolve
from .. import applier  # applier.verify_plan read when called: tests wrap it (tests/cli/test_apply_cli.py)
from ..facts.modelref import local_snapshot
from .hf_ablation import ablation
from ..hf import guard as hf_guard
from ..guard.expectation import describe_source
from ..guard.run import line as guard_line


class Progress:
    """Progress lines on stderr, only for a terminal (pipes and CI logs stay clean)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled and sys.stderr.isatty()

    def __call__(self, message: str) -> None:
        if self.enabled:
            sys.stderr.write(f"\r\x1b[K[surgery] {message}" if _color() else f"[surgery] {message}\n")
            sys.stderr.flush()

    def done(self) -> None:
        if self.enabled and _color():
            sys.stderr.write("\r\x1b[K")


def _color() -> bool:
    return sys.stderr.isatty() and not os.environ.get("NO_COLOR")


def _device(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise SurgeryError(diag("SRG011", f"--device {name} but CUDA is not available"))
    return name


def _dtype(name: str):
    import torch

    table = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
             "float16": torch.float16, "fp16": torch.float16}
    if name not in table:
        raise SurgeryError(diag("SRG011", f"unknown --dtype {name!r}", hint=f"one of {', '.join(table)}"))
    return table[name]


def _model_folder(path):
    p = Path(path)
    return p.parent if p.is_file() else p


def check_weights(side: str, folder) -> None:
    """SRG404 unless `folder` holds readable safetensors: at least one file, each with a valid
    header that the file covers (a truncated download fails here, not as a loader traceback)."""
    from safetensors import safe_open

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise SurgeryError(diag("SRG404", f"{side} folder {folder} has no *.safetensors weights",
                                Location(file=str(folder)), hint="only safetensors checkpoints are loaded (no pickle)"))
    for f in files:
        try:
            with safe_open(str(f), framework="pt") as fh:
                fh.keys()
        except Exception as exc:  # SafetensorError, OSError, ...: whatever the cause, name the file
            raise SurgeryError(diag("SRG404", f"{side} weights {f.name} are unreadable ({type(exc).__name__}: {exc})",
                                    Location(file=str(f)),
                                    hint="the file is truncated or corrupted; re-download or rebuild it")) from exc


SMALL_HIDDEN = 1024  # below this width a matmul is too small to gain from a second thread


def cpu_threads(asked: int | None, device, target) -> int | None:
    """torch's intra-op threads for the decoding check on CPU (None: left as torch set them).

    Why one thread for small models: at the built-in pair's width every forward is hundreds of tiny
    ops, and splitting each across threads costs more in synchronisation than it saves. When the
    machine's cores are shared it is far worse: measured with bench/hf_round_profile.py on the 2-core
    CI-sized machine under load, greedy took 62.6 s with 2 threads and 4.6 s with 1, and speculative
    decoding fell behind greedy (74.3 s vs 62.6 s) where with 1 thread it is 1.48x ahead. A user's
    real-size model on CPU keeps torch's default unless --threads says otherwise."""
    import torch

    if str(device) != "cpu" and getattr(device, "type", None) != "cpu":
        return None
    if asked is not None:
        torch.set_num_threads(asked)
        return asked
    width = getattr(target.config.get_text_config(), "hidden_size", None)
    if isinstance(width, int) and width < SMALL_HIDDEN:
        torch.set_num_threads(1)
        return 1
    return None


def load_models(load_pair, target_dir, draft_dir, device, dtype):
    """load_pair with coded errors: unreadable weights are SRG404 naming the side and file."""
    target_dir, draft_dir = _model_folder(target_dir), _model_folder(draft_dir)
    for side, folder in (("target", target_dir), ("draft", draft_dir)):
        check_weights(side, folder)
    try:
        return load_pair(target_dir, draft_dir, device=device, dtype=dtype)
    except SurgeryError:
        raise
    except Exception as exc:  # the loader's own error (corrupt tensor data, missing tensors, ...)
        raise SurgeryError(diag("SRG404", f"could not load the pair from {target_dir} and {draft_dir} "
                                f"({type(exc).__name__}: {str(exc)[:300]})", Location(file=str(target_dir)))) from exc


# what surgery's HF loader (surgery/hf/loader.py load_pair) builds: Gemma 4 targets and their assistants
HF_LOADABLE = {"target": ("gemma4", "gemma4_text"), "draft": ("gemma4_assistant",)}


# recipes whose pairs are two complete causal LMs: loaded with AutoModelForCausalLM (surgery/hf/standalone.py)
# and checked through transformers' standard assisted generation
HF_STANDALONE_RECIPES = ("draft-model",)


def check_loadable(target_facts, draft_facts, recipe_name: str | None = None) -> None:
    """SRG408 before any weight is read when the HF loader cannot build this pair (it would fail
    inside transformers with an unrelated error, e.g. KeyError 'full_attention' for Llama).
    Standalone drafts (the draft-model recipe) load through transformers' own Auto classes."""
    from ..hf.standalone import is_standalone

    if recipe_name in HF_STANDALONE_RECIPES and is_standalone(draft_facts):
        return
    for side, facts in (("target", target_facts), ("draft", draft_facts)):
        types = {facts.model_type, facts.text_model_type} - {None}
        if not types & set(HF_LOADABLE[side]):
            raise SurgeryError(diag("SRG408", f"the HF loader cannot load this pair: {side} model_type "
                                    f"{facts.model_type!r} (it loads {side}s of type {', '.join(HF_LOADABLE[side])}, "
                                    f"and standalone drafts with the {', '.join(HF_STANDALONE_RECIPES)} recipe)",
                                    Location(file=facts.source)))


def refuse_hf_without_pair(recipe_ref: str) -> None:
    """`surgery apply RECIPE` (HF) without model folders runs the built-in Gemma 4 pair, which only
    `gemma4-mtp` fits; for a family whose built-in pair is a vLLM pair, say so (SRG453) instead of
    resolving the recipe against the wrong models."""
    name = load_recipe(recipe_ref).name
    if name == "gemma4-mtp":
        return
    pair = builtin_pair(name)
    where = (f"its miniature pair runs in vLLM, method {pair.method}" if pair is not None
             else "and no built-in pair exists for it yet")
    hint = (f"surgery apply {name} --engine vllm" if pair is not None
            else "pass --target and --draft folders")
    raise SurgeryError(diag("SRG453", f"the HF path's built-in pair (Gemma 4) fits gemma4-mtp only, not {name}: {where}",
                            hint=hint))


def _pair_folders(options: ApplyOptions, progress) -> tuple:
    """(target, draft) as given, or the built-in tiny Gemma 4 pair's folders (built once, cached)."""
    if (options.target is None) != (options.draft is None):
        raise SurgeryError(diag("SRG011", "give both --target and --draft, or neither (built-in tiny pair)"))
    if options.target is None:
        progress("preparing the built-in tiny Gemma 4 pair")
        return ensure_tiny_pair(progress=progress)
    return options.target, options.draft


def _prompts_and_check(options: ApplyOptions, held_out, standalone: bool, target_dir, target):
    """(prompts, where their ids came from, the prompt set, the decoding check): the built-in pair is
    measured on text it never trained on, a user's pair on generic code openings; a standalone draft
    through transformers' assisted generation."""
    from ..hf.specdec import decode_check
    from ..hf.standalone import assisted_check, prompts_for

    texts, prompt_set = (held_out, "held-out") if held_out else (DEFAULT_PROMPTS, "default")
    texts = texts[: max(1, options.prompts)]
    if standalone:
        prompts, source = prompts_for(target_dir, texts, target.config.get_text_config().vocab_size)
        return prompts, source, prompt_set, assisted_check
    return [encode(p) for p in texts], "built-in tiny tokenizer", prompt_set, decode_check


def run_apply_hf(options: ApplyOptions, out) -> int:
    """`surgery apply --engine hf`: three draft tokens unless told, the built-in pair only for a recipe that has one."""
    if options.num_draft_tokens is None:  # unset: 3 (the vLLM path may take a speculators file's k instead)
        options = replace(options, num_draft_tokens=3)
    if options.target is None and options.draft is None:
        refuse_hf_without_pair(options.recipe)

    return run_apply(options, out)


def run_apply(options: ApplyOptions, out) -> int:
    import torch  # fail early with the real import error if the apply extra is missing

    from ..hf.loader import load_pair
    from ..hf.standalone import is_standalone, load_standalone_pair

    progress = Progress(options.progress)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    recipe = load_recipe(options.recipe)
    target_dir, draft_dir = _pair_folders(options, progress)
    held_out = held_out_prompts() if options.target is None else ()
    timings["pair_s"] = time.perf_counter() - t0

    t = time.perf_counter()
    runtime = Runtime(engine="hf", pp_size=options.pp, tp_size=options.tp, kv_cache_dtype=options.kv_cache_dtype)
    draft_facts, target_facts = read_facts(draft_dir), read_facts(target_dir)
    plan = resolve(recipe, draft_facts, target_facts, runtime)
    timings["resolve_s"] = time.perf_counter() - t
    if not plan.ok:
        raise SurgeryError(plan.errors)
    if options.target is not None:  # hub ids: the whole checkpoint, at the commits the plan was resolved at
        target_dir = local_snapshot(target_facts.model, "apply --engine hf", download=True)
        draft_dir = local_snapshot(draft_facts.model, "apply --engine hf", download=True)
    check_loadable(target_facts, draft_facts, plan.recipe)
    guard_raw, guard_method = _guard_inputs(options, recipe, plan.recipe, target_dir, draft_dir)

    progress("loading models")
    if not progress.enabled:  # transformers' own "Loading weights" bars would land in pipes and logs
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    t = time.perf_counter()
    dtype_name = options.dtype or "float32"
    device, dtype = _device(options.device), _dtype(dtype_name)
    standalone = plan.recipe in HF_STANDALONE_RECIPES and is_standalone(draft_facts)  # transformers' assisted generation
    loader = load_standalone_pair if standalone else load_pair
    target, draft = load_models(loader, target_dir, draft_dir, device=device, dtype=dtype)
    timings["load_s"] = time.perf_counter() - t
    saved_threads = torch.get_num_threads()  # process-wide: put back at the end for a library caller
    threads = cpu_threads(options.threads, device, target)

    try:
        t = time.perf_counter()
        report = applier.apply_plan(plan, draft, target, strict=options.strict)
        timings["apply_s"] = time.perf_counter() - t
        t = time.perf_counter()
        verification = applier.verify_plan(plan, draft, target, report=report)
        timings["verify_s"] = time.perf_counter() - t

        prompts, prompt_source, prompt_set, check = _prompts_and_check(options, held_out, standalone, target_dir,
                                                                       target)
        progress(f"decoding {len(prompts)} prompts (greedy and speculative, k={options.num_draft_tokens}"
                 + (f", {threads} torch thread{'s' if threads != 1 else ''}" if threads else "") + ")")
        decode = check(target, draft, prompts, options.max_new_tokens, options.num_draft_tokens)
        decode["prompt_ids"] = prompt_source
        decode["prompt_set"] = prompt_set
        decode["torch_threads"] = torch.get_num_threads()

        def judged(d: dict) -> dict:  # the acceptance guard on a check's per-draft counts
            return hf_guard.verdict(d, guard_raw, options.num_draft_tokens, guard_method)

        decode["guard"] = judged(decode)
        abl = (ablation(plan, draft, target, report, prompts, options, progress, check, guard=judged)
               if options.ablate else None)
    finally:
        torch.set_num_threads(saved_threads)
    progress.done()
    decode.pop("per_draft", None)  # judged above; the verdict carries the per-position rates
    stopped = decode["guard"]["status"] == "tripped" and decode["guard"]["action"] == "fail"
    ok = verification.ok and decode["identical"] and not stopped
    result = {"ok": ok, "verified": verification.ok, "device": device, "dtype": dtype_name,
              "target": str(target_dir), "draft": str(draft_dir), "plan": plan.to_dict(), "apply": report.to_dict(),
              "verify": verification.to_dict(), "decode": decode, "ablation": abl,
              "timings": {k: round(v, 4) for k, v in timings.items()}}
    if options.json:
        out.write(json.dumps(result, indent=2) + "\n")
    else:
        out.write(_render(plan, report, verification, decode, abl, timings, render_table) + "\n")
    return EXIT_OK if ok else EXIT_INVALID


def _guard_inputs(options: ApplyOptions, recipe, recipe_name: str, target_dir, draft_dir) -> tuple:
    """(the `guard:` settings this run is judged with, the drafter's method for break-even), checked
    before any weight is read (SRG475 / SRG486). The built-in pair's measured `expect.hf` applies
    when this run is that pair (surgery/hf/guard.py)."""
    builtin = GEMMA_PAIR if options.target is None else hf_guard.builtin_recipe_of(target_dir, draft_dir)
    raw = hf_guard.settings(builtin if builtin == recipe_name else None, recipe)
    method = hf_guard.method_of(recipe_name)
    hf_guard.verdict({}, raw, options.num_draft_tokens, method)  # validates the settings now
    return raw, method


def _guard_lines(verdict: dict) -> list[str]:
    lines = [f"  acceptance guard: {guard_line(verdict)}; per-position acceptance "
             + "[" + ", ".join(f"{p:.3f}" for p in verdict["per_position"]) + "]"
             + (f", mean accepted length {verdict['mean_length']:.2f}" if verdict.get("mean_length") else "")
             + (f", break-even {verdict['break_even']:.2f}" if verdict.get("break_even") else "")]
    if verdict.get("expect"):
        lines.append(f"    expected {verdict['expect']}"
                     + (f" ({describe_source(verdict['reference'])})" if verdict.get("reference") else ""))
    if verdict["status"] == "not judged":
        lines.append(f"    {diag('SRG487', verdict['why']).render()}")
    for t in verdict["trips"]:
        lines.append(f"    {t['code']} {t['message']}")
    return lines


def _render(plan, report, verification, decode, abl, timings, render_table) -> str:
    lines = [render_table(plan), "", "applied"]
    lines.append(f"  {len(report.applied)} operation(s) in {report.seconds * 1000:.1f} ms"
                 + (f"; not applicable to HF: {len(report.not_applicable)}" if report.not_applicable else ""))
    for d in report.not_applicable:
        lines.append(f"  {d.code} {d.message}")
    for op_id, why in report.decisions.items():
        lines.append(f"  {op_id}: {why}")
    lines += ["", f"verification: {'PASS' if verification.ok else 'FAIL'} ({len(verification.checks)} checks)"]
    for c in verification.checks:
        lines.append(f"  [{'pass' if c.ok else 'FAIL'}] {c.op_id}: {c.name}" + (f"  ({c.detail})" if not c.ok else ""))
    d = decode
    lines += ["", f"decoding check (speculative vs plain greedy{'; ' + d['method'] if d.get('method') else ''})",
              f"  prompts {d['prompts']} ({d.get('prompt_set', 'default')}), tokens generated {d['tokens']}, "
              f"draft tokens per step {d['num_draft_tokens']}",
              f"  output identical to greedy: {'yes' if d['identical'] else 'NO (prompts ' + str(d['mismatched_prompts']) + ')'}",
              f"  drafted {d['drafted']}, accepted {d['accepted']}, acceptance rate {d['acceptance_rate']:.1%}",
              f"  target forward passes {d['target_forwards']} vs {d['greedy_target_forwards']} greedy "
              f"(saved {d['target_forwards_saved']})",
              f"  wall time {d['wall_s']:.2f} s speculative vs {d['greedy_wall_s']:.2f} s greedy"
              + (f" ({d['torch_threads']} torch thread{'s' if d['torch_threads'] != 1 else ''})"
                 if d.get("torch_threads") else "")]
    if d.get("guard"):
        lines += _guard_lines(d["guard"])
    if abl is not None:
        lines += ["", "ablation (each recipe step removed in turn)"]
        for row in abl:
            if row["runs"]:
                lines.append(f"  {row['variant']:<50} acceptance {row['acceptance_rate']:6.1%}  identical "
                             f"{'yes' if row['identical'] else 'NO'}"
                             + (f"  guard {guard_line(row['guard'])}" if row.get("guard") else ""))
            else:
                lines.append(f"  {row['variant']:<50} draft cannot run: {row['error']}")
            if row.get("note"):
                lines.append(f"      note: {row['note']}")
    lines += ["", "timings: " + ", ".join(f"{k} {v:.3f}" for k, v in timings.items())]
    return "\n".join(lines)
