"""Diagnostics as a person reads them: the one text renderer every command uses (issue 42, class 8).

Why a renderer apart from `Diagnostic.render`: a checker emits one diagnostic per finding, and many
findings repeat over layers (a swapped Gemma pair gave one SRG302 per layer, 42 of them). A reader
wants each problem once, the worst first, and a location they can open:

- errors, then warnings, then (``verbose``) notes, each once: diagnostics that differ only in the
  layer number of one ``layer N`` are one line with the layer list (``layers 0-3, 5-8 (8 layers)``),
  exact repeats are dropped;
- a shipped recipe is named by its name and line (``recipe gemma4-mtp:43``), a packaged data file by
  its path inside the package, a file under the working directory by its relative path; the
  install path and column stay in ``--json`` (``Diagnostic.to_dict``), which keeps every diagnostic
  of every severity with its full location;
- the counts line that follows the verdict says how many of each there are, and that notes are
  behind ``--verbose``.

Config-only (level 0): no torch, no engine."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from .diagnostics import ERROR, INFO, WARNING, Diagnostic, Location
from ..resources import data_dir, recipes_dir
from .escape import escape_lines

SEVERITY_ORDER = (ERROR, WARNING, INFO)
#: how the text output names a severity (``info`` diagnostics are "notes" to a reader)
SEVERITY_WORD = {ERROR: "error", WARNING: "warning", INFO: "note"}

_LAYER = re.compile(r"\blayer (\d+)\b")
# the verb right after a singular "layer N" that becomes plural with a layer list
_PLURAL = {" is ": " are ", " has ": " have ", " does ": " do ", " reads ": " read ", " holds ": " hold ",
           " was ": " were ", " lives ": " live "}


def short_location(loc: Location) -> str:
    """A location for people: shipped recipes by name and line, packaged data by its path in the package,
    files under the working directory relative to it; everything else as given."""
    if not loc.file:
        return str(loc)
    path = Path(loc.file)
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError, ValueError):  # ValueError: a NUL in a name typed on the command line
        return str(loc)
    try:
        if resolved.suffix == ".yaml" and resolved.parent == recipes_dir().resolve():
            return f"recipe {resolved.stem}" + (f":{loc.line}" if loc.line is not None else "") + \
                (f" {loc.key_path}" if loc.key_path and loc.line is None else "")
        rel_data = resolved.relative_to(data_dir().resolve())
    except ValueError:
        rel_data = None
    if rel_data is not None:
        return str(Location(f"surgery/data/{rel_data.as_posix()}", loc.line, None, loc.key_path))
    if path.is_absolute():
        try:
            rel = resolved.relative_to(Path(os.getcwd()).resolve())
            return str(Location(rel.as_posix(), loc.line, loc.col, loc.key_path))
        except (ValueError, OSError):
            pass
    return str(loc)


@dataclass(frozen=True)
class Line:
    """One rendered finding: a diagnostic, or several that differ only in one layer number."""

    diagnostic: Diagnostic  # the first of the group, its message already carrying the layer list
    count: int  # how many diagnostics it stands for

    def render(self) -> str:
        d = self.diagnostic
        where = short_location(d.location)
        text = ("" if where == "<input>" else f"{where}: ") + \
            f"{SEVERITY_WORD.get(d.severity, d.severity)} {d.code}: {d.message}"
        if d.hint:
            text += f"\n    hint: {d.hint}"
        return escape_lines(text)  # the last net: a message quoting outside text never acts on the terminal


def compact(numbers: Iterable[int]) -> str:
    """0,1,2,3,5 -> '0-3, 5'."""
    nums = sorted(set(numbers))
    parts: list[str] = []
    i = 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        parts.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return ", ".join(parts)


def _merged_message(message: str, position: int, layers: list[int]) -> str:
    """The message with its `position`-th "layer N" replaced by the layer list (and the verb after it made plural)."""
    matches = list(_LAYER.finditer(message))
    m = matches[position]
    listed = f"layers {compact(layers)} ({len(set(layers))} layers)"
    rest = message[m.end():]
    for one, many in _PLURAL.items():
        if rest.startswith(one):
            rest = many + rest[len(one):]
            break
    return message[:m.start()] + listed + rest


def group(diagnostics: Sequence[Diagnostic]) -> list[Line]:
    """Each problem once, in first-seen order: exact repeats dropped, and diagnostics that differ only in the
    number of one ``layer N`` of their message merged into one line with the layer list."""
    buckets: dict[tuple, list[tuple[Diagnostic, tuple[int, ...]]]] = {}
    for d in diagnostics:
        numbers = tuple(int(m.group(1)) for m in _LAYER.finditer(d.message))
        template = _LAYER.sub("layer #", d.message)
        key = (d.severity, d.code, str(d.location), d.hint, template)
        buckets.setdefault(key, []).append((d, numbers))
    lines: list[Line] = []
    for members in buckets.values():
        if len(members) == 1:
            lines.append(Line(members[0][0], 1))
            continue
        varying = [p for p in range(len(members[0][1])) if len({nums[p] for _, nums in members}) > 1]
        if not varying:  # exact repeats
            lines.append(Line(members[0][0], len(members)))
            continue
        # the position with the most distinct values becomes the list; the others stay as they are
        pos = max(varying, key=lambda p: len({nums[p] for _, nums in members}))
        sub: dict[tuple, list[tuple[Diagnostic, tuple[int, ...]]]] = {}
        for d, nums in members:
            sub.setdefault(nums[:pos] + nums[pos + 1:], []).append((d, nums))
        for subset in sub.values():
            first = subset[0][0]
            if len({nums[pos] for _, nums in subset}) == 1:
                lines.append(Line(first, len(subset)))
                continue
            message = _merged_message(first.message, pos, [nums[pos] for _, nums in subset])
            lines.append(Line(Diagnostic(first.code, first.severity, message, first.location, first.hint),
                              len(subset)))
    return lines


def ordered_lines(diagnostics: Sequence[Diagnostic], verbose: bool = False) -> list[Line]:
    """Errors, then warnings, then (verbose) notes; each problem once (`group`)."""
    grouped = group(diagnostics)
    shown = [ERROR, WARNING] + ([INFO] if verbose else [])
    return [line for sev in shown for line in grouped if line.diagnostic.severity == sev]


def render_diagnostics(diagnostics: Sequence[Diagnostic], verbose: bool = False) -> str:
    """The text block of `ordered_lines`, one finding (plus its hint) per line; '' when there is none."""
    return "".join(line.render() + "\n" for line in ordered_lines(diagnostics, verbose))


def counts(diagnostics: Sequence[Diagnostic], verbose: bool = False) -> str:
    """'2 errors, 1 warning, 3 notes (--verbose)': how many distinct findings of each severity (repeats over
    layers count once, as they are shown); '' when there is none."""
    grouped = group(diagnostics)
    parts = []
    for sev in SEVERITY_ORDER:
        n = sum(1 for line in grouped if line.diagnostic.severity == sev)
        if n:
            word = SEVERITY_WORD[sev]
            parts.append(f"{n} {word}{'s' if n != 1 else ''}" + (" (--verbose)" if sev == INFO and not verbose else ""))
    return ", ".join(parts)
