"""Engine cards as typed models (issue 43): the three shipped cards load into surgery/engine/card_model.py's
dataclasses and validate against schemas/engine-card.schema.json, which is generated from them; a card
with a misspelt key, a wrong type or a missing required key is refused at load, naming the card file
and the key path, and the schema refuses the same card; every field of the models is read by code
(a card entry no code reads is a silent gap); and loading cards keeps jsonschema out of a cold
`surgery validate`."""
from __future__ import annotations

import copy
import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from surgery.engine import card_model
from surgery.engine.card_model import CardError, EngineCard, RolePaths, card_from_data
from surgery.engine.card_schema import SCHEMA_FILE, card_schema, card_schema_text
from surgery.engine.cards import ENGINES, card, card_file
from surgery.resources import load_data

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_PATH = ROOT / "schemas" / SCHEMA_FILE


def raw(engine: str) -> dict:
    """A private copy of the parsed card (load_data's object is shared)."""
    return copy.deepcopy(load_data(f"data/engines/{engine}.yaml"))


def schema_errors(instance: dict) -> list[str]:
    import jsonschema

    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(instance)]


def test_the_engines_are_the_three_cards():
    assert ENGINES == ("hf", "sglang", "vllm")


@pytest.mark.parametrize("engine", ENGINES)
def test_a_shipped_card_loads_into_typed_models_once(engine):
    c = card(engine)
    assert isinstance(c, EngineCard) and c is card(engine)
    assert c.layers and c.attention and all(isinstance(r, RolePaths) for r in c.roles.values())
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.attention = "x"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del c.limits
    with pytest.raises(TypeError):
        c.roles["lm_head"] = None  # type: ignore[index]


def test_the_models_are_dataclasses_with_keyword_construction():
    """The shared Record base (surgery/text/records.py) stands in for dataclass's per-class methods (cold start): same behaviour."""
    assert card_model.Limits(cuda_dtypes=("bfloat16",)) == card_model.Limits(cuda_dtypes=("bfloat16",))
    assert card_model.Limits() != card_model.Limits(cuda_dtypes=("bfloat16",))
    assert hash(card_model.Limits()) == hash(card_model.Limits())
    assert repr(card_model.Release(device="cpu", torch="2.13.0")) == "Release(device='cpu', torch='2.13.0')"
    assert dataclasses.replace(card_model.Limits(), cuda_dtypes=("x",)).cuda_dtypes == ("x",)
    with pytest.raises(TypeError, match="missing 'torch'"):
        card_model.Release(device="cpu")
    with pytest.raises(TypeError, match="unknown 'gpu'"):
        card_model.Release(device="cpu", torch="2", gpu=1)


def test_typed_values_are_what_the_cards_say():
    vllm, sglang = card("vllm"), card("sglang")
    assert vllm.roles["lm_head"].draft == vllm.roles["lm_head"].target == ("lm_head", "language_model.lm_head")
    shared = vllm.roles["mtp_shared_head"]
    assert shared.draft == ("model.layers.{i}.shared_head.head",) and shared.per_layer()
    assert sglang.roles["mtp_shared_head"].one_module_for_every_layer and not vllm.roles["lm_head"].per_layer()
    assert vllm.draft_architecture_rewrite["dflash"].keep_names == ("LiLiCorrDraftModel",)
    assert vllm.attention_facts["attn_type"] is None and vllm.attention_backends["HPC_ATTN"] == (128,)
    assert sglang.wiring.draft_load_points[0] == ("sglang.srt.speculative.eagle_worker_v2", "EagleDraftWorker",
                                                  "init_lm_head")
    assert sglang.releases["0.5.17"].device == "cuda" and card("hf").wiring is None


def test_the_schema_file_is_generated_from_the_models():
    assert SCHEMA_PATH.read_text(encoding="utf-8") == card_schema_text(), \
        "schemas/engine-card.schema.json is stale; run `python tools/gen_docs.py`"


def test_the_schema_is_a_valid_draft_2020_12_schema():
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(card_schema())


@pytest.mark.parametrize("engine", ENGINES)
def test_a_shipped_card_validates_against_the_schema(engine):
    assert schema_errors(raw(engine)) == []


def _set(doc: dict, path: str, value) -> None:
    *parents, key = path.split(".")
    for p in parents:
        doc = doc[p]
    doc[key] = value


def _rename(doc: dict, path: str, new: str) -> None:
    *parents, key = path.split(".")
    for p in parents:
        doc = doc[p]
    doc[new] = doc.pop(key)


def _drop(doc: dict, path: str) -> None:
    *parents, key = path.split(".")
    for p in parents:
        doc = doc[p]
    del doc[key]


