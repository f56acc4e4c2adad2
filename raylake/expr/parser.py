"""``parse_filter``: the SQL-like filter strings users write, e.g. ``"label = 1 and dt = '2024-01-01'"``.

A hand-written tokenizer and recursive-descent parser, so that every error points at
the offending character (:class:`FilterParseError` carries the position). The parser
builds raw nodes without simplification, so ``parse_filter(str(e)) == e``.

Grammar (keywords case-insensitive; precedence NOT > AND > OR)::

    filter    := or_expr EOF
    or_expr   := and_expr ("or" and_expr)*
    and_expr  := not_expr ("and" not_expr)*
    not_expr  := "not" not_expr | "(" or_expr ")" | "true" | "false" | predicate
    predicate := column OP literal | literal OP column    (OP: = == != <> < <= > >=)
               | column ["not"] "in" "(" [literal ("," literal)*] ")"
               | column "is" ["not"] "null"
               | column ["not"] "like" string
               | column ["not"] "between" literal "and" literal
               | "starts_with" "(" column "," string ")"

``==`` is an alias of ``=`` (the habit of pandas and Polars users) and ``<>`` of ``!=``.
``between`` is inclusive and parses to ``column >= low and column <= high``;
``starts_with(c, 'p')`` to ``c like 'p%'`` with the prefix's wildcards escaped.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from raylake.errors import FilterError, FilterParseError
from raylake.expr._syntax import FLIPPED_OP, IDENTIFIER_RE, KEYWORDS
from raylake.expr.like import escape_like
from raylake.expr.tree import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    Compare,
    Expr,
    In,
    IsNull,
    Like,
    Not,
    NotIn,
    NotNull,
    Or,
)

_NUMBER_RE = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_NAME_CHAR_RE = re.compile(r"[A-Za-z0-9_.]")
_OPS = ("<=", ">=", "<>", "!=", "==", "=", "<", ">")  # longest first
_OP_CANONICAL = {"==": "=", "<>": "!="}
_QUOTES = {"'": "string literal", '"': "quoted column name", "`": "quoted column name"}
# Python and pandas habits the grammar does not take, with the SQL to write instead.
_PYTHON_HINTS = {
    "&": "use 'and'",
    "|": "use 'or'",
    "!": "use 'not', or '!=' for not equal",
    "~": "use 'not'",
}


@dataclass(frozen=True)
class Token:
    """One lexeme: ``kind`` is ident, kw, number, string, op, ``(``, ``)``, ``,`` or eof."""

    kind: str
    value: Any
    pos: int
    text: str

    def describe(self) -> str:
        return "end of filter" if self.kind == "eof" else repr(self.text)


def _read_quoted(text: str, start: int) -> tuple[str, int]:
    """Read a quoted run starting at ``text[start]``; a doubled quote is an escaped quote."""
    quote, parts, i = text[start], [], start + 1
    while True:
        j = text.find(quote, i)
        if j == -1:
            raise FilterParseError(f"unterminated {_QUOTES[quote]}", text, start)
        parts.append(text[i:j])
        if text.startswith(quote, j + 1):
            parts.append(quote)
            i = j + 2
        else:
            return "".join(parts), j + 1


def _number(text: str, pos: int) -> Token | None:
    match = _NUMBER_RE.match(text, pos)
    if match is None:
        return None
    end = match.end()
    if end < len(text) and _NAME_CHAR_RE.match(text, end):
        raise FilterParseError("invalid number", text, pos)
    raw = match.group()
    return Token("number", number_value(raw), pos, raw)


def number_value(raw: str) -> int | float | Decimal:
    """A number literal's value: an int, or a float where the float is the number
    written (``0.1``, ``1.50``, ``1e999`` as infinity), else the exact ``Decimal``
    (``123456789012345678.91``, ``9007199254740993.0``), which a float would round to
    another number: on a decimal or int64 column that selects another value's rows."""
    if not any(c in raw for c in ".eE"):
        return int(raw)
    value = float(raw)
    exact = Decimal(raw)
    if not math.isfinite(value) or Decimal(repr(value)) == exact:
        return value
    return exact


