"""One definition of each line an engine integration logs, read by the code that logs it and by the
tests that look for it in a real engine's output.

Why: the end-to-end server tests found the vLLM plugin's lines by copied substrings
("spec-surgery: KV caches bound: 4/4"). When the KV-cache-group checks doubled the count to 8/8, the
copy stopped matching and nothing else noticed (issue 34). With a `LogLine`, the code logs
`LINE.fmt` and a test parses the log with `LINE.find(text)`: rewording a line changes both at once,
and the numbers in it are named fields a test compares with what it expects, never part of the text
it searches for.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

_FIELD = re.compile(r"%([sd])")


@dataclass(frozen=True)
class LogLine:
    fmt: str  # %-style, as `logging` takes it: `logger.info(LINE.fmt, *args)`
    fields: tuple[str, ...]  # a name for each %s / %d, in order
    # a regular expression for a %s field where "any text, shortest" is ambiguous (two fields side
    # by side, `%s%s`): what that field's text always looks like
    shapes: tuple[tuple[str, str], ...] = ()

    def __post_init__(self):
        found = _FIELD.findall(self.fmt)
        if len(found) != len(self.fields) or "%" in _FIELD.sub("", self.fmt):
            raise ValueError(f"{self.fmt!r}: one field name per %s / %d (and no other % directive), "
                             f"got {len(self.fields)} names for {len(found)} fields")
        if not set(dict(self.shapes)) <= set(self.fields):
            raise ValueError(f"{self.fmt!r}: shapes for fields it does not have: {sorted(dict(self.shapes))}")

    @cached_property
    def pattern(self) -> re.Pattern:
        """The message as a regular expression: %d is an integer, %s any text (shortest match);
        the message ends the line (log formats put their prefix before it)."""
        out, pos = [], 0
        shapes = dict(self.shapes)
        for name, m in zip(self.fields, _FIELD.finditer(self.fmt)):
            out.append(re.escape(self.fmt[pos:m.start()]))
            shape = "-?\\d+" if m.group(1) == "d" else shapes.get(name, ".*?")
            out.append(f"(?P<{name}>{shape})")
            pos = m.end()
        out.append(re.escape(self.fmt[pos:]) + "$")
        return re.compile("".join(out))

    def find(self, text: str) -> list[dict[str, str]]:
        """The fields of every line of `text` that holds this message, plus `line`: the whole line
        (with the log format's prefix, e.g. vLLM's `(Worker pid=...)`)."""
        found = []
        for line in text.splitlines():
            m = self.pattern.search(line)
            if m:
                found.append({**m.groupdict(), "line": line})
        return found

    def render(self, *args) -> str:
        """The message as `logging` would write it."""
        return self.fmt % args