# (engine, edit, the key path the loader names, what it says)
BAD = [
    ("vllm", lambda d: _rename(d, "limits", "limit"), "limit", "unknown key (a card entry no code reads); "
     "a card takes: layers, attention, roles, release, releases, has_own_flags"),
    ("vllm", lambda d: _rename(d, "limits.pp_loses_per_layer_inputs", "pp_loses_per_layer_input"),
     "limits.pp_loses_per_layer_input", "unknown key (a card entry no code reads); limits takes: "),
    ("sglang", lambda d: _rename(d, "wiring.head_never_touched_for", "head_never_touched"),
     "wiring.head_never_touched", "unknown key"),
    ("vllm", lambda d: _set(d, "ran_versions", 0.32), "ran_versions", "expected a list, got float 0.32"),
    ("vllm", lambda d: _set(d, "ran_versions", [0.32]), "ran_versions.0", "expected a string, got float 0.32"),
    ("vllm", lambda d: _set(d, "attention_backends.CPU_ATTN", [32, "64"]), "attention_backends.CPU_ATTN.1",
     "expected an integer, got str '64'"),
    ("vllm", lambda d: _set(d, "roles.lm_head", "lm_head"), "roles.lm_head",
     "expected a list, got str 'lm_head'"),
    ("vllm", lambda d: _set(d, "roles.mtp_shared_head", {"draft": ["x"]}), "roles.mtp_shared_head.target",
     "missing required key"),
    ("hf", lambda d: _drop(d, "attention"), "attention", "missing required key"),
    ("sglang", lambda d: _set(d, "wiring.aux_shift.default", "sometimes"), "wiring.aux_shift.default",
     "'sometimes' is not one of 'always', 'first_id_is_1'"),
    ("sglang", lambda d: _drop(d, "wiring.aux_shift.default"), "wiring.aux_shift.default", "missing required key"),
    ("sglang", lambda d: _set(d, "wiring.draft_load_points", [["a", "B"]]), "wiring.draft_load_points.0",
     "expected a list of 3 items, got 2"),
    ("sglang", lambda d: d["releases"].update({"0.5.21": {"device": "tpu", "torch": "2.13.0"}}),
     "releases.0.5.21.device", "'tpu' is not one of 'cpu', 'cuda'"),
    ("vllm", lambda d: _set(d, "limits.cuda_dtypes", [True]), "limits.cuda_dtypes.0", "expected a string, got bool"),
]


@pytest.mark.parametrize("engine, edit, where, says", BAD)
def test_a_bad_card_is_refused_by_the_loader_and_by_the_schema(engine, edit, where, says):
    doc = raw(engine)
    edit(doc)
    source = str(card_file(engine))
    with pytest.raises(CardError) as exc:
        card_from_data(doc, source)
    assert str(exc.value).startswith(f"engine card {source}: {where}: {says}"), str(exc.value)
    assert schema_errors(doc), f"the schema takes what the loader refuses ({where})"


def test_the_message_lists_what_the_section_takes():
    doc = raw("sglang")
    doc["limits"]["cuda_dtype"] = ["bfloat16"]
    with pytest.raises(CardError) as exc:
        card_from_data(doc, "sglang.yaml")
    assert str(exc.value) == ("engine card sglang.yaml: limits.cuda_dtype: unknown key (a card entry no code reads); "
                              "limits takes: speculative_pp_fails_on_devices, pp_loses_per_layer_inputs, "
                              "speculative_fails_on_devices, cuda_dtypes")


def _models() -> list[type]:
    return [obj for obj in vars(card_model).values()
            if dataclasses.is_dataclass(obj) and obj.__module__ == card_model.__name__]


def test_every_card_field_is_read_by_code():
    """A field of the models that no module outside surgery/engine/card_model.py reads (`.name`) would be a
    card entry no code reads: the loader would take it and nothing would act on it."""
    sources = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "surgery").rglob("*.py")
                        if p.name != "card_model.py")
    unread = [f"{cls.__name__}.{f.name}" for cls in _models() for f in dataclasses.fields(cls)
              if not re.search(rf"\.{f.name}\b", sources)]
    assert unread == []


def test_the_schema_names_the_fields_of_the_models():
    """The schema's keys per section are the dataclass fields (generated, so checked once more here)."""
    schema = card_schema()
    assert list(schema["properties"]) == [f.name for f in dataclasses.fields(EngineCard)]
    assert schema["additionalProperties"] is False
    limits = schema["properties"]["limits"]
    assert list(limits["properties"]) == [f.name for f in dataclasses.fields(card_model.Limits)]


def test_cards_load_at_cold_start_without_jsonschema():
    """`surgery validate --pp 2` reads the vLLM card (the resolver's engine limits, SRG351) through the
    plain-Python loader, and every card loads so: jsonschema stays out (bench/cold_start.py's budget)."""
    probe = ("import io, sys, contextlib\nfrom surgery.cli import main\nfrom surgery.engine import cards\n"
             "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
             "    rc = main(['validate', 'recipes/gemma4-mtp.yaml', '--target', "
             "'tests/corpus/configs/gemma-4-E2B-it.json', '--draft', "
             "'tests/corpus/configs/gemma-4-E2B-it-assistant.json', '--pp', '2'])\n"
             "read = cards.card.cache_info().currsize\n"
             "[cards.card(e) for e in cards.ENGINES]\n"
             "print(rc, read, 'jsonschema' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.stdout.split() == ["1", "1", "False"], out.stderr


def test_card_refuses_a_broken_shipped_card_naming_its_file(monkeypatch):
    """`card(engine)` itself (not only the builder) stops on a card that does not fit, with the file."""
    from surgery.engine import cards

    broken = raw("vllm")
    broken["limit"] = broken.pop("limits")
    monkeypatch.setattr(cards, "load_data", lambda relpath: broken)
    cards.card.cache_clear()
    try:
        with pytest.raises(CardError) as exc:
            cards.card("vllm")
        assert str(exc.value).startswith(f"engine card {card_file('vllm')}: limit: unknown key"), str(exc.value)
        assert str(card_file("vllm")).endswith("surgery/data/engines/vllm.yaml")
    finally:
        cards.card.cache_clear()
