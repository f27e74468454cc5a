"""One candidate on the HF engine (Gemma 4 target + assistant, surgery/hf/): load the pair with the
candidate's draft folder, apply and verify the recipe's plan, decode each prompt speculatively.

Why prompt by prompt: the ranking needs each prompt's acceptance (stats.py). HF's loop reports no
per-position counts, so `per_position` stays None here; the mean length comes from the rounds.
The target is reloaded with each candidate (load_pair builds both; at miniature size it costs less
than a second, at real size the vLLM path or a GPU is the place for a probe)."""
from __future__ import annotations

from .. import applier
from ..facts import read_facts
from ..plan import Runtime
from ..resolver import resolve
from ..text.escape import shown
from .measure import MAX_ERROR, decode_prompts, error_text, release
from .stats import Measured, PromptResult

SMALL_HIDDEN = 1024  # below this width one torch thread is fastest (surgery/commands/hf_apply.py cpu_threads)


class HFMeasurer:
    engine = "hf"

    def __init__(self, recipe, target_dir, device: str = "cpu", dtype: str = "float32", threads: int | None = None):
        self.recipe, self.target_dir, self.device, self.dtype, self.threads = recipe, target_dir, device, dtype, threads
        self.release = release("transformers")

    def measure(self, draft_dir, prompts, max_new_tokens: int, k: int, keep_going) -> Measured:
        """Decode `prompts` in order; `keep_going(measured)` after each prompt (False: stop early)."""
        import torch

        from ..hf.generate import speculative_decoding
        from ..hf.loader import load_pair
        from ..hf.specdec import speculative_generate

        out = Measured()
        draft_facts, target_facts = read_facts(draft_dir), read_facts(self.target_dir)
        plan = resolve(self.recipe, draft_facts, target_facts, Runtime(engine="hf"))
        if not plan.ok:
            out.error = shown("; ".join(f"{d.code} {d.message}" for d in plan.errors), MAX_ERROR)
            out.stage, out.codes = "validate", tuple(sorted({d.code for d in plan.errors}))
            return out
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # transformers' "Loading weights" bars, once per candidate
        try:
            target, draft = load_pair(self.target_dir, draft_dir, device=self.device, dtype=getattr(torch, self.dtype))
        except Exception as exc:  # noqa: BLE001 - a candidate the loader cannot build is a finding, coded per row
            out.error, out.stage = error_text(exc), "start"
            return out
        saved = torch.get_num_threads()
        if target.device.type == "cpu":
            small = getattr(target.config.get_text_config(), "hidden_size", SMALL_HIDDEN) < SMALL_HIDDEN
            torch.set_num_threads(self.threads or (1 if small else saved))
        try:
            report = applier.apply_plan(plan, draft, target)
            out.verified = applier.verify_plan(plan, draft, target, report=report).ok

            def decode_one(ids) -> PromptResult:
                res = speculative_generate(target, draft, ids, max_new_tokens, k)
                return PromptResult(drafted=res.drafted, accepted=res.accepted,
                                    rounds=speculative_decoding.last_stats.rounds,
                                    target_forwards=res.target_forwards,  # the prefill included
                                    draft_forwards=res.draft_forwards)

            decode_prompts(out, prompts, decode_one, keep_going)
        except Exception as exc:  # noqa: BLE001 - a candidate the draft cannot run with is a finding
            out.error, out.stage = error_text(exc), "start"
        finally:
            torch.set_num_threads(saved)
        return out
