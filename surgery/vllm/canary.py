"""The start-up canary: a few greedy requests through the engine core after the warm-up, before traffic,
judged by the guard's rules on their own drafts (`additional_config.surgery.guard.canary`, issue 55).

Why: a release regression (the DSpark miniature: 80.8 % on vLLM 0.26, 25.3 % on 0.34, every wiring check
passing) shows only in acceptance, and the live window judges it only after `min_drafts` drafts of real
traffic. The canary decodes `prompts` x `tokens` greedily before the engine takes a request and judges the
drafts with `surgery.guard.judge.judge_once`: collapse, break-even and the expectation (SRG474, naming release and
reference), each only when the Wilson upper end over the canary's drafts is under its threshold (the support
bound, `expect_z`): a canary of 8 prompts x 48 tokens gives ~100 drafts on a healthy k=3 pair and ~380 on a
collapsed one, and the line says how many it judged.

Where: the end of `EngineCore.__init__` (scheduler, executor and KV caches built, the workers warmed up:
vllm/v1/engine/core.py), in-process (`LLM(...)`) and in a server's engine-core process when the class was
wrapped before the engine was built (a forked engine core inherits the wrap). A spawned engine core loads the
plugin inside `EngineCore.__init__` (its first line), too late for that call: there the canary runs at the
start of `EngineCoreProc.run_busy_loop`, after the READY handshake but before the loop takes its first input
(the API server's start-up calls wait in the input queue until then). Once per engine.

How: `EngineCore.preprocess_add_request` / `EngineCore.add_request` with `surgery-canary-*` request ids, then
`step_fn` + `post_step` until the scheduler has no request (the busy loop's own step); their outputs are
dropped, so the API server and its stat logger never see them. The scheduler's guard is paused meanwhile
(surgery/vllm/guard.py): the canary's drafts go to their own counts, not to the live window.

`action: fail` and a trip: in-process the `SurgeryError` with the rule's code stops `LLM(...)`; in an engine-core
process the coded line is logged and the process exits (SystemExit with exit code 3, no traceback), which the
API server reports as an engine that failed to start.
"""
from __future__ import annotations

import functools
import logging
import sys
import time
from typing import Any

from ..tinymodels.bytevocab import BYTE_OFFSET, encode
from ..text.diagnostics import Location, SurgeryError, diag
from ..guard.counts import Counts
from ..guard.judge import judge_once
from ..guard.keys import WHERE
from ..pairs import DEFAULT_PROMPTS
from .log import DIAGNOSTIC, get_logger

TARGET = ("vllm.v1.engine.core", "EngineCore", "__init__")
LATE_TARGET = ("vllm.v1.engine.core", "EngineCoreProc", "run_busy_loop")
_MARK = "__surgery_canary__"
_DONE = "_surgery_canary_done"
PREFIX = "surgery-canary-"
AT = Location(key_path=f"{WHERE}.canary")  # where the lines point: the setting that asked for the canary
EXIT_CODE = 3  # an engine-core process stopped by the canary (action: fail)


def install(module: str = "") -> list[str]:
    """Wrap EngineCore.__init__ and EngineCoreProc.run_busy_loop (idempotent); [] when vLLM lacks them
    (the canary then never runs: said once with SRG479 when one is configured, at `run` time)."""
    try:
        from vllm.v1.engine import core as mod  # TARGET[0], imported statically (tests/test_security.py)
    except Exception:  # noqa: BLE001 - a vLLM without the module: nothing to wrap
        return []
    wrapped = []
    for _, cls_name, method in (TARGET, LATE_TARGET):
        cls = getattr(mod, cls_name, None)
        fn = cls.__dict__.get(method) if cls is not None else None
        if fn is None:
            continue
        if not getattr(fn, _MARK, None):
            setattr(cls, method, _wrapper(fn))
        wrapped.append(f"{TARGET[0]}.{cls_name}.{method}")
    return wrapped


