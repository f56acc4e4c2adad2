"""Value expressions over two row sources, for MERGE (docs/merge.md, docs/filters.md).

The filter grammar compares a column with a literal: that is what pruning and
pushdown need. A merge also computes values (``t.n + s.n``) and compares two
columns (``s.ts > t.ts``), so its clauses parse with this superset: operands of a
comparison are arithmetic over qualified columns (``t.x``, ``s.x``), literals and
``coalesce(...)``. Evaluation (raylake/expr/value_eval.py) is vectorised with pyarrow
compute over whole columns.

Grammar (keywords case-insensitive)::

    pred    := or
    or      := and ("or" and)*
    and     := not ("and" not)*
    not     := "not" not | test
    test    := sum [OP sum | "is" ["not"] "null" | ["not"] "in" "(" literals ")"
                    | ["not"] "between" sum "and" sum | ["not"] "like" string]
    sum     := product (("+" | "-") product)*
    product := unary (("*" | "/") unary)*
    unary   := "-" unary | atom
    atom    := number | string | true | false | null | column
             | "coalesce" "(" sum ("," sum)* ")" | "starts_with" "(" sum "," string ")"
             | "(" pred ")"
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from raylake.errors import FilterError, FilterParseError
from raylake.expr._syntax import IDENTIFIER_RE, KEYWORDS
from raylake.expr.like import check_pattern, escape_like
from raylake.expr.parser import _QUOTES, _number, _read_quoted

_COMPARE = ("<=", ">=", "<>", "!=", "==", "=", "<", ">")
_CANONICAL = {"==": "=", "<>": "!="}
_ARITH = "+-*/"
_FUNCTIONS = {"coalesce"}


@dataclass(frozen=True)
class Ref:
    """A column of the target (``side="t"``) or of the source (``"s"``)."""

    side: str
    name: str

    def __str__(self) -> str:
        return f"{self.side}.{self.name}"


@dataclass(frozen=True)
class Lit:
    value: Any

    def __str__(self) -> str:
        return repr(self.value) if self.value is not None else "null"


@dataclass(frozen=True)
class Op:
    """Arithmetic (``+ - * /``), comparison (``= != < ...``) or ``and``/``or``."""

    op: str
    left: ValueExpr
    right: ValueExpr

    def __str__(self) -> str:
        return f"({self.left} {self.op} {self.right})"


@dataclass(frozen=True)
class Unary:
    """``neg`` (arithmetic minus), ``not``, ``isnull`` or ``notnull``."""

    op: str
    operand: ValueExpr

    def __str__(self) -> str:
        return f"{self.op}({self.operand})"


@dataclass(frozen=True)
class Call:
    name: str
    args: tuple[ValueExpr, ...]

    def __str__(self) -> str:
        return f"{self.name}({', '.join(map(str, self.args))})"


@dataclass(frozen=True)
class InList:
    operand: ValueExpr
    values: tuple[Any, ...]
    negated: bool = False

    def __str__(self) -> str:
        return f"{self.operand} {'not in' if self.negated else 'in'} {self.values}"


@dataclass(frozen=True)
class Like:
    """``operand like pattern``, with the filters' LIKE rules (raylake/expr/like.py)."""

    operand: ValueExpr
    pattern: str
    negated: bool = False

    def __str__(self) -> str:
        return f"{self.operand} {'not like' if self.negated else 'like'} {self.pattern!r}"


ValueExpr = Ref | Lit | Op | Unary | Call | InList | Like


@dataclass(frozen=True)
class _Tok:
    kind: str  # ident, kw, number, string, cmp, arith, (, ), ",", eof
    value: Any
    pos: int
    text: str


