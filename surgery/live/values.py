"""Live values as plain data, and the one comparator of them.

Two callers compare with different needs, through the same function:
- the copy_attrs verification wants exact equality, shape included (`values_equal(a, b)`): a
  per-head target scale copied onto a scalar draft must arrive per head;
- the audit compares what vLLM left in place, where a scalar draft scale beside a per-head target
  scale of the same value is not a wiring difference, and float32 round trips are noise
  (`values_equal(a, b, broadcast=True, rel_tol=1e-6)`).
"""
from __future__ import annotations

import math
from typing import Any


def plain_value(v: Any) -> Any:
    """A tensor as a float (0-d) or a flat list of floats, on the CPU; anything else unchanged."""
    import torch

    if isinstance(v, torch.Tensor):
        v = v.detach().to("cpu", torch.float32)
        return v.item() if v.numel() == 1 and v.dim() == 0 else v.flatten().tolist()
    return v


def _scalar_equal(a: Any, b: Any, rel_tol: float) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
        return a == b
    a, b = float(a), float(b)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or abs(a - b) <= rel_tol * max(1.0, abs(b))


def values_equal(a: Any, b: Any, *, broadcast: bool = False, rel_tol: float = 0.0) -> bool:
    """Equal values. Tensors: same shape and values (NaN equals NaN) unless `broadcast`, where a
    single value stands for a list of any length. `rel_tol` allows float noise."""
    import torch

    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and not broadcast:
        if a.shape != b.shape:
            return False
        return values_equal(plain_value(a), plain_value(b), rel_tol=rel_tol, broadcast=False)
    a, b = plain_value(a), plain_value(b)
    if isinstance(a, list) or isinstance(b, list):
        la = a if isinstance(a, list) else [a]
        lb = b if isinstance(b, list) else [b]
        if broadcast and len(la) == 1:
            la = la * len(lb)
        if broadcast and len(lb) == 1:
            lb = lb * len(la)
        return len(la) == len(lb) and all(_scalar_equal(x, y, rel_tol) for x, y in zip(la, lb))
    return _scalar_equal(a, b, rel_tol)


def show(v: Any) -> str:
    """A short rendering for check details: the first values and the shape of a tensor."""
    import torch

    if isinstance(v, torch.Tensor):
        flat = v.detach().cpu().float().flatten().tolist()
        return f"{flat[:4]}{'...' if len(flat) > 4 else ''} shape {tuple(v.shape)}"
    return repr(v)