def uninstall() -> None:
    mod = sys.modules.get(TARGET[0])
    for _, cls_name, method in (TARGET, LATE_TARGET):
        cls = getattr(mod, cls_name, None) if mod is not None else None
        orig = getattr(cls.__dict__.get(method), _MARK, None) if cls is not None else None
        if orig is not None:
            setattr(cls, method, orig)


def _wrapper(orig):
    if orig.__name__ == "__init__":
        @functools.wraps(orig)
        def __init__(self, *args, **kwargs):
            orig(self, *args, **kwargs)
            maybe_run(self, "EngineCore.__init__")

        setattr(__init__, _MARK, orig)
        return __init__

    @functools.wraps(orig)
    def run_busy_loop(self, *args, **kwargs):
        maybe_run(self, "EngineCoreProc.run_busy_loop")
        return orig(self, *args, **kwargs)

    setattr(run_busy_loop, _MARK, orig)
    return run_busy_loop


def maybe_run(core: Any, where: str = "") -> dict | None:
    """Run the canary on this engine core once, if its guard is on and has a `canary`."""
    if getattr(core, _DONE, False) or getattr(core, "scheduler", None) is None:
        return None
    setattr(core, _DONE, True)
    from .guard import guard_run

    run = guard_run(core.scheduler)
    if run is None or run.guard is None or run.guard.config.canary is None:
        return None
    return run_canary(core, run, where)


def prompt_ids(vllm_config: Any, prompts) -> list[list[int]]:
    """The canary's prompts as token ids: ids as given; text through the model's tokenizer (transformers).
    "builtin" (surgery.pairs.DEFAULT_PROMPTS) on a model without tokenizer files (the built-in pairs, test
    models): the texts' bytes as ids (byte b -> b + 4, BOS first, surgery.tinymodels.bytevocab) when the vocabulary holds
    them, which is exactly the built-in pairs' byte vocabulary; user text without a tokenizer: SRG479."""
    builtin = prompts == "builtin"
    if builtin:
        prompts = DEFAULT_PROMPTS
    if all(not isinstance(p, str) for p in prompts):
        return [list(p) for p in prompts]
    mc = vllm_config.model_config
    try:
        from transformers import AutoTokenizer

        # no remote code, whatever the engine allows (tests/test_security.py): a tokenizer that needs it
        # leaves the canary unable to encode text prompts, said with SRG479
        tok = AutoTokenizer.from_pretrained(mc.tokenizer, revision=getattr(mc, "tokenizer_revision", None))
        return [list(tok(p)["input_ids"]) for p in prompts]
    except Exception as exc:  # noqa: BLE001 - no tokenizer files: bytes for the built-in prompts, or say why
        vocab = getattr(getattr(mc, "hf_text_config", None), "vocab_size", None) or 0
        if builtin and vocab >= BYTE_OFFSET + 256:
            return [encode(p) for p in prompts]
        raise SurgeryError(diag("SRG479", f"guard canary not run: cannot tokenize its prompts with {mc.tokenizer!r} "
                                f"({type(exc).__name__}: {str(exc)[:160]})", AT,
                                hint="give the canary's prompts as token-id lists")) from None


def _request(core: Any, request_id: str, ids: list[int], tokens: int):
    from vllm import SamplingParams
    from vllm.v1.engine import EngineCoreRequest

    sp = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True, detokenize=False)
    fields = dict(request_id=request_id, prompt_token_ids=ids, mm_features=None, sampling_params=sp,
                  pooling_params=None, eos_token_id=None, arrival_time=time.time(), lora_request=None,
                  cache_salt=None, data_parallel_rank=None)
    known = set(getattr(EngineCoreRequest, "__struct_fields__", fields))
    return EngineCoreRequest(**{k: v for k, v in fields.items() if k in known})


