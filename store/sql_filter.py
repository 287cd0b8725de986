"""SQL92 property filters, RocketMQ's grammar (``MessageSelector.bySql``), parsed once, evaluated per message.

Grammar (keywords are case-insensitive)::

    expr       := or
    or         := and (OR and)*
    and        := not (AND not)*
    not        := NOT not | predicate
    predicate  := operand ( cmp operand
                          | [NOT] BETWEEN operand AND operand
                          | [NOT] IN '(' literal (',' literal)* ')'
                          | IS [NOT] NULL
                          | [NOT] (CONTAINS | STARTSWITH | ENDSWITH) string )
                | '(' expr ')' | TRUE | FALSE
    cmp        := '=' | '<>' | '!=' | '<' | '<=' | '>' | '>='
    operand    := identifier | number | 'string' | TRUE | FALSE | NULL

Semantics carried over from RocketMQ's filter module: properties are strings; compared with a number they are
read as a number (a value that is not a number makes the comparison unknown); ``<``/``>``/``BETWEEN`` take numbers
only; a missing property is NULL, and any comparison with NULL is unknown; AND/OR/NOT use SQL's three-valued
logic; a message is selected only when the whole expression is TRUE. ``TAGS`` is the message's tag property.

Why our own parser: the grammar is small, and a malformed expression must give the position of the error, which a
client shows to a user who typed it on the command line.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from raftmq.store.errors import StoreError
from raftmq.store.java import java_string_hash

Value = str | int | float | bool | None
Eval = Callable[[Mapping[str, str]], Value]

MAX_EXPRESSION_LENGTH = 4096


class InvalidFilterExpressionError(StoreError, ValueError):
    """A malformed SQL92 expression; ``position`` is the 0-based character where parsing failed."""

    def __init__(self, expression: str, position: int, what: str):
        self.expression = expression
        self.position = position
        near = expression[position:position + 12]
        where = f"near {near!r}" if near else "at the end"
        super().__init__(f"invalid SQL92 filter at position {position} ({where}): {what}")


_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<num>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?[lLdDfF]?)
  | (?P<str>'(?:[^']|'')*')
  | (?P<id>[A-Za-z_$][A-Za-z0-9_.$]*)
  | (?P<op><>|!=|<=|>=|=|<|>|\(|\)|,|-|\+)
""", re.VERBOSE)

_KEYWORDS = frozenset({"AND", "OR", "NOT", "BETWEEN", "IN", "IS", "NULL", "TRUE", "FALSE", "CONTAINS",
                       "STARTSWITH", "ENDSWITH"})
_CMP = frozenset({"=", "<>", "!=", "<", "<=", ">", ">="})


@dataclass(frozen=True, slots=True)
class _Tok:
    kind: str   # num | str | id | kw | op | end
    text: str
    pos: int
    value: Value = None


def _tokenize(expr: str) -> list[_Tok]:
    out: list[_Tok] = []
    pos = 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None:
            if expr[pos] == "'":
                raise InvalidFilterExpressionError(expr, pos, "string literal is not closed; end it with '")
            raise InvalidFilterExpressionError(expr, pos, f"unexpected character {expr[pos]!r}")
        kind, text = m.lastgroup, m.group()
        if kind == "num":
            digits = text.rstrip("lLdDfF")
            value: Value = float(digits) if any(c in digits for c in ".eE") or text[-1] in "dDfF" else int(digits)
            out.append(_Tok("num", text, pos, value))
        elif kind == "str":
            out.append(_Tok("str", text, pos, text[1:-1].replace("''", "'")))
        elif kind == "id":
            up = text.upper()
            out.append(_Tok("kw", up, pos) if up in _KEYWORDS else _Tok("id", text, pos))
        elif kind == "op":
            out.append(_Tok("op", text, pos))
        pos = m.end()
    out.append(_Tok("end", "", len(expr)))
    return out


# ---------------------------------------------------------------------------------------------- evaluation
def _as_number(v: Value) -> int | float | None:
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return v
    try:
        return int(v)
    except ValueError:
        try:
            return float(v)
        except ValueError:
            return None


def _as_bool(v: Value) -> bool | None:
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    return None


def _equal(a: Value, b: Value) -> bool | None:
    if a is None or b is None:
        return None
    if isinstance(a, bool) or isinstance(b, bool):
        x, y = _as_bool(a), _as_bool(b)
        return None if x is None or y is None else x == y
    if isinstance(a, (int, float)) or isinstance(b, (int, float)):
        x, y = _as_number(a), _as_number(b)
        return None if x is None or y is None else x == y
    return a == b


def _order(a: Value, b: Value) -> int | None:
    x, y = _as_number(a), _as_number(b)
    if x is None or y is None:
        return None
    return (x > y) - (x < y)


def _not(v: Value) -> Value:
    return None if v is None else not v