def _next_token(text: str, pos: int) -> Token:
    ch = text[pos]
    if ch in "(),":
        return Token(ch, ch, pos, ch)
    op = next((o for o in _OPS if text.startswith(o, pos)), None)
    if op is not None:
        return Token("op", _OP_CANONICAL.get(op, op), pos, op)
    if ch in _QUOTES:
        value, end = _read_quoted(text, pos)
        if ch != "'" and not value:
            raise FilterParseError("empty column name", text, pos)
        return Token("string" if ch == "'" else "ident", value, pos, text[pos:end])
    if ch.isdigit() or ch in "+-.":
        number = _number(text, pos)
        if number is not None:
            return number
    match = IDENTIFIER_RE.match(text, pos)
    if match is None:
        hint = f" ({_PYTHON_HINTS[ch]})" if ch in _PYTHON_HINTS else ""
        raise FilterParseError(f"unexpected character {ch!r}{hint}", text, pos)
    word = match.group()
    if word.lower() in KEYWORDS:
        return Token("kw", word.lower(), pos, word)
    return Token("ident", word, pos, word)


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into tokens, ending with an ``eof`` token at ``len(text)``."""
    tokens, pos = [], 0
    while pos < len(text):
        if text[pos].isspace():
            pos += 1
            continue
        token = _next_token(text, pos)
        tokens.append(token)
        pos += len(token.text)
    tokens.append(Token("eof", None, len(text), ""))
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.index = 0

    def peek(self, ahead: int = 0) -> Token:
        return self.tokens[min(self.index + ahead, len(self.tokens) - 1)]

    def advance(self) -> Token:
        token = self.peek()
        self.index += 1
        return token

    def at_kw(self, word: str, ahead: int = 0) -> bool:
        token = self.peek(ahead)
        return token.kind == "kw" and token.value == word

    def fail(self, message: str, token: Token) -> FilterParseError:
        return FilterParseError(message, self.text, token.pos)

    def parse(self) -> Expr:
        if self.peek().kind == "eof":
            raise FilterParseError("empty filter", self.text, 0)
        expr = self.parse_or()
        token = self.peek()
        if token.kind == ")":
            raise self.fail("unbalanced ')'", token)
        if token.kind != "eof":
            raise self.fail(f"unexpected {token.describe()} after a complete filter", token)
        return expr

    def parse_or(self) -> Expr:
        expr = self.parse_and()
        while self.at_kw("or"):
            self.advance()
            expr = Or(expr, self.parse_and())
        return expr

    def parse_and(self) -> Expr:
        expr = self.parse_not()
        while self.at_kw("and"):
            self.advance()
            expr = And(expr, self.parse_not())
        return expr

    def parse_not(self) -> Expr:
        if self.at_kw("not"):
            self.advance()
            return Not(self.parse_not())
        token = self.peek()
        if token.kind == "(":
            self.advance()
            expr = self.parse_or()
            if self.peek().kind != ")":
                raise self.fail(
                    f"missing ')' for the '(' opened at position {token.pos}", self.peek()
                )
            self.advance()
            return expr
        if token.kind == "kw" and token.value in ("true", "false") and self.peek(1).kind != "op":
            self.advance()
            return AlwaysTrue() if token.value == "true" else AlwaysFalse()
        return self.parse_predicate()

    def parse_predicate(self) -> Expr:
        token = self.peek()
        if (
            token.kind == "ident"
            and token.text.lower() == "starts_with"
            and self.peek(1).kind == "("
        ):
            return self.parse_starts_with()
        if token.kind == "ident":
            self.advance()
            return self.parse_column_tail(token.value)
        if token.kind in ("number", "string") or self.at_kw("true") or self.at_kw("false"):
            return self.parse_literal_first()
        if self.at_kw("null"):
            raise self.fail("null is only valid in 'is null' / 'is not null'", token)
        raise self.fail(
            f"unexpected {token.describe()}; expected a column name, a literal, 'not' or '('",
            token,
        )

    def parse_literal_first(self) -> Expr:
        value = self.parse_literal(None)
        op = self.peek()
        if op.kind != "op":
            raise self.fail(
                f"unexpected {op.describe()}; expected a comparison operator after a literal", op
            )
        self.advance()
        column = self.peek()
        if column.kind != "ident":
            raise self.fail(f"unexpected {column.describe()}; expected a column name", column)
        self.advance()
        return Compare(FLIPPED_OP[op.value], column.value, value)

    def parse_column_tail(self, column: str) -> Expr:
        token = self.peek()
        if token.kind in ("eof", ")") or self.at_kw("and") or self.at_kw("or"):
            # A boolean column is a condition by itself (``late``, ``not late``), as in
            # SQL, merge predicates and Ray's ``col("late")``; binding checks its type.
            return Compare("=", column, True)
        if token.kind == "op":
            self.advance()
            return Compare(token.value, column, self.parse_literal(token.value))
        if self.at_kw("in"):
            self.advance()
            return In(column, self.parse_values())
        if self.at_kw("not") and self.at_kw("in", 1):
            self.advance()
            self.advance()
            return NotIn(column, self.parse_values())
        if self.at_kw("is"):
            return self.parse_is(column)
        negated = self.at_kw("not") and (self.at_kw("like", 1) or self.at_kw("between", 1))
        if negated:
            self.advance()
        if self.at_kw("like"):
            self.advance()
            pattern = self.peek()
            try:
                return Like(column, self.expect_string("'like'"), negated)
            except FilterError as exc:  # a malformed pattern: point at it
                if isinstance(exc, FilterParseError):
                    raise
                raise self.fail(str(exc), pattern) from None
        if self.at_kw("between"):
            self.advance()
            between = self.parse_between(column)
            return Not(between) if negated else between
        raise self.fail(
            f"unexpected {token.describe()}; expected a comparison operator, 'in', "
            f"'not in', 'is', 'like' or 'between' after column {column!r}",
            token,
        )

    def parse_between(self, column: str) -> Expr:
        low = self.parse_literal(">=")
        if not self.at_kw("and"):
            token = self.peek()
            raise self.fail(f"unexpected {token.describe()}; expected 'and' in 'between'", token)
        self.advance()
        high = self.parse_literal("<=")
        return And(Compare(">=", column, low), Compare("<=", column, high))

    def parse_starts_with(self) -> Expr:
        self.advance()  # starts_with
        self.advance()  # (
        column = self.peek()
        if column.kind != "ident":
            raise self.fail(f"unexpected {column.describe()}; expected a column name", column)
        self.advance()
        comma = self.advance()
        if comma.kind != ",":
            raise self.fail(f"unexpected {comma.describe()}; expected ','", comma)
        prefix = self.expect_string("starts_with's prefix")
        close = self.advance()
        if close.kind != ")":
            raise self.fail(f"unexpected {close.describe()}; expected ')'", close)
        return Like(column.value, escape_like(prefix) + "%")

    def expect_string(self, what: str) -> str:
        token = self.peek()
        if token.kind != "string":
            raise self.fail(f"unexpected {token.describe()}; {what} needs a quoted string", token)
        self.advance()
        value: str = token.value
        return value

    def parse_is(self, column: str) -> Expr:
        self.advance()
        negated = self.at_kw("not")
        if negated:
            self.advance()
        token = self.peek()
        if not self.at_kw("null"):
            raise self.fail(f"unexpected {token.describe()}; expected 'null' after 'is'", token)
        self.advance()
        return NotNull(column) if negated else IsNull(column)

    def parse_literal(self, op: str | None) -> Any:
        token = self.peek()
        if token.kind in ("number", "string"):
            self.advance()
            return token.value
        if self.at_kw("true") or self.at_kw("false"):
            self.advance()
            return token.value == "true"
        if self.at_kw("null"):
            hint = "is not null" if op == "!=" else "is null"
            what = f"'{op} null' is never true" if op else "null never matches in a value list"
            raise self.fail(f"{what}; use '{hint}'", token)
        if token.kind == "ident":
            raise self.fail(
                f"comparing with column {token.value!r} is not supported; expected a literal"
                + _literal_hint(token, op),
                token,
            )
        raise self.fail(f"unexpected {token.describe()}; expected a literal value", token)

    def parse_values(self) -> tuple[Any, ...]:
        token = self.peek()
        if token.kind != "(":
            raise self.fail(f"unexpected {token.describe()}; expected '(' after 'in'", token)
        self.advance()
        values: list[Any] = []
        if self.peek().kind == ")":
            self.advance()
            return ()
        while True:
            values.append(self.parse_literal(None))
            token = self.advance()
            if token.kind == ")":
                return tuple(values)
            if token.kind == "eof":
                raise self.fail("missing ')' to close the value list", token)
            if token.kind != ",":
                raise self.fail(f"unexpected {token.describe()}; expected ',' or ')'", token)


def _literal_hint(token: Token, op: str | None) -> str:
    """What a pandas or Python habit meant: a double-quoted string, or None for null."""
    if token.text.startswith('"'):
        quoted = "'" + str(token.value).replace("'", "''") + "'"
        return f" (double quotes name a column: write the string as {quoted})"
    if token.text == "None":
        return f" (write '{'is not null' if op == '!=' else 'is null'}' for nulls)"
    return ""


def parse_filter(text: str) -> Expr:
    """Parse a filter string into an expression tree (unbound: literals as written).

    Raises :class:`FilterParseError` with the position of the offending token.
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_filter expects a string, got {type(text).__name__}")
    try:
        return _Parser(text).parse()
    except RecursionError:
        raise FilterParseError("filter nests too deeply", text, 0) from None
