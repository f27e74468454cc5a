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

# The config-only API, imported on first use (PEP 562): `import surgery` alone, which every process
# vLLM or SGLang starts does through the plugin, loads none of the recipe, resolver or facts modules
# (tests/test_no_heavy_imports.py). Name -> the module that defines it.
API = {"Diagnostic": "surgery.text.diagnostics", "SurgeryError": "surgery.text.diagnostics", "ModelFacts": "surgery.facts",
       "facts_from_config": "surgery.facts", "read_facts": "surgery.facts", "Plan": "surgery.plan",
       "Runtime": "surgery.plan", "Recipe": "surgery.recipe", "load_recipe": "surgery.recipe",
       "parse_recipe": "surgery.recipe", "resolve": "surgery.resolver"}

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
    """The config-only API (`API`) and ``surgery.hf`` (HF transformers helpers, e.g.
    ``surgery.hf.speculative_decoding``) on first use, so ``import surgery`` stays free of torch and of
    the recipe machinery."""
    if name in API:
        value = getattr(importlib.import_module(API[name]), name)
        globals()[name] = value
        return value
    if name == "hf":
        return importlib.import_module("surgery.hf")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(API) | {"hf"})
