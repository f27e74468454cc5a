"""The condition language of recipes (`when:`, `that:`), parsed by hand and never `eval`-ed.

    pp_size == 1 and kv_cache_dtype in ['fp8', 'fp8_e4m3']
    draft.backbone_hidden_size == target.hidden_size
    target.num_kv_heads % tp_size == 0 or tp_size % target.num_kv_heads == 0

Values are null, booleans, integers, floats, strings and lists of those. Operators: `or`, `and`,
`not`, comparisons `== != < <= > >=`, `in` / `not in` (right side a list), `+ - * // %`, unary
`-`, parentheses, list literals. Names are runtime facts (`pp_size`) or model facts
(`draft.hidden_size`). Types are strict: `and`/`or`/`not` take booleans only, `<` compares two
numbers or two strings, arithmetic takes numbers only, so a typo fails loudly instead of being
"truthy". Size limits keep parsing and evaluation bounded.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

MAX_LENGTH = 1000
MAX_DEPTH = 32


class ExprError(Exception):
    """Raised with a diagnostic code and the 0-based column inside the expression text."""

    def __init__(self, code: str, message: str, column: int = 0):
        super().__init__(message)
        self.code = code
        self.message = message
        self.column = column


_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+\.\d+|\d+)|(?P<str>'[^'\\]*'|\"[^\"\\]*\")|(?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)"
    r"|(?P<op>==|!=|<=|>=|//|[<>+\-*%()\[\],]))"
)
_KEYWORDS = {"and", "or", "not", "in", "true", "false", "null", "True", "False", "None"}


@dataclass(frozen=True)
class Tok:
    kind: str  # num, str, name, op, kw, end
    text: str
    col: int


def tokenize(text: str) -> list[Tok]:
    toks: list[Tok] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            bad = text[pos:].lstrip()
            col = len(text) - len(bad)
            raise ExprError("SRG110", f"unexpected character {bad[:1]!r}", col)
        kind = m.lastgroup
        value = m.group(kind)
        col = m.start(kind)
        if kind == "name" and "__" in value:
            raise ExprError("SRG110", f"names may not contain '__' ({value!r})", col)
        if kind == "name" and value in _KEYWORDS:
            kind = "kw"
        toks.append(Tok(kind, value, col))
        pos = m.end()
    toks.append(Tok("end", "", len(text)))
    return toks


# AST nodes are tuples: ("lit", value) | ("name", "draft.hidden_size", col) | ("list", [nodes])
# | ("not", node) | ("neg", node, col) | ("bin", op, left, right, col)


class _Parser:
    def __init__(self, text: str):
        self.toks = tokenize(text)
        self.i = 0
        self.depth = 0

    def peek(self) -> Tok:
        return self.toks[self.i]

    def take(self) -> Tok:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def expect(self, text: str) -> Tok:
        tok = self.take()
        if tok.text != text:
            raise ExprError("SRG110", f"expected {text!r}, found {tok.text or 'end of expression'!r}", tok.col)
        return tok

    def _enter(self, col: int):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ExprError("SRG113", f"expression nests deeper than {MAX_DEPTH} levels", col)

    def parse(self):
        node = self.or_()
        tok = self.peek()
        if tok.kind != "end":
            raise ExprError("SRG110", f"unexpected {tok.text!r}", tok.col)
        return node

    def _left_assoc(self, ops: tuple[str, ...], operand):
        """operand (op operand)*, folded to the left: `a - b - c` is `(a - b) - c`."""
        node = operand()
        while self.peek().text in ops:
            tok = self.take()
            node = ("bin", tok.text, node, operand(), tok.col)
        return node

    def _prefix(self, op: str, kind: str, operand, otherwise):
        """`op operand` (nesting counted against MAX_DEPTH), else whatever `otherwise` parses."""
        if self.peek().text != op:
            return otherwise()
        tok = self.take()
        self._enter(tok.col)
        node = (kind, operand(), tok.col)
        self.depth -= 1
        return node

    def or_(self):
        return self._left_assoc(("or",), self.and_)

    def and_(self):
        return self._left_assoc(("and",), self.not_)

    def not_(self):
        return self._prefix("not", "not", self.not_, self.cmp)

    def cmp(self):
        node = self.add()
        tok = self.peek()
        if tok.text in ("==", "!=", "<", "<=", ">", ">=", "in"):
            self.take()
            return ("bin", tok.text, node, self.add(), tok.col)
        if tok.text == "not" and self.toks[self.i + 1].text == "in":
            self.take(), self.take()
            return ("bin", "not in", node, self.add(), tok.col)
        return node

    def add(self):
        return self._left_assoc(("+", "-"), self.mul)

    def mul(self):
        return self._left_assoc(("*", "//", "%"), self.unary)

    def unary(self):
        return self._prefix("-", "neg", self.unary, self.atom)

    def atom(self):
        tok = self.take()
        if tok.kind == "num":
            return ("lit", float(tok.text) if "." in tok.text else int(tok.text))
        if tok.kind == "str":
            return ("lit", tok.text[1:-1])
        if tok.kind == "kw" and tok.text in ("true", "True"):
            return ("lit", True)
        if tok.kind == "kw" and tok.text in ("false", "False"):
            return ("lit", False)
        if tok.kind == "kw" and tok.text in ("null", "None"):
            return ("lit", None)
        if tok.kind == "name":
            return ("name", tok.text, tok.col)
        if tok.text == "(":
            self._enter(tok.col)
            node = self.or_()
            self.expect(")")
            self.depth -= 1
            return node
        if tok.text == "[":
            self._enter(tok.col)
            items = []
            if self.peek().text != "]":
                items.append(self.or_())
                while self.peek().text == ",":
                    self.take()
                    items.append(self.or_())
            self.expect("]")
            self.depth -= 1
            return ("list", items)
        raise ExprError("SRG110", f"unexpected {tok.text or 'end of expression'!r}", tok.col)


@dataclass(frozen=True)
class Expr:
    """A parsed condition. `names` lets the recipe loader reject unknown names before any model is read."""

    text: str
    tree: tuple

    @property
    def names(self) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []

        def walk(node):
            if node[0] == "name":
                out.append((node[1], node[2]))
            elif node[0] == "list":
                for item in node[1]:
                    walk(item)
            elif node[0] in ("not", "neg"):
                walk(node[1])
            elif node[0] == "bin":
                walk(node[2]), walk(node[3])

        walk(self.tree)
        return out

    def evaluate(self, lookup: Callable[[str], Any]) -> Any:
        return _eval(self.tree, lookup)


def parse(text: str) -> Expr:
    if not isinstance(text, str):
        raise ExprError("SRG102", "an expression must be a string")
    if len(text) > MAX_LENGTH:
        raise ExprError("SRG113", f"expression longer than {MAX_LENGTH} characters")
    if not text.strip():
        raise ExprError("SRG110", "empty expression")
    return Expr(text, _Parser(text).parse())


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _eval(node: tuple, lookup: Callable[[str], Any]) -> Any:
    kind = node[0]
    if kind == "lit":
        return node[1]
    if kind == "name":
        return lookup(node[1])
    if kind == "list":
        return [_eval(n, lookup) for n in node[1]]
    if kind == "not":
        v = _eval(node[1], lookup)
        if not isinstance(v, bool):
            raise ExprError("SRG112", f"`not` needs a boolean, got {v!r}", node[2])
        return not v
    if kind == "neg":
        v = _eval(node[1], lookup)
        if not _is_num(v):
            raise ExprError("SRG112", f"unary `-` needs a number, got {v!r}", node[2])
        return -v
    _, op, left_node, right_node, col = node
    left = _eval(left_node, lookup)
    if op in ("and", "or"):
        if not isinstance(left, bool):
            raise ExprError("SRG112", f"`{op}` needs booleans, got {left!r}", col)
        if (op == "and" and not left) or (op == "or" and left):
            return left
        right = _eval(right_node, lookup)
        if not isinstance(right, bool):
            raise ExprError("SRG112", f"`{op}` needs booleans, got {right!r}", col)
        return right
    right = _eval(right_node, lookup)
    if op == "==":
        return left == right and type(left) is type(right) or (_is_num(left) and _is_num(right) and left == right)
    if op == "!=":
        return not _eval(("bin", "==", ("lit", left), ("lit", right), col), lookup)
    if op in ("in", "not in"):
        if not isinstance(right, list):
            raise ExprError("SRG112", f"`{op}` needs a list on the right, got {right!r}", col)
        found = any(_eval(("bin", "==", ("lit", left), ("lit", r), col), lookup) for r in right)
        return found if op == "in" else not found
    if op in ("<", "<=", ">", ">="):
        if not ((_is_num(left) and _is_num(right)) or (isinstance(left, str) and isinstance(right, str))):
            raise ExprError("SRG112", f"cannot compare {left!r} {op} {right!r}", col)
        return {"<": left < right, "<=": left <= right, ">": left > right, ">=": left >= right}[op]
    if not (_is_num(left) and _is_num(right)):
        raise ExprError("SRG112", f"`{op}` needs numbers, got {left!r} and {right!r}", col)
    try:
        return _arith(op, left, right, col)
    except OverflowError:  # a huge integer meets a float: 10**400 + 1.5
        raise ExprError("SRG112", "arithmetic result too large", col) from None


def _arith(op: str, left: Any, right: Any, col: int) -> Any:
    if op == "+":
        return left + right
    if op == "-":
        return left - right
    if op == "*":
        result = left * right
        if _is_num(result) and abs(result) > 1 << 128:
            raise ExprError("SRG112", "arithmetic result too large", col)
        return result
    if right == 0:
        raise ExprError("SRG112", f"`{op}` by zero", col)
    return left // right if op == "//" else left % right
