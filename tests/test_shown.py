"""surgery/text/escape.py (issue 54): text from outside is escaped and bounded wherever it is quoted, and
every diagnostic is cut and escaped as a last net."""
from __future__ import annotations

from surgery.text.diagnostics import Location, diag
from surgery.text.render import render_diagnostics
from surgery.text.escape import MAX_MESSAGE, escape, quoted, shown


def test_control_characters_surrogates_and_bidi_marks_are_escaped():
    assert escape("a\x1b[2Jb\nc\td\x7f\x85\ud800\u202e") == "a\\x1b[2Jb\\nc\\td\\x7f\\x85\\ud800\\u202e"
    assert escape("plain ünïcode 名前") == "plain ünïcode 名前"


def test_a_long_value_is_cut_with_its_length_said():
    assert shown("x" * 500) == "x" * 200 + "... (500 characters in all)"
    assert quoted("ab") == "'ab'"
    assert shown(b"\xff" * 1000, 10).endswith("... (1000 bytes in all)")


def test_every_diagnostic_is_cut_and_its_rendered_line_escaped():
    d = diag("SRG055", "\x1b[2J" + "y" * (MAX_MESSAGE * 3), Location("a\x1bb"))
    assert len(d.message) < MAX_MESSAGE + 100 and d.message.endswith(f"({MAX_MESSAGE * 3 + 4} characters in all)")
    text = render_diagnostics([d])
    assert "\x1b" not in text and "\\x1b[2J" in text and "a\\x1bb" in text
    assert "\x1b" not in d.render()
