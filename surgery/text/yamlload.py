"""Safe, bounded YAML loading with source positions.

Why not `yaml.safe_load`: we need (1) the line:col of every value for diagnostics, (2) duplicate
keys refused instead of silently overwritten, (3) a budget on alias expansion (a "billion laughs"
document is a small DAG of nodes that naive construction expands exponentially) and on depth, and
(4) only the JSON-like standard tags. So we let PyYAML compose the node graph (SafeLoader: no
Python tags are ever constructed) and build plain data from it ourselves.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from .diagnostics import Location, fail

MAX_BYTES = 1 << 20
MAX_DEPTH = 64
MAX_NODES = 10_000  # a real recipe has a few hundred values

_STD = "tag:yaml.org,2002:"
_SCALAR_TAGS = {_STD + t for t in ("str", "int", "float", "bool", "null")}
_MERGE = _STD + "merge"


@dataclass
class Loaded:
    data: Any
    positions: dict[tuple, tuple[int, int]] = field(default_factory=dict)  # path -> (line, col), 1-based
    file: str | None = None
    text_offsets: dict[tuple, int] = field(default_factory=dict)  # path -> columns before a scalar's text

    def location(self, path: tuple) -> Location:
        """The closest known position for a key path (walks up to the parent when needed)."""
        p = tuple(path)
        while p and p not in self.positions:
            p = p[:-1]
        line, col = self.positions.get(p, (None, None))
        return Location(self.file, line, col, format_path(path) if path else None)


def format_path(path: tuple) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def load_yaml_text(text: str, file: str | None = None) -> Loaded:
    import yaml

    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:  # a lone surrogate ('\udc80'): libyaml would raise it uncoded
        raise fail("SRG002", f"not valid Unicode text (lone surrogate at character {exc.start})",
                   Location(file)) from None
    if size > MAX_BYTES:
        raise fail("SRG008", f"document is larger than {MAX_BYTES} bytes", Location(file))
    _check_flow_depth(text, file)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # same nodes and marks, ~4x faster
    try:
        _check_node_count(yaml, text, loader, file)
        nodes = list(yaml.compose_all(text, Loader=loader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        loc = Location(file, mark.line + 1, mark.column + 1) if mark else Location(file)
        msg = " ".join(str(x) for x in (exc.context, exc.problem) if x)
        raise fail("SRG004", msg or "malformed YAML", loc) from None
    except yaml.YAMLError as exc:  # reader errors: control characters, bad encodings
        raise fail("SRG002", f"not readable as YAML text: {exc}", Location(file)) from None
    except RecursionError:
        raise fail("SRG008", f"nesting deeper than the parser can follow (limit {MAX_DEPTH})", Location(file)) from None
    nodes = [n for n in nodes if n is not None]
    if not nodes:
        raise fail("SRG003", "the document is empty", Location(file))
    if len(nodes) > 1:
        m = nodes[1].start_mark
        raise fail("SRG004", "more than one YAML document in the file", Location(file, m.line + 1, m.column + 1),
                   hint="remove the `---` separator: a recipe is one document")
    builder = _Builder(file)
    data = builder.build(nodes[0], (), 0)
    if data is None:
        raise fail("SRG003", "the document holds only null", Location(file))
    return Loaded(data, builder.positions, file, builder.text_offsets)


def _check_node_count(yaml, text: str, loader, file: str | None) -> None:
    """Refuse a document with too many nodes while streaming its events, before composing: PyYAML
    builds the whole node graph first (a 1 MiB `[1,1,1,...]` is 450k nodes: seconds and ~130 MiB)
    and the builder's MAX_NODES check would only run afterwards. Keys count here too, hence 2x."""
    count = 0
    node_events = (yaml.ScalarEvent, yaml.SequenceStartEvent, yaml.MappingStartEvent, yaml.AliasEvent)
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, node_events):
            count += 1
            if count > 2 * MAX_NODES:
                m = event.start_mark
                raise fail("SRG008", f"the document has more than {2 * MAX_NODES} keys and values",
                           Location(file, m.line + 1, m.column + 1), hint="a recipe has a few hundred values")


_FLOW_SPECIAL = re.compile(r"[\n'\"#\[\]{}]")


def _check_flow_depth(text: str, file: str | None) -> None:
    """Refuse deeply nested flow collections before PyYAML sees them: its scanner slows down with
    the square of the depth and its composer recurses (a `[[[[...` file would take seconds, then
    overflow the stack). Quotes and comments are skipped roughly; this is a bound, not a parser."""
    depth = 0
    quote = None
    line = 1
    line_start = 0
    for match in _FLOW_SPECIAL.finditer(text):  # every other character is a no-op below: skip them in C
        i = match.start()
        ch = text[i]
        if ch == "\n":
            line += 1
            line_start = i + 1
            if quote == "#":
                quote = None
        elif quote is not None:
            if ch == quote and quote in "'\"":
                quote = None
        elif ch in "'\"" and (i == 0 or text[i - 1] in " \t[{,:\n"):
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1] in " \t\n"):
            quote = "#"
        elif ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise fail("SRG008", f"nesting deeper than {MAX_DEPTH} levels", Location(file, line, i - line_start + 1))
        elif ch in "]}":
            depth = max(0, depth - 1)


