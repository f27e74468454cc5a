"""`surgery probe --tune` and `surgery probe --check` (issue 66): the pair as given (no question asked, no
candidate built), on the prompts `surgery probe` would decode. The logic is surgery/probe/tune.py (the draft
length by measurement) and surgery/probe/regression.py (the acceptance regression check); this module picks
the engine and the expectation, and hands over. The options come built from the command line
(surgery/commands/probe.py `mode_options`)."""
from __future__ import annotations

import sys
from pathlib import Path

from ..probe.expected import expected_for
from ..probe.measure_hf import HFMeasurer
from ..probe.measure_vllm import VLLMMeasurer
from ..probe.pairmatch import TARGET, recognise
from ..probe.regression import RegressionOptions, run_check
from ..probe.tune import TuneOptions, run_tune
from ..text.diagnostics import Location, SurgeryError, diag


def run_mode(opts: TuneOptions | RegressionOptions, out, recipe, target: Path, draft: Path, pair, method, spec_extra,
             prompts, source: str, engine: str, device: str = "cpu", threads: int | None = None,
             given: bool = False, progress: bool = False) -> int:
    """The exit code of the mode `opts` asks for. `given`: the pair came as --target / --draft folders."""
    say = (lambda m: sys.stderr.write(f"[surgery] {m}\n")) if progress else (lambda m: None)
    if isinstance(opts, TuneOptions):
        if engine != "vllm":
            raise SurgeryError(diag("SRG494", "--tune measures on vLLM (its step costs and per-position counters)",
                                    Location(file=str(draft)), hint=f"surgery probe {recipe.name} --engine vllm --tune"))
        return run_tune(opts, out, recipe, target, draft, method, spec_extra, prompts, source, progress=say)
    measurer = HFMeasurer(recipe, target, device=device, threads=threads) if engine == "hf" else \
        VLLMMeasurer(recipe, target, method, spec_extra)
    # a built-in pair's figures hold only for its own weights: not for another head on its target (pairmatch.py)
    how = recognise(recipe.name, Path(target), Path(draft))[1] if given and pair is not None else None
    return run_check(opts, out, measurer, draft, prompts, source,
                     expected_for(recipe, pair if how != TARGET else None, engine))
