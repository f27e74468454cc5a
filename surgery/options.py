"""What a command was asked, as frozen values: the CLI builds these once from argparse's namespace
(surgery/cli.py is the only module that reads `args`), and library code takes them as parameters.

Why: a check that read the namespace's `method` attribute worked only when called from the one parser that
happens to define `--method`; a caller without a parser (the vLLM plugin, a test, another command) had to
fake a namespace, and a missing attribute silently fell back to a default. A dataclass names every input,
its default and its type in one place, and cannot be mutated half-way through a command.
Config-only: no torch, no engine import."""
from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Any
from .text.records import Record, record


@record
class CheckOptions(Record):
    """What `surgery validate / plan / releases` checks read beyond the recipe and the two configs
    (surgery/commands/checks.py and the checks it runs). `target` is the target that was read: the
    speculators verifier when `--target` was left out (`target_from_verifier`)."""
    engine: str = "vllm"
    engine_version: str | None = None  # --engine-version; None: the installed vLLM
    method: str | None = None  # --method as given (None: the recipe's hint / the draft's own); SGLang: its family
    algorithm: str | None = None  # SGLang's --speculative-algorithm (EAGLE3, EAGLE, NEXTN, DFLASH ...), sglang only
    attention_backend: str | None = None  # --attention-backend as given
    max_model_len: int | None = None
    hf_overrides: dict | None = None
    num_speculative_tokens: int | None = None
    kv_cache_dtype: str | None = None
    draft_kv_cache_dtype: str | None = None
    producer: str | None = None
    rejection_sample_method: str | None = None
    calculate_kv_scales: bool = False
    kv_scales_follow_target: bool = False
    decode_context_parallel_size: int | None = None  # --decode-context-parallel-size / --dcp (SRG804)
    weights: bool = False  # --weights: also read the safetensors headers
    engine_check: bool = False  # --engine-check: ask the engine itself (surgery/engine/ask/)
    engine_python: str | None = None  # --engine-python: the interpreter that has it (None: this one, if it can)
    draft: str | None = None  # the draft reference as given
    target: str | None = None  # the target reference that was read
    target_from_verifier: bool = False  # the head is served as the model (`vllm serve <head>`)

    @property
    def method_given(self) -> bool:
        return self.method is not None


@record
class ApplyOptions(Record):
    """`surgery apply RECIPE --engine hf|vllm|sglang`: what the three runners read."""
    recipe: str
    target: str | None = None
    draft: str | None = None
    engine: str = "hf"
    pp: int = 1
    tp: int = 1
    kv_cache_dtype: str = "auto"
    device: str | None = "auto"
    dtype: str | None = None
    max_new_tokens: int = 48
    num_draft_tokens: int | None = None  # None: unset (the vLLM path may take a speculators file's k)
    prompts: int = 8
    threads: int | None = None
    strict: bool = True  # not --no-strict
    ablate: bool = False
    progress: bool = True  # not --no-progress
    json: bool = False


@record
class AuditOptions(Record):
    """`surgery audit RECIPE --target T --draft D`: the vLLM engine the audit starts."""
    recipe: str
    target: str
    draft: str
    method: str | None = None
    num_speculative_tokens: int = 2
    max_model_len: int | None = 512
    max_tokens: int = 16
    prompts: int = 3
    engine_arg: tuple[str, ...] = ()  # --engine-arg KEY=VALUE, as given (repeatable)
    kv_cache_dtype: str = "auto"
    attention_backend: str | None = None
    pp: int = 1
    tp: int = 1
    json: bool = False
    guard: bool = False  # --guard: the guard's canary on the stock engine, its verdict beside the findings
    guard_tokens: int = 32


def fields_from(cls: Any, ns: Any, **given: Any) -> Any:
    """Build `cls` from an argparse namespace: each field from the attribute of its name when the parser
    defined it, else the field's default; `given` wins. Only surgery/cli.py calls this."""
    kw: dict[str, Any] = {}
    for f in fields(cls):
        if f.name in given:
            kw[f.name] = given[f.name]
        elif hasattr(ns, f.name):
            kw[f.name] = getattr(ns, f.name)
        elif f.default is MISSING and f.default_factory is MISSING:  # type: ignore[misc]
            raise TypeError(f"{cls.__name__}.{f.name}: no value given and the parser has no such option")
    return cls(**kw)
