"""Every explicitly tagged scalar, whatever its text, is a value or a coded error at its position.

Issue 34: `recipe: !!int &a1 ''` escaped the loader as IndexError out of PyYAML's
`construct_yaml_int` (found by test_fuzz_long[loader_yaml_features]); `!!float '.'`, `!!int '_'`,
`!!int '-'` did the same. The loader used to catch a hand-made list of exception types; this file
runs the whole grid (each YAML tag a document can name x texts that are empty, sign-only,
underscore-only, dot-only, base prefixes without digits, sexagesimal stubs, over-long digits, ...)
in a value and in a key, quoted and plain, so a narrowed `except` fails here before a user sees it.
"""
from __future__ import annotations

import json

import pytest

from surgery import SurgeryError
from surgery.text.yamlload import load_yaml_text

ALLOWED = ["str", "int", "float", "bool", "null"]  # constructed (a bad text is SRG102)
REFUSED = ["timestamp", "binary", "merge", "value", "set", "omap", "pairs", "seq", "map", "yaml",
           "python/int", "python/object/apply:os.system"]  # never constructed (SRG005)
TEXTS = ["", " ", "_", "__", "-", "+", ".", "-.", "+.", "-_", "._", "0x", "0b", "0o", "0x_", "0b_", "0o_", "0_",
         ":", "1:", "1:_", "0:", ":0", "1:60", "e", "1e", "1e+", ".e1", "1__", "--1", "+-1", "x", "~", "null",
         "yes", "Off", "1_000", "0x1F", "0b101", "017", "09", "1:30:00", "1.5", ".inf", ".nan", "-.inf", "1e999",
         "2001-12-14", "2001-12-14t", "2001-13-45", "aGVsbG8=", "!!", "=", "<<", "1" * 4400, "-" + "9" * 5000,
         "\u0661", "\u00a0", "\t1"]


def _outcome(text: str):
    try:
        return load_yaml_text(text, "t.yaml").data
    except SurgeryError as exc:
        return exc


def _coded(exc: SurgeryError, codes: set[str], line: int, col: int) -> None:
    d = exc.diagnostics[0]
    assert d.code in codes, d
    assert (d.location.file, d.location.line, d.location.col) == ("t.yaml", line, col), d.render()


@pytest.mark.parametrize("tag", ALLOWED + REFUSED)
def test_tagged_value_is_a_value_or_coded_at_its_position(tag):
    expected = {"SRG102"} if tag in ALLOWED else {"SRG005"}
    for text in TEXTS:
        for shown in (json.dumps(text), f"'{text}'"):  # both quote styles
            got = _outcome(f"recipe: x\nversion: !!{tag} &a1 {shown}\n")
            if isinstance(got, SurgeryError):
                _coded(got, expected, 2, 10)
            else:
                assert tag in ALLOWED, (tag, text, got)
        plain = _outcome(f"recipe: x\nversion: !!{tag} {text}\n")  # plain text may not even parse
        if isinstance(plain, SurgeryError):
            _coded(plain, expected | {"SRG004", "SRG003"}, 2, plain.diagnostics[0].location.col)
            assert plain.diagnostics[0].location.line in (2, 3)


@pytest.mark.parametrize("tag", ALLOWED + REFUSED)
def test_tagged_key_is_a_key_or_coded_at_its_position(tag):
    for text in TEXTS:
        got = _outcome(f"recipe: x\n? !!{tag} {json.dumps(text)}\n: 1\n")
        if isinstance(got, SurgeryError):
            d = got.diagnostics[0]
            assert d.code in {"SRG102", "SRG005", "SRG107", "SRG007"}, d
            assert d.location.line == 2 and d.location.col is not None, d.render()


@pytest.mark.parametrize("text,col", [("recipe: !!int &a1 ''", 9), ("recipe: !!int ''", 9),
                                      ('version: !!float ""', 10), ('version: !!int "_"', 10),
                                      ('version: !!float "."', 10), ('version: !!int "-"', 10)])
def test_the_crashes_of_issue_34_are_srg102(text, col):
    got = _outcome(text + "\n")
    assert isinstance(got, SurgeryError) and got.exit_code in (1, 2)
    _coded(got, {"SRG102"}, 1, col)


def test_valid_tagged_values_still_construct():
    got = _outcome("a: !!int '0x1F'\nb: !!float '1'\nc: !!bool 'Yes'\nd: !!null ''\ne: !!str 1\nf: !!int 1_000\n")
    assert got == {"a": 31, "b": 1.0, "c": True, "d": None, "e": "1", "f": 1000}
