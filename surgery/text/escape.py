"""Text from outside, shown inside our messages: escaped and bounded.

A message that quotes a server (`X-Error-Message`, an error body, a redirect address), a file name
from the network or a value from a file's content (a tokenizer's token, a tensor name) prints what
someone else wrote onto the user's terminal. Raw, that text can clear the screen, forge a line
("all checks passed" in green) or run to megabytes (a 40 MB vocabulary key was echoed whole into
SRG671). So every such quote goes through `shown`:

- control characters (C0 including newline and tab, DEL, C1), lone surrogates (which would also make
  writing the message to a UTF-8 stream fail) and the invisible bidirectional overrides are written
  as Python escapes (`\\x1b`, `\\ud800`, `\\u202e`): what they were stays readable, nothing acts;
- the value is cut at `limit` characters, and the cut says how long the whole was.

`escape_lines` is the net under every rendered diagnostic: the same escapes, newlines and tabs
kept (a message may span lines on purpose; a quoted value never does, `shown` escapes those). And
`cut` is the net under every diagnostic's message (`surgery.text.diagnostics.diag`): a message past
`MAX_MESSAGE` characters, which only an unbounded quote can make (the longest the test suites make
is under 1,500), is cut there with its length said, in text and `--json` alike.
"""
from __future__ import annotations

import re

MAX_SHOWN = 200  # characters of one quoted value; the whole length is said after the cut
MAX_MESSAGE = 8192  # characters of one diagnostic's message or hint

# C0 and C1 controls, DEL, lone surrogates, and the bidi embedding / override / isolate marks
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_UNSAFE_KEEP_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\u200e\u200f\u202a-\u202e\u2066-\u2069]")


_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape_char(m: re.Match) -> str:
    ch = m.group(0)
    if ch in _NAMED:
        return _NAMED[ch]
    c = ord(ch)
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def escape(text: str) -> str:
    """`text` with every control character, lone surrogate and bidi override escaped."""
    return _UNSAFE.sub(_escape_char, text)


def escape_lines(text: str) -> str:
    """`escape`, keeping newlines and tabs (the last net over a whole rendered message)."""
    return _UNSAFE_KEEP_LINES.sub(_escape_char, text)


def shown(value: object, limit: int = MAX_SHOWN) -> str:
    """`value` as text fit to quote: bytes decoded (invalid bytes replaced), escaped, at most `limit`
    characters, then `... (N characters in all)` when it was longer."""
    if isinstance(value, (bytes, bytearray)):
        text = bytes(value[: limit * 4 + 4]).decode("utf-8", "replace")
        total = len(value)
        unit = "bytes"
    else:
        text = value if isinstance(value, str) else str(value)
        total = len(text)
        unit = "characters"
    if total <= limit and len(text) <= limit:
        return escape(text)
    return f"{escape(text[:limit])}... ({total} {unit} in all)"


def quoted(value: object, limit: int = MAX_SHOWN) -> str:
    """`shown` between single quotes: a value inside a sentence."""
    return f"'{shown(value, limit)}'"


def cut(text: str, limit: int = MAX_MESSAGE) -> str:
    """`text` as it is when it fits `limit` characters, else its first `limit` and the whole length."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters in all)"


class EscapedOut:
    """A text stream whose every write goes through `escape_lines` (issue 67): the command's summary
    lines (validate's verdict, the plan, report headers, the pins) quote values from configs and the
    network (a `model_type` holding `\\x1b[2J`) and are printed by many writers; escaping at the stream
    catches them all, as `escape_lines` does for every rendered diagnostic. Newlines and tabs are kept;
    JSON output is already escaped (json.dumps) and passes unchanged. Everything else is the stream's."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        return self._stream.write(escape_lines(text) if isinstance(text, str) else text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name):
        return getattr(self._stream, name)
