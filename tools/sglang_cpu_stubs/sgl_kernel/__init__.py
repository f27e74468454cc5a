# Stand-in for sgl-kernel: no CPU build of it exists on PyPI (sgl-kernel / sglang-kernel are CUDA
# wheels). Imports succeed; calling any op raises naming it, so a run shows which CPU op it needs.
def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    def missing(*args, **kwargs):
        raise NotImplementedError(f"sgl_kernel.{name}: CPU op not built (stub sgl_kernel)")
    missing.__name__ = name
    return missing
