"""`surgery probe --tune` and `surgery probe --check` (issue 66): the pair as given (no question asked, no
candidate built), on the prompts `surgery probe` would decode. The logic is surgery/probe/tune.py (the draft
length by measurement) and surgery/probe/regression.py (the acceptance regression check); this module picks
the engine and the expectation, and hands over."""
from __future__ import annotations

import sys
from pathlib import Path

from ..probe.expected import expected_for
from ..probe.measure_hf import HFMeasurer
from ..probe.measure_vllm import VLLMMeasurer
from ..probe.pairmatch import TARGET, recognise
from ..probe.regression import run_check
from ..probe.tune import run_tune
from ..text.diagnostics import Location, SurgeryError, diag


def run_mode(args, out, recipe, target: Path, draft: Path, pair, method, spec_extra, prompts, source: str) -> int:
    """The exit code of the mode asked (`args.tune` or `args.check`)."""
    progress = (lambda m: sys.stderr.write(f"[surgery] {m}\n")) if sys.stderr.isatty() and not args.no_progress \
        else (lambda m: None)
    if args.tune:
        if args.engine != "vllm":
            raise SurgeryError(diag("SRG494", "--tune measures on vLLM (its step costs and per-position counters)",
                                    Location(file=str(draft)), hint=f"surgery probe {recipe.name} --engine vllm --tune"))
        return run_tune(args, out, recipe, target, draft, method, spec_extra, prompts, source, progress=progress)
    measurer = HFMeasurer(recipe, target, device=args.device, threads=args.threads) if args.engine == "hf" else \
        VLLMMeasurer(recipe, target, method, spec_extra)
    # a built-in pair's figures hold only for its own weights: not for another head on its target (pairmatch.py)
    how = recognise(recipe.name, Path(target), Path(draft))[1] if args.target is not None and pair is not None else None
    expected = expected_for(recipe, pair if how != TARGET else None, args.engine)
    return run_check(args, out, measurer, draft, prompts, source, expected)
