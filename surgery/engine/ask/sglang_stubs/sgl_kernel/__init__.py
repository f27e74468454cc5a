"""Stand-in for sgl-kernel, which PyPI does not ship for CPUs: SGLang's CPU platform imports it at module
level. Put on sys.path by sglang_runner.py only where no sgl_kernel is installed. Imports succeed; calling
an op raises and names it (constructing a model on the meta device calls none)."""


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)

    def missing(*args, **kwargs):
        raise NotImplementedError(f"sgl_kernel.{name}: no CPU build (the oracle's stand-in)")

    missing.__name__ = name
    return missing
