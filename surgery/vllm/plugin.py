"""The `vllm.general_plugins` entry point: `register()`.

vLLM calls `register()` in every process it starts (engine, workers), before any model is built.
It installs the start-up check where vLLM builds its config (surgery/vllm/startup.py) and, in the
processes that load models, the hooks (load, KV-bound, reload, dummy load; and where a worker module is
imported, the warm-up hook of the stage `warmed`) (surgery/vllm/hooks.py) that run what surgery does there
(surgery/vllm/live_apply.py). No recipe selected (surgery/vllm/selection.py): the callbacks return
at once. A hook that found nothing to wrap is said, never passed over: with a recipe selected in
the environment it stops the start (SRG323). Where vLLM's scheduler is imported (the engine core), the acceptance guard wraps it
(surgery/vllm/guard.py): on with a selected recipe, configured by additional_config.surgery.guard.
"""
from __future__ import annotations

import importlib.util
import os

from ..text.diagnostics import SurgeryError, diag
from . import hooks, lazy, startup
from .log import get_logger


def register() -> None:
    """Entry point. Idempotent: vLLM may call it several times per process (the hooks dedupe
    callbacks and wrap each class once), and calling it again after `hooks.uninstall_all()`
    re-installs the callbacks instead of silently staying off."""
    startup.install()  # fail fast: check the recipe where vLLM builds its config
    # the model hooks go in where a model runner is imported, i.e. only in processes that load models
    # (the API server and engine core never import one; importing them there cost seconds of start-up)
    modules = runner_modules()
    if not any(_module_exists(m) for m in modules):
        # no runner module this vLLM has will ever trigger the install: the recipe would never be
        # applied, and no hook would notice (SRG323 now, not a silent start)
        no_load_hooks(f"no vLLM model-runner module found ({', '.join(modules) or 'none listed'})")
    lazy.when_imported(modules, install_hooks)
    lazy.when_imported(worker_modules(), install_warm_up_hooks)
    # the acceptance guard reads the scheduler's spec-decode counts (engine-core process only)
    lazy.when_imported([GUARD_MODULE], install_guard)
    # the start-up canary (guard.canary) runs where the engine core is built (surgery/vllm/canary.py)
    lazy.when_imported([CANARY_MODULE], install_canary)


GUARD_MODULE = "vllm.v1.core.sched.scheduler"  # surgery/vllm/guard.py TARGET's module
CANARY_MODULE = "vllm.v1.engine.core"  # surgery/vllm/canary.py TARGET's module


def install_guard(module: str = "") -> None:
    """Wrap vLLM's scheduler for the acceptance guard (surgery/vllm/guard.py), imported here, where vLLM's scheduler
    module is: the guard's package (surgery/guard/) stays out of the processes that never schedule."""
    from . import guard

    guard.install(module)


def install_canary(module: str = "") -> None:
    """Wrap the engine core for the start-up canary (surgery/vllm/canary.py), imported here, where vLLM's engine
    core module is: the canary's imports (the built-in prompts, ~20 ms) stay out of every other process."""
    from . import canary

    canary.install(module)


def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def no_load_hooks(why: str) -> None:
    """Nothing will ever call us at load time: with a recipe selected in the environment that is a
    silent no-op unless we stop here (SRG323); additional_config is not visible yet: say it in the log."""
    from .selection import ENV_RECIPE  # the recipe machinery: only on this refusal path, not in every register()

    missing = hooks.missing_targets(hooks.LOAD_MODEL_TARGETS)
    names = "; ".join(f"{k} ({v})" for k, v in missing.items()) or why
    if missing and why:
        names = f"{why}; {names}"
    if os.environ.get(ENV_RECIPE):
        raise SurgeryError(diag("SRG323", f"recipe {os.environ[ENV_RECIPE]!r} selected but no vLLM draft-loading "
                                f"method could be wrapped: {names}"))
    get_logger().warning("spec-surgery: SRG323 no vLLM draft-loading method could be wrapped (%s); a recipe "
                         "selected through additional_config will not be applied", names)


def runner_modules() -> list[str]:
    return [module for module, _ in hooks.RUNNER_TARGETS]


def worker_modules() -> list[str]:
    return [module for module, _ in hooks.WORKER_TARGETS]


def install_warm_up_hooks(module: str = "") -> None:
    """Wrap the workers' compile_or_warm_up_model (the stage `warmed`) once a worker module finished
    importing (cpu_worker imports gpu_worker: wait for the outer one). Nothing to wrap is said (SRG511)."""
    if lazy.any_initializing(m for m in worker_modules() if m != module):
        return
    from . import live_apply  # a process that builds models only (see install_hooks)

    if not hooks.install_warm_up_hook(live_apply.after_warmed_up):
        missing = hooks.missing_targets(hooks.worker_targets())
        get_logger().warning("spec-surgery: %s", diag("SRG511", "no worker warm-up method could be wrapped ("
                             + "; ".join(f"{k} ({v})" for k, v in missing.items()) + "): the checks after the warm-up "
                             "(stage warmed) will not run").render())


def install_hooks(module: str = "") -> None:
    """Install the load-model, KV-cache and reload hooks (idempotent). Runs after a runner module
    finished importing; while another runner is still half-imported (one runner imports the other)
    it waits for that one's completion, which calls it again."""
    if lazy.any_initializing(m for m in runner_modules() if m != module):  # module: its body just ran
        return
    # what runs at load (the applier, the checks, the audit: some thirty modules, ~25 ms) is imported
    # here, in the processes that build models, not by register() in every process vLLM starts
    from . import live_apply

    wrapped = hooks.install_load_model_hook(live_apply.after_draft_loaded, when="after")
    hooks.install_kv_cache_hook(live_apply.after_kv_cache_bound)
    hooks.install_reload_hook(live_apply.after_weights_reloaded)
    if not hooks.install_dummy_load_hook(live_apply.after_dummy_weights):
        missing = hooks.missing_targets(hooks.DUMMY_LOADER_TARGETS)
        get_logger().warning("spec-surgery: %s", diag("SRG513", "the dummy loader could not be wrapped ("
                             + "; ".join(f"{k} ({v})" for k, v in missing.items()) + "): under load_format=dummy "
                             "vLLM decides what to share from its class-default has-own flags").render())
    if not wrapped:
        no_load_hooks("")