class _Parser:
    def __init__(self, expr: str):
        self.expr = expr
        self.toks = _tokenize(expr)
        self.i = 0

    # -------------------------------------------------------------- helpers
    @property
    def tok(self) -> _Tok:
        return self.toks[self.i]

    def fail(self, what: str, tok: _Tok | None = None) -> InvalidFilterExpressionError:
        return InvalidFilterExpressionError(self.expr, (tok or self.tok).pos, what)

    def is_kw(self, *words: str) -> bool:
        return self.tok.kind == "kw" and self.tok.text in words

    def is_op(self, *ops: str) -> bool:
        return self.tok.kind == "op" and self.tok.text in ops

    def take(self) -> _Tok:
        t = self.tok
        self.i += 1
        return t

    def expect_kw(self, word: str) -> None:
        if not self.is_kw(word):
            raise self.fail(f"expected {word}")
        self.i += 1

    def expect_op(self, op: str) -> None:
        if not self.is_op(op):
            raise self.fail(f"expected {op!r}")
        self.i += 1

    # -------------------------------------------------------------- grammar
    def parse(self) -> Eval:
        if self.tok.kind == "end":
            raise self.fail("the expression is empty; give a condition such as a > 5, or use a tag filter")
        fn = self.or_()
        if self.tok.kind != "end":
            raise self.fail("expected AND, OR or the end of the expression")
        return fn

    def or_(self) -> Eval:
        parts = [self.and_()]
        while self.is_kw("OR"):
            self.i += 1
            parts.append(self.and_())
        if len(parts) == 1:
            return parts[0]

        def fn(p: Mapping[str, str]) -> Value:
            unknown = False
            for part in parts:
                v = part(p)
                if v is True:
                    return True
                if v is None:
                    unknown = True
            return None if unknown else False
        sets = [_tags_of(part) for part in parts]
        if all(t is not None for t in sets):
            fn.tags = frozenset().union(*sets)  # type: ignore[attr-defined]
        return fn

    def and_(self) -> Eval:
        parts = [self.not_()]
        while self.is_kw("AND"):
            self.i += 1
            parts.append(self.not_())
        if len(parts) == 1:
            return parts[0]

        def fn(p: Mapping[str, str]) -> Value:
            unknown = False
            for part in parts:
                v = part(p)
                if v is False:
                    return False
                if v is None:
                    unknown = True
            return None if unknown else True
        sets = [t for t in (_tags_of(part) for part in parts) if t is not None]
        if sets:
            fn.tags = frozenset.intersection(*sets)  # type: ignore[attr-defined]
        return fn

    def not_(self) -> Eval:
        if self.is_kw("NOT"):
            self.i += 1
            inner = self.not_()
            return lambda p: _not(inner(p))
        return self.predicate()

    def predicate(self) -> Eval:
        start = self.tok
        if self.is_op("("):
            self.i += 1
            inner = self.or_()
            self.expect_op(")")
            return inner
        left, left_kind = self.operand()
        if self.tok.kind == "op" and self.tok.text in _CMP:
            op = self.take()
            right, right_kind = self.operand()
            if op.text in ("<", "<=", ">", ">="):
                for kind, tok in ((left_kind, start), (right_kind, op)):
                    if kind in ("str", "bool", "null"):
                        raise self.fail(f"{op.text} compares numbers; a {_KIND_NAMES[kind]} cannot be ordered", tok)
                test = {"<": lambda c: c < 0, "<=": lambda c: c <= 0, ">": lambda c: c > 0,
                        ">=": lambda c: c >= 0}[op.text]

                def cmp(p: Mapping[str, str]) -> Value:
                    c = _order(left(p), right(p))
                    return None if c is None else test(c)
                return cmp
            if op.text == "=":
                eq = lambda p: _equal(left(p), right(p))  # noqa: E731
                if start.kind == "id" and start.text == "TAGS" and right_kind == "str":
                    eq.tags = frozenset([self.toks[self.i - 1].value])  # type: ignore[attr-defined]
                return eq
            return lambda p: _not(_equal(left(p), right(p)))
        negate = False
        if self.is_kw("NOT"):
            negate = True
            self.i += 1
            if not self.is_kw("BETWEEN", "IN", "CONTAINS", "STARTSWITH", "ENDSWITH"):
                raise self.fail("expected BETWEEN, IN, CONTAINS, STARTSWITH or ENDSWITH after NOT")
        if self.is_kw("BETWEEN"):
            self.i += 1
            low_tok = self.tok
            low, low_kind = self.operand()
            self.expect_kw("AND")
            high_tok = self.tok
            high, high_kind = self.operand()
            for kind, tok in ((left_kind, start), (low_kind, low_tok), (high_kind, high_tok)):
                if kind in ("str", "bool", "null"):
                    raise self.fail(f"BETWEEN compares numbers; a {_KIND_NAMES[kind]} cannot be ordered", tok)

            def between(p: Mapping[str, str]) -> Value:
                v = left(p)
                a, b = _order(v, low(p)), _order(v, high(p))
                return None if a is None or b is None else a >= 0 and b <= 0
            return (lambda p: _not(between(p))) if negate else between
        if self.is_kw("IN"):
            self.i += 1
            self.expect_op("(")
            values: list[str] = []
            while True:
                if self.tok.kind != "str":
                    raise self.fail("IN takes a list of string literals, e.g. a IN ('x', 'y')")
                values.append(self.take().value)  # type: ignore[arg-type]
                if self.is_op(","):
                    self.i += 1
                    continue
                self.expect_op(")")
                break
            members = frozenset(values)

            def in_(p: Mapping[str, str]) -> Value:
                v = left(p)
                return None if v is None else str(v) in members
            if not negate and start.kind == "id" and start.text == "TAGS":
                in_.tags = members  # type: ignore[attr-defined]
            return (lambda p: _not(in_(p))) if negate else in_
        if self.is_kw("CONTAINS", "STARTSWITH", "ENDSWITH"):
            word = self.take().text
            if self.tok.kind != "str":
                raise self.fail(f"{word} takes a string literal, e.g. a {word} 'abc'")
            needle: str = self.take().value  # type: ignore[assignment]
            test_s = {"CONTAINS": lambda s: needle in s, "STARTSWITH": lambda s: s.startswith(needle),
                      "ENDSWITH": lambda s: s.endswith(needle)}[word]

            def text_test(p: Mapping[str, str]) -> Value:
                v = left(p)
                return None if not isinstance(v, str) else test_s(v)
            return (lambda p: _not(text_test(p))) if negate else text_test
        if self.is_kw("IS"):
            self.i += 1
            is_not = False
            if self.is_kw("NOT"):
                is_not = True
                self.i += 1
            self.expect_kw("NULL")
            return (lambda p: left(p) is not None) if is_not else (lambda p: left(p) is None)
        if left_kind == "bool":
            return left
        raise self.fail("expected a comparison (=, <>, <, <=, >, >=, BETWEEN, IN, IS [NOT] NULL, CONTAINS, "
                        "STARTSWITH, ENDSWITH)")

    def operand(self) -> tuple[Eval, str]:
        t = self.tok
        if t.kind == "id":
            self.i += 1
            name = t.text
            return (lambda p: p.get(name)), "prop"
        if t.kind == "num":
            self.i += 1
            v = t.value
            return (lambda p: v), "num"
        if t.kind == "op" and t.text in ("-", "+") and self.toks[self.i + 1].kind == "num":
            self.i += 2
            n = self.toks[self.i - 1].value
            v = -n if t.text == "-" else n  # type: ignore[operator]
            return (lambda p: v), "num"
        if t.kind == "str":
            self.i += 1
            s = t.value
            return (lambda p: s), "str"
        if self.is_kw("TRUE", "FALSE"):
            self.i += 1
            b = t.text == "TRUE"
            return (lambda p: b), "bool"
        if self.is_kw("NULL"):
            self.i += 1
            return (lambda p: None), "null"
        if t.kind == "end":
            raise self.fail("the expression ends too early; expected a property name or a value")
        raise self.fail("expected a property name, a number, a 'string', TRUE, FALSE or NULL")