def add_requests(core: Any, ids: list[list[int]], tokens: int) -> None:
    """The canary's requests into the engine core's scheduler, as the busy loop adds a client's (the base
    class's methods: a DP engine's add_request also handles request waves, which the canary has none of)."""
    from vllm.v1.engine.core import EngineCore

    for i, prompt in enumerate(ids):
        request, wave = EngineCore.preprocess_add_request(core, _request(core, f"{PREFIX}{i}", prompt, tokens))
        EngineCore.add_request(core, request, wave)


def decode(core: Any, run: Any, ids: list[list[int]], tokens: int) -> Counts:
    """Decode the canary's requests to the end through the engine core's own step; their drafts, counted by
    the scheduler's guard wrapper while `run.paused`."""

    run.canary_counts = Counts.sized(run.guard.num_spec)
    run.paused = True
    try:
        add_requests(core, ids, tokens)
        limit = len(ids) * (tokens + 2) + 16  # one token per step at worst, plus prefill
        for _ in range(limit):
            if not core.scheduler.has_requests():
                break
            _outputs, executed = core.step_fn()  # outputs dropped: nobody asked for them
            core.post_step(executed)
        else:
            raise RuntimeError(f"the canary's requests did not finish in {limit} steps")
    finally:
        run.paused = False
    return run.canary_counts


def run_canary(core: Any, run: Any, where: str = "") -> dict:
    """Decode, judge, log the coded line, record it; `action: fail` with a trip stops the start."""
    log = get_logger()
    config = run.guard.config
    prompts, tokens = config.canary
    t0 = time.perf_counter()
    try:
        ids = prompt_ids(core.vllm_config, prompts)
        counts = decode(core, run, ids, tokens)
    except Exception as exc:  # noqa: BLE001 - the canary never breaks a start it could not judge
        d = exc.diagnostics[0] if isinstance(exc, SurgeryError) else \
            diag("SRG479", f"guard canary not run: {type(exc).__name__}: {str(exc)[:200]}", AT)
        log.warning(DIAGNOSTIC.fmt, d.render())
        run.canary = {"ran": False, "why": d.message, "where": where}
        from .guard import write_record

        write_record(run)
        return run.canary
    trips = judge_once(run.guard, counts)
    support = f"{len(ids)} prompts x {tokens} tokens gave {counts.drafts} drafts"
    run.canary = {"ran": True, "prompts": len(ids), "tokens": tokens, "drafts": counts.drafts,
                  "accepted_per_position": list(counts.accepted), "drafted_per_position": list(counts.drafted),
                  "mean_length": None if not counts.drafts else round(counts.mean_length(), 3),
                  "trips": [t.to_dict() for t in trips], "wall_s": round(time.perf_counter() - t0, 3), "where": where}
    from .guard import write_record

    write_record(run)
    if not counts.drafts:
        log.warning(DIAGNOSTIC.fmt, diag("SRG479", f"guard canary not judged: {support}", AT).render())
        return run.canary
    if not trips:
        rates = ", ".join(f"{a / counts.drafts:.3f}" for a in counts.accepted)
        log.info(DIAGNOSTIC.fmt, diag("SRG478", f"guard canary silent: {support}; per-position acceptance [{rates}], "
                                      f"mean accepted length {counts.mean_length():.2f}; no rule held beyond its "
                                      f"support bound (z {config.expect_z:g})", AT).render())
        return run.canary
    for t in trips:
        level = logging.ERROR if t.kind == "collapse" else logging.WARNING
        log.log(level, DIAGNOSTIC.fmt, diag(t.code, f"canary ({support}): {t.message}", AT).render())
    if config.action == "fail":
        first = trips[0]
        stop = diag(first.code, f"guard canary (action: fail) stopped the engine start ({support}): {first.message}", AT)
        if _is_engine_process(core):
            log.error(DIAGNOSTIC.fmt, stop.render())
            raise SystemExit(EXIT_CODE)
        raise SurgeryError(stop)
    return run.canary


def _is_engine_process(core: Any) -> bool:
    """An engine-core process (EngineCoreProc and its DP subclass), as opposed to an in-process engine."""
    return any(c.__name__ == "EngineCoreProc" for c in type(core).__mro__)