def _tokenize(text: str) -> list[_Tok]:
    tokens, pos = [], 0
    while pos < len(text):
        ch = text[pos]
        if ch.isspace():
            pos += 1
            continue
        if ch in "(),":
            tok = _Tok(ch, ch, pos, ch)
        elif ch in _ARITH:
            tok = _Tok("arith", ch, pos, ch)
        elif (op := next((o for o in _COMPARE if text.startswith(o, pos)), None)) is not None:
            tok = _Tok("cmp", _CANONICAL.get(op, op), pos, op)
        elif ch in _QUOTES:
            value, end = _read_quoted(text, pos)
            tok = _Tok("string" if ch == "'" else "ident", value, pos, text[pos:end])
        elif ch.isdigit() or ch == ".":
            number = _number(text, pos)
            if number is None:
                raise FilterParseError(f"unexpected character {ch!r}", text, pos)
            tok = _Tok("number", number.value, pos, number.text)
        else:
            match = IDENTIFIER_RE.match(text, pos)
            if match is None:
                raise FilterParseError(f"unexpected character {ch!r}", text, pos)
            word = match.group()
            end = match.end()
            if word in ("t.", "s.") and end < len(text) and text[end] in '"`':
                # t."my id", SQL's qualified quoted name: one column, as "t.my id" is
                name, end = _read_quoted(text, end)
                tok = _Tok("ident", word + name, pos, text[pos:end])
            else:
                kind = "kw" if word.lower() in KEYWORDS else "ident"
                tok = _Tok(kind, word.lower() if kind == "kw" else word, pos, word)
        tokens.append(tok)
        pos += len(tok.text)
    tokens.append(_Tok("eof", None, len(text), ""))
    return tokens


class _Parser:
    def __init__(self, text: str, sides: str) -> None:
        self.text = text
        self.sides = sides  # the qualifiers allowed here: "ts", "s" or "t"
        self.tokens = _tokenize(text)
        self.i = 0

    def peek(self, ahead: int = 0) -> _Tok:
        return self.tokens[min(self.i + ahead, len(self.tokens) - 1)]

    def next(self) -> _Tok:
        tok = self.peek()
        self.i += 1
        return tok

    def kw(self, word: str, ahead: int = 0) -> bool:
        tok = self.peek(ahead)
        return tok.kind == "kw" and tok.value == word

    def fail(self, message: str, tok: _Tok) -> FilterParseError:
        return FilterParseError(message, self.text, tok.pos)

    def expect(self, kind: str, what: str) -> _Tok:
        tok = self.next()
        if tok.kind != kind:
            desc = "end of expression" if tok.kind == "eof" else repr(tok.text)
            raise self.fail(f"unexpected {desc}; expected {what}", tok)
        return tok

    def whole(self, rule: Callable[[], ValueExpr]) -> ValueExpr:
        if self.peek().kind == "eof":
            raise FilterParseError("empty expression", self.text, 0)
        expr = rule()
        tok = self.peek()
        if tok.kind != "eof":
            raise self.fail(f"unexpected {tok.text!r} after a complete expression", tok)
        return expr

    def pred(self) -> ValueExpr:
        expr = self.conj()
        while self.kw("or"):
            self.next()
            expr = Op("or", expr, self.conj())
        return expr

    def conj(self) -> ValueExpr:
        expr = self.neg()
        while self.kw("and"):
            self.next()
            expr = Op("and", expr, self.neg())
        return expr

    def neg(self) -> ValueExpr:
        if self.kw("not"):
            self.next()
            return Unary("not", self.neg())
        return self.test()

    def test(self) -> ValueExpr:
        left = self.sum()
        tok = self.peek()
        if tok.kind == "cmp":
            self.next()
            return Op(tok.value, left, self.sum())
        if self.kw("is"):
            self.next()
            negated = self.kw("not")
            if negated:
                self.next()
            if not self.kw("null"):
                raise self.fail("expected 'null' after 'is'", self.peek())
            self.next()
            return Unary("notnull" if negated else "isnull", left)
        negated = self.kw("not") and any(self.kw(w, 1) for w in ("in", "between", "like"))
        if negated:
            self.next()
        if self.kw("like"):
            self.next()
            return Like(left, self.pattern("'like'"), negated)
        if self.kw("in"):
            self.next()
            self.expect("(", "'(' after 'in'")
            values: list[Any] = []
            while self.peek().kind != ")":
                values.append(self.literal())
                if self.peek().kind == ",":
                    self.next()
            self.next()
            return InList(left, tuple(values), negated)
        if self.kw("between"):
            self.next()
            low = self.sum()
            if not self.kw("and"):
                raise self.fail("expected 'and' in 'between'", self.peek())
            self.next()
            between = Op("and", Op(">=", left, low), Op("<=", left, self.sum()))
            return Unary("not", between) if negated else between
        return left

    def quoted(self, after: str) -> str:
        tok = self.next()
        if tok.kind != "string":
            raise self.fail(f"expected a quoted string after {after}", tok)
        return str(tok.value)

    def pattern(self, after: str) -> str:
        tok = self.peek()
        text = self.quoted(after)
        try:
            return check_pattern(text)
        except FilterError as exc:
            raise self.fail(str(exc), tok) from None

    def literal(self) -> Any:
        tok = self.next()
        if tok.kind in ("number", "string"):
            return tok.value
        if tok.kind == "arith" and tok.value == "-" and self.peek().kind == "number":
            return -self.next().value
        if tok.kind == "kw" and tok.value in ("true", "false"):
            return tok.value == "true"
        raise self.fail(f"unexpected {tok.text!r}; expected a literal value", tok)

    def sum(self) -> ValueExpr:
        expr = self.product()
        while self.peek().kind == "arith" and self.peek().value in "+-":
            expr = Op(self.next().value, expr, self.product())
        return expr

    def product(self) -> ValueExpr:
        expr = self.unary()
        while self.peek().kind == "arith" and self.peek().value in "*/":
            expr = Op(self.next().value, expr, self.unary())
        return expr

    def unary(self) -> ValueExpr:
        tok = self.peek()
        if tok.kind == "arith" and tok.value == "-":
            self.next()
            operand = self.unary()
            if isinstance(operand, Lit) and isinstance(operand.value, int | float):
                return Lit(-operand.value)
            return Unary("neg", operand)
        return self.atom()

    def atom(self) -> ValueExpr:
        tok = self.next()
        if tok.kind in ("number", "string"):
            return Lit(tok.value)
        if tok.kind == "kw" and tok.value in ("true", "false", "null"):
            return Lit(None if tok.value == "null" else tok.value == "true")
        if tok.kind == "(":
            expr = self.pred()
            self.expect(")", f"')' for the '(' at position {tok.pos}")
            return expr
        if tok.kind == "ident":
            if self.peek().kind == "(" and tok.text.lower() == "starts_with":
                self.next()
                operand = self.sum()
                self.expect(",", "',' and a prefix in starts_with(")
                prefix = self.quoted("starts_with(")  # taken as it is: escaped below
                self.expect(")", "')' closing starts_with(")
                return Like(operand, escape_like(prefix) + "%")
            if self.peek().kind == "(" and tok.text.lower() in _FUNCTIONS:
                self.next()
                args = [self.sum()]
                while self.peek().kind == ",":
                    self.next()
                    args.append(self.sum())
                self.expect(")", "')' closing coalesce(")
                return Call(tok.text.lower(), tuple(args))
            if self.peek().kind == "(":
                known = "coalesce() and starts_with()"
                raise self.fail(f"unknown function {tok.text!r}; merge knows {known}", tok)
            return self.ref(tok)
        desc = "end of expression" if tok.kind == "eof" else repr(tok.text)
        raise self.fail(f"unexpected {desc}; expected a column, a literal or '('", tok)

    def ref(self, tok: _Tok) -> Ref:
        side, dot, name = str(tok.value).partition(".")
        if dot and side in ("t", "s") and name:
            if side not in self.sides:
                where = {"t": "the target (t.)", "s": "the source (s.)"}[self.sides]
                raise self.fail(f"{tok.value!r}: here only columns of {where} exist", tok)
            return Ref(side, name)
        hint = " or ".join(f"{q}.{tok.value}" for q in self.sides)
        raise self.fail(f"column {tok.value!r} needs a qualifier: {hint}", tok)


