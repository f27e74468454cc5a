"""Stand-in for sgl-kernel, which PyPI does not ship for CPUs (see ../README.md).

Imports succeed; calling an op raises and names it (that is how docs/sglang.md found the ops a
speculative engine needs), except the one op below, written out so that a speculative engine gets
past its KV pool's warm-up to the draft-load point where surgery's hook applies a recipe. The
attention backends and tree ops a speculative engine needs after that are NOT provided: SGLang
stops there (docs/sglang.md)."""
import ctypes


def copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt_loc, src_loc):
    """What sgl-kernel's CPU op does (kernels/ops/kvcache/cache_move.py calls it where the Triton
    kernel `copy_all_layer_kv_cache_tiled` runs on GPUs): in every layer buffer (base address
    data_ptrs[i], row size strides[i] bytes), copy row src_loc[j] to row tgt_loc[j]."""
    for base, stride in zip(data_ptrs.tolist(), strides.tolist()):
        for tgt, src in zip(tgt_loc.tolist(), src_loc.tolist()):
            if tgt != src:
                ctypes.memmove(base + tgt * stride, base + src * stride, stride)


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)

    def missing(*args, **kwargs):
        raise NotImplementedError(f"sgl_kernel.{name}: CPU op not built (stub sgl_kernel)")

    missing.__name__ = name
    return missing
