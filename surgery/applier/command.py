"""`surgery apply`: load a pair with HF transformers, resolve, apply, verify, and prove the wiring
by speculative decoding against plain greedy decoding (optionally with an ablation per step)."""
from __future__ import annotations

import json
import sys
import time
from typing import Any

from ..diagnostics import EXIT_INVALID, EXIT_OK, Location, SurgeryError, diag


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
    import os

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


def _model_folder(path) -> "Path":
    from pathlib import Path

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


# what surgery's HF loader (surgery/hf/pair.py load_pair) builds: Gemma 4 targets and their assistants
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


def decode_check(target, draft, prompts: list[list[int]], max_new_tokens: int, num_draft_tokens: int) -> dict:
    """Speculative vs plain greedy on every prompt; the totals the report shows."""
    from ..hf.specdec import greedy_generate, speculative_generate

    identical = True
    drafted = accepted = target_fwd = greedy_fwd = tokens = 0
    spec_s = greedy_s = 0.0
    mismatches = []
    for i, ids in enumerate(prompts):
        t0 = time.perf_counter()
        ref = greedy_generate(target, ids, max_new_tokens)
        greedy_s += time.perf_counter() - t0
        res = speculative_generate(target, draft, ids, max_new_tokens, num_draft_tokens)
        spec_s += res.wall_s
        if list(res.tokens) != list(ref):
            identical = False
            mismatches.append(i)
        drafted += res.drafted
        accepted += res.accepted
        target_fwd += res.target_forwards
        greedy_fwd += len(ref)
        tokens += len(res.tokens)
    return {
        "identical": identical, "prompts": len(prompts), "tokens": tokens, "drafted": drafted, "accepted": accepted,
        "acceptance_rate": (accepted / drafted) if drafted else 0.0, "num_draft_tokens": num_draft_tokens,
        "target_forwards": target_fwd, "greedy_target_forwards": greedy_fwd,
        "target_forwards_saved": greedy_fwd - target_fwd, "wall_s": round(spec_s, 4),
        "greedy_wall_s": round(greedy_s, 4), "mismatched_prompts": mismatches,
    }


WRONG_MAP_VARIANT = "share_kv with a wrong map (first of each type)"