def parse_value(text: str, sides: str = "ts") -> ValueExpr:
    """Parse a value expression (``"t.n + s.n"``, or a condition such as ``"s.n > 1"``
    for a boolean column); columns are qualified by ``sides``."""
    if not isinstance(text, str):
        raise FilterError(f"an expression must be a string, got {type(text).__name__}")
    parser = _Parser(text, sides)
    try:
        return parser.whole(parser.pred)
    except RecursionError:
        raise FilterParseError("expression nests too deeply", text, 0) from None


def parse_condition(text: str, sides: str = "ts") -> ValueExpr:
    """Parse a condition (``"s.ts > t.ts and not s.deleted"``)."""
    if not isinstance(text, str):
        raise FilterError(f"a predicate must be a string, got {type(text).__name__}")
    parser = _Parser(text, sides)
    try:
        return parser.whole(parser.pred)
    except RecursionError:
        raise FilterParseError("predicate nests too deeply", text, 0) from None


def refs(expr: ValueExpr) -> set[Ref]:
    """The columns an expression reads."""
    if isinstance(expr, Ref):
        return {expr}
    if isinstance(expr, Op):
        return refs(expr.left) | refs(expr.right)
    if isinstance(expr, Unary | InList | Like):
        return refs(expr.operand)
    if isinstance(expr, Call):
        return set().union(*(refs(a) for a in expr.args))
    return set()
