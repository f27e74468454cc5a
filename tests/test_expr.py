"""The condition language: parsing, strict types, bounds, and that it never evaluates Python."""
import pytest

from surgery import expr


def ev(text, **names):
    return expr.parse(text).evaluate(lambda n: names[n])


@pytest.mark.parametrize("text,names,want", [
    ("pp_size == 1", {"pp_size": 1}, True),
    ("pp_size == 1", {"pp_size": 2}, False),
    ("not pp_size > 1 and tp_size in [1, 2, 4]", {"pp_size": 1, "tp_size": 4}, True),
    ("kv_cache_dtype in ['fp8', 'fp8_e4m3']", {"kv_cache_dtype": "auto"}, False),
    ("kv_cache_dtype not in ['fp8']", {"kv_cache_dtype": "auto"}, True),
    ("target.num_kv_heads % tp_size == 0 or tp_size % target.num_kv_heads == 0",
     {"target.num_kv_heads": 2, "tp_size": 4}, True),
    ("draft.backbone_hidden_size == target.hidden_size", {"draft.backbone_hidden_size": None, "target.hidden_size": 8}, False),
    ("-(2 + 3) * 2 // 3", {}, -4),
    ("1 == 1.0", {}, True),
    ("true == 1", {}, False),
    ("attention_backend == null", {"attention_backend": None}, True),
])
def test_evaluates(text, names, want):
    assert ev(text, **names) == want


@pytest.mark.parametrize("text,code", [
    ("pp_size ==", "SRG110"), ("(pp_size == 1", "SRG110"), ("pp_size = 1", "SRG110"), ("__import__('os')", "SRG110"),
    ("pp_size; 1", "SRG110"), ("", "SRG110"), ("a" * 1001, "SRG113"), ("(" * 40 + "1" + ")" * 40, "SRG113"),
    ("not " * 40 + "true", "SRG113"), ("lambda: 1", "SRG110"), ("x.__class__", "SRG110"),
])
def test_rejects(text, code):
    with pytest.raises(expr.ExprError) as info:
        expr.parse(text).evaluate(lambda n: 1)
    assert info.value.code == code


@pytest.mark.parametrize("text,names", [
    ("pp_size and true", {"pp_size": 1}), ("'a' < 1", {}), ("1 + 'a'", {}), ("1 // 0", {}), ("1 in 2", {}),
    ("not pp_size", {"pp_size": 1}), ("2 * 1" + " * 1000000000000" * 20, {}),
])
def test_type_errors(text, names):
    with pytest.raises(expr.ExprError) as info:
        ev(text, **names)
    assert info.value.code == "SRG112"


def test_names_are_reported_for_static_checks():
    assert [n for n, _ in expr.parse("draft.x == target.y and pp_size > 1").names] == ["draft.x", "target.y", "pp_size"]