_KIND_NAMES = {"str": "string", "bool": "boolean", "null": "NULL"}


def _tags_of(fn: Eval) -> frozenset[str] | None:
    """The tags a sub-expression can only be TRUE for (TAGS = / IN, combined through AND / OR), else None."""
    return getattr(fn, "tags", None)


@dataclass(frozen=True)
class SqlFilter:
    """A compiled SQL92 filter; ``matches(properties)`` is True only when the expression is TRUE."""

    expression: str
    _eval: Eval
    tag_codes: frozenset[int] | None = None  # the expression needs one of these tags: skip others unread

    @classmethod
    def parse(cls, expression: str) -> SqlFilter:
        if not isinstance(expression, str):
            raise InvalidFilterExpressionError(str(expression), 0, "the expression must be a string")
        if len(expression) > MAX_EXPRESSION_LENGTH:
            raise InvalidFilterExpressionError(expression, MAX_EXPRESSION_LENGTH,
                                               f"longer than {MAX_EXPRESSION_LENGTH} characters")
        fn = _Parser(expression).parse()
        tags = _tags_of(fn)
        return cls(expression, fn, None if tags is None else frozenset(java_string_hash(t) for t in tags))

    def matches(self, properties: Mapping[str, str]) -> bool:
        return self._eval(properties) is True

    # the store's filter interface (store.message_store.get_messages): the consume queue's tag hash first (when
    # the expression pins TAGS, a message with another tag is skipped without reading the commit log), then the
    # decoded message's properties
    def matches_code(self, code: int) -> bool:
        return self.tag_codes is None or code in self.tag_codes

    def matches_message(self, message) -> bool:
        return self._eval(message.properties) is True

    def __str__(self) -> str:
        return self.expression
