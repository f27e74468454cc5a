"""surgery/text/records.py: the immutable records that op steps, op specs and engine-card models are made of
(cheaper to define than frozen dataclasses, bench/cold_start.py) behave as frozen keyword-only dataclasses."""
from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from surgery.ops.share_kv import ShareKV, ShareKVStep
from surgery.text.records import Record, record


@record
class Point(Record):
    x: int
    y: int = 0
    tags: tuple = dataclasses.field(default_factory=tuple)


def test_a_record_is_a_frozen_keyword_dataclass():
    p = Point(x=1)
    assert dataclasses.is_dataclass(p) and [f.name for f in dataclasses.fields(p)] == ["x", "y", "tags"]
    assert (p.x, p.y, p.tags) == (1, 0, ())
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        del p.y
    assert Point(1, 2) == Point(x=1, y=2)  # in field order, as a dataclass takes them
    with pytest.raises(TypeError, match="multiple values for 'x'"):
        Point(1, x=2)
    with pytest.raises(TypeError, match="missing 'x'"):
        Point()
    with pytest.raises(TypeError, match="unknown 'z'"):
        Point(x=1, z=2)


def test_equality_hash_repr_replace_copy_and_pickle_follow_the_fields():
    p = Point(x=1, y=2)
    assert p == Point(x=1, y=2) and p != Point(x=1, y=3) and hash(p) == hash(Point(x=1, y=2))
    assert p.__eq__(object()) is NotImplemented  # as a dataclass's __eq__ answers another type
    assert repr(p) == "Point(x=1, y=2, tags=())"
    assert dataclasses.replace(p, y=5) == Point(x=1, y=5) and dataclasses.asdict(p) == {"x": 1, "y": 2, "tags": ()}
    assert copy.deepcopy(p) == p and pickle.loads(pickle.dumps(p)) == p


@record
class Facts(Record):
    name: str
    raw: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)


def test_repr_and_compare_false_fields_are_left_out_as_a_dataclass_leaves_them():
    a, b = Facts(name="x", raw={"a": 1}), Facts(name="x", raw={"b": 2})
    assert a == b and hash(a) == hash(b)  # an unhashable dict that does not count is no obstacle
    assert repr(a) == "Facts(name='x')"


def test_op_steps_and_specs_are_records():
    op = ShareKV(id="share_kv:m:0->1", step=0, map="m", draft_layer=0, target_layer=1)
    assert op == ShareKV(id="share_kv:m:0->1", step=0, map="m", draft_layer=0, target_layer=1)
    assert len({op, dataclasses.replace(op)}) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        op.target_layer = 2
    step = ShareKVStep.from_recipe({"map": "kv_source", "when": "pp_size == 1"})
    assert (step.map, step.when, step.otherwise) == ("kv_source", "pp_size == 1", None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        step.map = "other"