def ablation(plan, draft, target, report, prompts, args, progress, check=None) -> list[dict]:
    """Remove each recipe step in turn (and all of them), rerun the decoding check, restore.

    Besides the removals, one variant keeps share_kv but with a deliberately wrong map (the first
    unshared target layer of each type instead of the last): in HF an unwired draft layer reads
    ``shared_kv_states[layer_type]``, which transformers fills from the same layers as the
    gemma4-mtp rule, so removing share_kv alone changes nothing there; the wrong map shows what
    the map is worth. Rows may carry a ``note`` saying why a removal changes nothing."""
    from . import apply_plan, rollback, verify_plan

    rows = []
    steps = sorted({o.step for o in plan.operations})
    mutations_per_step: dict[int, int] = {}
    for p in report.prepared:
        mutations_per_step[p.op.step] = mutations_per_step.get(p.op.step, 0) + len(p.mutations)
    variants = [(f"without step {s}: " + _step_label(plan, s), plan.without_step(s),
                 _removal_note(plan, s, target, draft, mutations_per_step)) for s in steps]
    wrong = _wrong_map_variant(plan, target)
    if wrong is not None:
        variants.append((WRONG_MAP_VARIANT, wrong[0], wrong[1]))
    variants.append(("without any wiring", None, None))
    rollback(report)
    try:
        for label, variant, note in variants:
            progress(f"ablation: {label}")
            row: dict[str, Any] = {"variant": label}
            sub = None
            try:
                if variant is not None:
                    sub = apply_plan(variant, draft, target, strict=not getattr(args, "no_strict", False))
                    row["verified"] = verify_plan(variant, draft, target, report=sub).ok
                d = (check or decode_check)(target, draft, prompts, args.max_new_tokens, args.num_draft_tokens)
                row.update({"runs": True, "acceptance_rate": d["acceptance_rate"], "identical": d["identical"],
                            "drafted": d["drafted"], "accepted": d["accepted"]})
            except Exception as exc:  # a removed step can make the draft unrunnable: that is the finding
                row.update({"runs": False, "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
            finally:
                if sub is not None:
                    rollback(sub)
            if note:
                row["note"] = note
            rows.append(row)
    finally:
        # leave the pair wired as the main report says
        apply_plan(plan, draft, target, strict=not getattr(args, "no_strict", False))
    return rows


def _unshared_layer_types(target) -> list[str]:
    from ..hf.kvrouting import first_kv_shared_layer, text_config

    cfg = text_config(target.config)
    return list(cfg.layer_types[: first_kv_shared_layer(cfg)])


def _removal_note(plan, step: int, target, draft, mutations_per_step: dict[int, int]) -> str | None:
    """Why removing this step cannot change the decoding check in HF, when that is known up front."""
    ops = [o for o in plan.operations if o.step == step]
    if ops and all(o.op == "share_kv" for o in ops):
        from ..hf.kvrouting import default_kv_sources, text_config

        try:
            defaults = default_kv_sources(target.config)
            draft_types = text_config(draft.config).layer_types
            same = all(defaults.get(draft_types[o.draft_layer]) == o.target_layer for o in ops)
        except (AttributeError, IndexError, TypeError, ValueError):
            return None
        if same:
            pairs = ", ".join(f"{t} -> {j}" for t, j in sorted(defaults.items()))
            return ("acceptance cannot change: without share_kv an HF draft layer reads "
                    f"shared_kv_states[layer_type], which transformers fills from the same target layers as this "
                    f"map ({pairs}); see the wrong-map row for what the map is worth")
    if ops and mutations_per_step.get(step, 0) == 0:
        return "this step only checks (no mutation): removing it changes what verify proves, not what runs"
    return None


def _wrong_map_variant(plan, target):
    """(plan, note) with every share_kv op pointed at the FIRST unshared target layer of its type
    instead of the mapped one, or None when that changes nothing (one unshared layer per type)."""
    from dataclasses import replace

    try:
        unshared = _unshared_layer_types(target)
    except (AttributeError, TypeError, ValueError):
        return None
    first = {}
    for j, t in enumerate(unshared):
        first.setdefault(t, j)
    ops, moved = [], {}
    for o in plan.operations:
        if o.op == "share_kv" and o.target_layer is not None and o.target_layer < len(unshared):
            t = unshared[o.target_layer]
            j = first[t]
            if j != o.target_layer:
                moved[t] = (o.target_layer, j)
                o = replace(o, target_layer=j, id=f"share_kv:{o.map}:{o.draft_layer}->{j}")
        ops.append(o)
    if not moved:
        return None
    note = ("wrong on purpose: the first unshared target layer of each type instead of the mapped one; "
            + "; ".join(f"{t}: target {j} instead of {old}" for t, (old, j) in sorted(moved.items())))
    unchanged = sorted({unshared[o.target_layer] for o in plan.operations if o.op == "share_kv"
                        and o.target_layer is not None and o.target_layer < len(unshared)} - set(moved))
    if unchanged:
        note += f" ({', '.join(unchanged)} unchanged: the target has only one unshared layer of that type)"
    return replace(plan, operations=tuple(ops)), note


def _step_label(plan, step: int) -> str:
    from ..ops.registry import UNITS

    first = next(o for o in plan.operations if o.step == step)
    return UNITS[first.op].label(first)


def run_apply(args, out) -> int:
    import torch  # noqa: F401  (fail early with the real import error if the apply extra is missing)

    from ..facts import read_facts
    from ..bytevocab import encode
    from ..hf.loader import load_pair
    from ..hf.pair import ensure_tiny_pair
    from ..pairs import DEFAULT_PROMPTS, held_out_prompts
    from ..hf.standalone import assisted_check, is_standalone, load_standalone_pair, prompts_for
    from ..plan import Runtime, render_table
    from ..recipe import load_recipe
    from ..resolver import resolve
    from . import apply_plan, verify_plan

    progress = Progress(not args.no_progress)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    recipe = load_recipe(args.recipe)
    if (args.target is None) != (args.draft is None):
        raise SurgeryError(diag("SRG011", "give both --target and --draft, or neither (built-in tiny pair)"))
    held_out = held_out_prompts() if args.target is None else ()
    if args.target is None:
        progress("preparing the built-in tiny Gemma 4 pair")
        target_dir, draft_dir = ensure_tiny_pair(progress=progress)
    else:
        target_dir, draft_dir = args.target, args.draft
    timings["pair_s"] = time.perf_counter() - t0

    t = time.perf_counter()
    runtime = Runtime(engine="hf", pp_size=args.pp, tp_size=args.tp, kv_cache_dtype=args.kv_cache_dtype)
    draft_facts, target_facts = read_facts(draft_dir), read_facts(target_dir)
    plan = resolve(recipe, draft_facts, target_facts, runtime)
    timings["resolve_s"] = time.perf_counter() - t
    if not plan.ok:
        raise SurgeryError(plan.errors)
    check_loadable(target_facts, draft_facts, plan.recipe)

    progress("loading models")
    if not progress.enabled:  # transformers' own "Loading weights" bars would land in pipes and logs
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    t = time.perf_counter()
    device, dtype = _device(args.device), _dtype(args.dtype)
    standalone = plan.recipe in HF_STANDALONE_RECIPES and is_standalone(draft_facts)  # transformers' assisted generation
    loader = load_standalone_pair if standalone else load_pair
    target, draft = load_models(loader, target_dir, draft_dir, device=device, dtype=dtype)
    timings["load_s"] = time.perf_counter() - t

    t = time.perf_counter()
    report = apply_plan(plan, draft, target, strict=not args.no_strict)
    timings["apply_s"] = time.perf_counter() - t
    t = time.perf_counter()
    verification = verify_plan(plan, draft, target, report=report)
    timings["verify_s"] = time.perf_counter() - t

    # the built-in pair is measured on text it never trained on; a user's pair on generic code openings
    texts, prompt_set = (held_out, "held-out") if held_out else (DEFAULT_PROMPTS, "default")
    texts = texts[: max(1, args.prompts)]
    if standalone:
        prompts, prompt_source = prompts_for(target_dir, texts, target.config.get_text_config().vocab_size)
        check = assisted_check
    else:
        prompts, prompt_source, check = [encode(p) for p in texts], "built-in tiny tokenizer", decode_check
    progress(f"decoding {len(prompts)} prompts (greedy and speculative, k={args.num_draft_tokens})")
    decode = check(target, draft, prompts, args.max_new_tokens, args.num_draft_tokens)
    decode["prompt_ids"] = prompt_source
    decode["prompt_set"] = prompt_set
    abl = ablation(plan, draft, target, report, prompts, args, progress, check) if args.ablate else None
    progress.done()
    ok = verification.ok and decode["identical"]
    result = {"ok": ok, "verified": verification.ok, "device": device, "dtype": args.dtype,
              "target": str(target_dir), "draft": str(draft_dir), "plan": plan.to_dict(), "apply": report.to_dict(),
              "verify": verification.to_dict(), "decode": decode, "ablation": abl,
              "timings": {k: round(v, 4) for k, v in timings.items()}}
    if args.json:
        out.write(json.dumps(result, indent=2) + "\n")
    else:
        out.write(_render(plan, report, verification, decode, abl, timings, render_table) + "\n")
    return EXIT_OK if ok else EXIT_INVALID


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
              f"  wall time {d['wall_s']:.2f} s speculative vs {d['greedy_wall_s']:.2f} s greedy"]
    if abl is not None:
        lines += ["", "ablation (each recipe step removed in turn)"]
        for row in abl:
            if row["runs"]:
                lines.append(f"  {row['variant']:<50} acceptance {row['acceptance_rate']:6.1%}  identical "
                             f"{'yes' if row['identical'] else 'NO'}")
            else:
                lines.append(f"  {row['variant']:<50} draft cannot run: {row['error']}")
            if row.get("note"):
                lines.append(f"      note: {row['note']}")
    lines += ["", "timings: " + ", ".join(f"{k} {v:.3f}" for k, v in timings.items())]
    return "\n".join(lines)
