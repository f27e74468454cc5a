"""The kernel's one comparator and one registration classifier (surgery/live/)."""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from surgery.live.mutations import SetAttr, registration  # noqa: E402
from surgery.live.values import plain_value, values_equal  # noqa: E402


def test_exact_mode_wants_the_shape_too():
    assert values_equal(torch.tensor([0.5, 0.5]), torch.tensor([0.5, 0.5]))
    assert not values_equal(torch.tensor(0.5), torch.tensor([0.5]))  # a per-head copy must arrive per head
    assert not values_equal(torch.tensor([0.5]), torch.tensor([0.5 + 1e-7]))
    assert values_equal(math.nan, math.nan) and not values_equal(1.0, math.nan)


def test_audit_mode_broadcasts_and_tolerates_float_noise():
    assert values_equal(0.5, [0.5, 0.5, 0.5], broadcast=True, rel_tol=1e-6)
    assert values_equal(torch.tensor(0.5), torch.tensor([0.5, 0.5]), broadcast=True)
    assert values_equal([1.0], [1.0 + 1e-9], broadcast=True, rel_tol=1e-6)
    assert not values_equal(1.0, [1.0, 2.0], broadcast=True, rel_tol=1e-6)
    assert plain_value(torch.tensor([1, 2])) == [1.0, 2.0] and plain_value(torch.tensor(3.0)) == 3.0


def test_registration_kinds_and_set_attr_keeps_them():
    m = torch.nn.Module()
    m.register_buffer("b", torch.zeros(1))
    m.register_buffer("np", torch.zeros(1), persistent=False)
    m.p = torch.nn.Parameter(torch.zeros(1))
    m.a = 1.0
    assert [registration(m, n) for n in ("b", "np", "p", "a", "absent")] == [
        "buffer", "buffer_np", "parameter", "attribute", "attribute"]
    mut = SetAttr("t", m, "np", torch.ones(1))
    mut.apply()
    assert registration(m, "np") == "buffer_np" and float(m.np) == 1.0
    mut.undo()
    assert registration(m, "np") == "buffer_np" and float(m.np) == 0.0
