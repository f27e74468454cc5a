"""The per-prompt loop every engine's measurer shares (measure_hf.py, measure_vllm.py).

Why one loop: the early stop (stats.may_stop, asked through `keep_going`) and the `stopped_early` mark
must mean the same on every engine, or the ranking would compare candidates stopped by different
rules. The engine-specific part is `decode_one(ids) -> PromptResult`: how one prompt is decoded and
what its counts are on that engine."""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from .stats import Measured, PromptResult


def decode_prompts(out: Measured, prompts, decode_one, keep_going) -> Measured:
    """Decode `prompts` in order into `out.prompts`; after each prompt `keep_going(out)` (False: stop,
    and `out.stopped_early` says whether any prompt was left)."""
    for ids in prompts:
        result: PromptResult = decode_one(ids)
        out.prompts.append(result)
        if not keep_going(out):
            out.stopped_early = len(out.prompts) < len(prompts)
            break
    return out


def error_text(exc: BaseException) -> str:
    """A candidate's failure as the report shows it: the exception type and the start of its message."""
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def release(distribution: str) -> str | None:
    """The installed release of the engine's distribution (None: not installed)."""
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None
