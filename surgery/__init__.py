"""spec-surgery: wire speculative-decoding draft models into their targets from declarative recipes.

Config-only API (no torch import):

    from surgery import load_recipe, read_facts, resolve, Runtime
    plan = resolve(load_recipe("gemma4-mtp"), read_facts(draft_dir), read_facts(target_dir), Runtime(engine="hf"))

Applying to live models (imports torch lazily): `surgery.apply` / `surgery.verify` below (the same as
`surgery.applier.apply_plan` / `surgery.applier.verify_plan`), with an engine context from
`surgery.live.hf` / `surgery.live.vllm`.
"""
import importlib

from .version import __version__
from .diagnostics import Diagnostic, SurgeryError
from .facts import ModelFacts, facts_from_config, read_facts
from .plan import Plan, Runtime
from .recipe import Recipe, load_recipe, parse_recipe
from .resolver import resolve

__all__ = ["__version__", "Diagnostic", "SurgeryError", "ModelFacts", "facts_from_config", "read_facts", "Plan",
           "Runtime", "Recipe", "load_recipe", "parse_recipe", "resolve", "apply", "verify"]


def apply(plan, draft, target, context=None, **kwargs):
    """Apply a plan to live models (atomic; see surgery.applier.core). Imports torch lazily.
    `context`: the engine's (surgery.live.hf.HFContext, the default for an `hf` plan, or
    surgery.live.vllm.VLLMContext)."""
    return importlib.import_module("surgery.applier").apply_plan(plan, draft, target, context=context, **kwargs)


def verify(plan, draft, target, context=None, **kwargs):
    """Check the plan's invariants on live models; returns a VerifyReport."""
    return importlib.import_module("surgery.applier").verify_plan(plan, draft, target, context=context, **kwargs)


def __getattr__(name):
    """``surgery.hf`` (HF transformers helpers, e.g. ``surgery.hf.speculative_decoding``) on first use,
    so ``import surgery`` stays free of torch."""
    if name == "hf":
        from . import hf

        return hf
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