class _Builder:
    def __init__(self, file: str | None):
        import yaml

        self.file = file
        self.positions: dict[tuple, tuple[int, int]] = {}
        self.text_offsets: dict[tuple, int] = {}
        self.count = 0
        self._yaml = yaml
        self._scalar = yaml.constructor.SafeConstructor()

    def loc(self, node) -> Location:
        return Location(self.file, node.start_mark.line + 1, node.start_mark.column + 1)

    def build(self, node, path: tuple, depth: int) -> Any:
        yaml = self._yaml
        self.count += 1
        if self.count > MAX_NODES:
            raise fail("SRG006", f"the document expands to more than {MAX_NODES} values (aliases?)", self.loc(node))
        if depth > MAX_DEPTH:
            raise fail("SRG008", f"nesting deeper than {MAX_DEPTH} levels", self.loc(node))
        self.positions.setdefault(path, (node.start_mark.line + 1, node.start_mark.column + 1))
        if isinstance(node, yaml.ScalarNode):
            if node.style in ("'", '"'):
                self.text_offsets[path] = 1  # expression columns count from inside the quotes
            return self._build_scalar(node)
        if isinstance(node, yaml.SequenceNode):
            if node.tag != _STD + "seq":
                raise fail("SRG005", f"tag {node.tag!r} is not allowed", self.loc(node))
            return [self.build(child, path + (i,), depth + 1) for i, child in enumerate(node.value)]
        if isinstance(node, yaml.MappingNode):
            if node.tag != _STD + "map":
                raise fail("SRG005", f"tag {node.tag!r} is not allowed", self.loc(node))
            return self._build_mapping(node, path, depth)
        raise fail("SRG005", f"unsupported YAML node {type(node).__name__}", self.loc(node))

    def _build_scalar(self, node) -> Any:
        """One scalar of an allowed tag (str, int, float, bool, null; any other tag is SRG005 before
        construction). PyYAML's SafeConstructor parses the text without checking it first, so what
        it raises depends on the text: `!!int ''`, `!!int _`, `!!int -` index past the end
        (IndexError), `!!float .` and `!!int 0x` fail int()/float() (ValueError), `!!bool ''` misses
        its table (KeyError), 4300+ digits hit Python's int limit (ValueError). Any exception out of
        the constructor for one of these tags means the text is not a value of that tag: all of them
        are SRG102 at the scalar's position, never a traceback (issue 34; tests/test_yamlload_tags.py
        runs the whole grid of tags and texts)."""
        if node.tag not in _SCALAR_TAGS:
            raise fail("SRG005", f"tag {node.tag!r} is not allowed", self.loc(node))
        try:
            value = self._scalar.construct_object(node)
        except Exception:  # noqa: BLE001 - any constructor failure is a bad text (docstring above)
            kind = node.tag.rsplit(":", 1)[-1]
            raise fail("SRG102", f"{node.value[:40]!r} is not a valid {kind}", self.loc(node)) from None
        if isinstance(value, float) and not math.isfinite(value):
            raise fail("SRG102", f"non-finite number {node.value!r} is not allowed", self.loc(node))
        return value

    def _build_mapping(self, node, path: tuple, depth: int) -> dict:
        out: dict[str, Any] = {}
        merged: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                for source in self._merge_sources(value_node, key_node):
                    for k, v in self.build(source, path, depth + 1).items():
                        merged.setdefault(k, v)
                continue
            key = self._key(key_node)
            if key in out:
                raise fail("SRG007", f"duplicate key {key!r}", self.loc(key_node))
            out[key] = self.build(value_node, path + (key,), depth + 1)
        for k, v in merged.items():  # explicit keys win over merged ones, as in YAML 1.1
            out.setdefault(k, v)
        return out

    def _merge_sources(self, node, key_node):
        yaml = self._yaml
        if isinstance(node, yaml.MappingNode):
            return [node]
        if isinstance(node, yaml.SequenceNode) and all(isinstance(n, yaml.MappingNode) for n in node.value):
            return node.value
        raise fail("SRG107", "a merge key `<<` takes a mapping or a list of mappings", self.loc(key_node))

    def _key(self, key_node) -> str:
        yaml = self._yaml
        if not isinstance(key_node, yaml.ScalarNode):
            raise fail("SRG102", "mapping keys must be plain strings or integers", self.loc(key_node))
        key = self._build_scalar(key_node)
        if isinstance(key, bool) or not isinstance(key, (str, int)):
            raise fail("SRG102", f"mapping key {key_node.value!r} must be a string or an integer", self.loc(key_node))
        return str(key)  # integer keys (explicit layer maps: {0: 13}) become "0"
