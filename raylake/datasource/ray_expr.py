"""Ray Data expressions (``ray.data.expressions.Expr``) converted into raylake's filter tree.

Ray evaluates a filter with pyarrow compute, so a converted filter must select exactly
the rows that pyarrow would, or the read would differ from an unpushed ``filter``:

- ``and``/``or`` are Kleene in both, and a row is kept only when the predicate is true.
- ``is_in`` is *false*, never null, for a null value, so ``~col.is_in(...)`` and
  ``col.not_in(...)`` keep nulls. raylake's ``In`` is unknown for null, so ``is_in``
  becomes ``x is not null and x in (...)`` and ``not_in`` becomes
  ``x is null or x not in (...)``; both are two-valued, exactly as in pyarrow.
- ``~(x < 1.5)`` is true for NaN in pyarrow, but raylake rewrites it to ``x >= 1.5``
  (false for NaN), so a negated ordering comparison on a float column is not converted.
- ``is_in``/``not_in`` on a float column hash floats bitwise in pyarrow (``0.0`` is not
  in ``[-0.0]``), where raylake's lists hold both zeros as ``=`` does: a list with a
  zero on a float column is not converted.
- A literal is bound to its column's type; one that does not round-trip exactly
  (``0.1`` against a float32 column, ``1.5`` against an int column) is not converted,
  since pyarrow would compare in the wider type.
- ``col.str.starts_with(p)`` and ``col.str.match(pattern)`` (pyarrow ``starts_with`` and
  ``match_like``) on a string column become ``like``: both are null for a null value,
  as raylake's ``like`` is unknown. ``ignore_case`` or any other option is not converted.

Whatever cannot be converted raises :class:`_Unconvertible` internally; callers either
turn it into a :class:`~raylake.errors.FilterError` naming the part (an explicit
``filter=``) or leave that part for Ray to apply (predicate pushdown).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from ray.data.expressions import (
    AliasExpr,
    BinaryExpr,
    ColumnExpr,
    LiteralExpr,
    Operation,
    PyArrowComputeUDFExpr,
    UnaryExpr,
)
from ray.data.expressions import Expr as RayExpr

from raylake.errors import FilterError, UnknownColumnError
from raylake.expr import (
    AlwaysFalse,
    AlwaysTrue,
    Compare,
    Expr,
    In,
    IsNull,
    Like,
    NotIn,
    NotNull,
    and_,
    bind,
    escape_like,
    not_,
    or_,
)

_COMPARE = {
    Operation.EQ: "=",
    Operation.NE: "!=",
    Operation.LT: "<",
    Operation.LE: "<=",
    Operation.GT: ">",
    Operation.GE: ">=",
}
_FLIPPED = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_ORDERING = {"<", "<=", ">", ">="}


class _Unconvertible(Exception):
    """A part of a Ray expression with no exact raylake equivalent."""

    def __init__(self, part: RayExpr, reason: str) -> None:
        super().__init__(reason)
        self.part = part
        self.reason = reason


@dataclass(frozen=True)
class PredicateSplit:
    """A Ray predicate split into what raylake evaluates and what is left over.

    ``pushed`` is exact for the conjuncts it came from; ``residual`` (or None) holds the
    conjuncts raylake cannot evaluate, still as a Ray expression.
    """

    pushed: Expr
    residual: RayExpr | None


def from_ray_expr(expr: RayExpr, schema: pa.Schema) -> Expr:
    """Convert a whole Ray expression, or raise :class:`FilterError` naming the part."""
    try:
        return _Converter(schema).convert(expr)
    except _Unconvertible as exc:
        raise FilterError(
            f"raylake cannot evaluate the part `{render(exc.part)}` of the Ray expression "
            f"`{render(expr)}`: {exc.reason}; apply that part with Dataset.filter(expr=...)"
        ) from None


_SYMBOLS = {
    Operation.ADD: "+",
    Operation.SUB: "-",
    Operation.MUL: "*",
    Operation.DIV: "/",
    Operation.MOD: "%",
    Operation.FLOORDIV: "//",
    Operation.EQ: "==",
    Operation.NE: "!=",
    Operation.LT: "<",
    Operation.LE: "<=",
    Operation.GT: ">",
    Operation.GE: ">=",
    Operation.AND: "&",
    Operation.OR: "|",
}


def render(expr: RayExpr) -> str:
    """A one-line rendering of a Ray expression for error messages (Ray's repr is a tree)."""
    expr = _unalias(expr)
    if isinstance(expr, ColumnExpr):
        return f"col({expr.name!r})"
    if isinstance(expr, LiteralExpr):
        return repr(expr.value)
    if isinstance(expr, BinaryExpr):
        left, right = render(expr.left), render(expr.right)
        if expr.op in (Operation.IN, Operation.NOT_IN):
            return f"{left}.{expr.op.value}({right})"
        return f"({left} {_SYMBOLS.get(expr.op, expr.op.value)} {right})"
    if isinstance(expr, UnaryExpr):
        operand = render(expr.operand)
        return f"~{operand}" if expr.op == Operation.NOT else f"{operand}.{expr.op.value}()"
    if isinstance(expr, PyArrowComputeUDFExpr):
        parts = [render(a) for a in expr.args] + [repr(v) for v in expr.pc_positional]
        parts += [f"{k}={v!r}" for k, v in expr.pc_kwargs.items()]
        return f"{getattr(expr.pc_func, '__name__', 'udf')}({', '.join(parts)})"
    return type(expr).__name__


def split_ray_predicate(expr: RayExpr, schema: pa.Schema) -> PredicateSplit:
    """Convert each top-level ``and`` term that raylake can evaluate exactly; keep the rest."""
    converter = _Converter(schema)
    pushed: list[Expr] = []
    residual: list[RayExpr] = []
    for term in _conjuncts(expr):
        try:
            pushed.append(converter.convert(term))
        except _Unconvertible:
            residual.append(term)
    rest = None
    for term in residual:
        rest = term if rest is None else rest & term
    return PredicateSplit(and_(*pushed), rest)


def _conjuncts(expr: RayExpr) -> list[RayExpr]:
    expr = _unalias(expr)
    if isinstance(expr, BinaryExpr) and expr.op == Operation.AND:
        return [*_conjuncts(expr.left), *_conjuncts(expr.right)]
    return [expr]


def _unalias(expr: RayExpr) -> RayExpr:
    while isinstance(expr, AliasExpr):
        expr = expr.expr
    return expr


class _Converter:
    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema

    def convert(self, expr: RayExpr) -> Expr:
        result = self._visit(expr)
        try:
            return bind(result, self.schema)
        except (FilterError, UnknownColumnError) as exc:
            raise _Unconvertible(expr, str(exc)) from None

    def _visit(self, expr: RayExpr) -> Expr:
        expr = _unalias(expr)
        if isinstance(expr, BinaryExpr):
            return self._binary(expr)
        if isinstance(expr, UnaryExpr):
            return self._unary(expr)
        if isinstance(expr, ColumnExpr):
            return self._bare_column(expr)
        if isinstance(expr, LiteralExpr) and isinstance(expr.value, bool):
            return AlwaysTrue() if expr.value else AlwaysFalse()
        if isinstance(expr, PyArrowComputeUDFExpr):
            return self._string_match(expr)
        raise _Unconvertible(expr, f"{type(expr).__name__} is not a predicate raylake knows")

    def _binary(self, expr: BinaryExpr) -> Expr:
        if expr.op == Operation.AND:
            return and_(self._visit(expr.left), self._visit(expr.right))
        if expr.op == Operation.OR:
            return or_(self._visit(expr.left), self._visit(expr.right))
        if expr.op in (Operation.IN, Operation.NOT_IN):
            return self._membership(expr)
        if expr.op in _COMPARE:
            return self._compare(expr, _COMPARE[expr.op])
        raise _Unconvertible(expr, f"operation {expr.op.value!r} is not a comparison")

    def _unary(self, expr: UnaryExpr) -> Expr:
        if expr.op in (Operation.IS_NULL, Operation.IS_NOT_NULL):
            column = self._column(expr.operand, expr)
            return IsNull(column) if expr.op == Operation.IS_NULL else NotNull(column)
        if expr.op == Operation.NOT:
            child = self._visit(expr.operand)
            self._check_negatable(expr, child)
            return not_(child)
        raise _Unconvertible(expr, f"unary operation {expr.op.value!r} is not a predicate")

    def _bare_column(self, expr: ColumnExpr) -> Expr:
        name = self._column(expr, expr)
        if not pa.types.is_boolean(self.schema.field(name).type):
            raise _Unconvertible(expr, f"column {name!r} is not boolean, so it is no predicate")
        return Compare("=", name, True)

    def _compare(self, expr: BinaryExpr, op: str) -> Expr:
        left, right = _unalias(expr.left), _unalias(expr.right)
        if isinstance(left, LiteralExpr) and isinstance(right, ColumnExpr):
            left, right, op = right, left, _FLIPPED[op]
        if not (isinstance(left, ColumnExpr) and isinstance(right, LiteralExpr)):
            raise _Unconvertible(expr, "only a column compared with a literal can be pushed down")
        name = self._column(left, expr)
        if right.value is None:
            # Null under pyarrow but unknown-free AlwaysFalse here: they differ under ``~``.
            raise _Unconvertible(expr, "a comparison with null is null for every row")
        self._check_exact_literal(expr, name, right.value)
        return Compare(op, name, right.value)

    def _membership(self, expr: BinaryExpr) -> Expr:
        right = _unalias(expr.right)
        if not isinstance(right, LiteralExpr):
            raise _Unconvertible(expr, "is_in/not_in needs a literal list of values")
        name = self._column(expr.left, expr)
        raw = right.value if isinstance(right.value, (list, tuple)) else [right.value]
        values = tuple(v for v in raw if v is not None)
        for v in values:
            self._check_exact_literal(expr, name, v)
        if _is_float_column(self.schema, name) and any(_is_zero(v) for v in values):
            # pyarrow's is_in hashes floats bitwise: 0.0 is not in [-0.0]; raylake's
            # list holds both zeros, as ``=`` compares them (docs/filters.md).
            raise _Unconvertible(expr, f"is_in/not_in with a zero on float column {name!r}")
        # pc.is_in matches a null value only when the list holds a null; never unknown.
        member = and_(NotNull(name), In(name, values)) if values else AlwaysFalse()
        if len(values) < len(raw):
            member = or_(IsNull(name), member)
        if expr.op == Operation.IN:
            return member
        if len(values) < len(raw):
            return and_(NotNull(name), NotIn(name, values)) if values else NotNull(name)
        return or_(IsNull(name), NotIn(name, values)) if values else AlwaysTrue()

    def _string_match(self, expr: PyArrowComputeUDFExpr) -> Expr:
        """``col.str.starts_with(p)`` / ``col.str.match(pattern)``, without options."""
        func = expr.pc_func
        if func is not pc.starts_with and func is not pc.match_like:
            raise _Unconvertible(expr, "only starts_with and match (LIKE) UDFs are predicates")
        kwargs = dict(expr.pc_kwargs)
        positional = list(expr.pc_positional)
        if "pattern" in kwargs and not positional:
            positional.append(kwargs.pop("pattern"))
        if kwargs.pop("ignore_case", False) or kwargs or len(positional) != 1:
            raise _Unconvertible(expr, "only a pattern, without other options, is exact")
        if len(expr.args) != 1 or expr.kwargs:
            raise _Unconvertible(expr, "the operand must be a plain column")
        name = self._column(expr.args[0], expr)
        pattern = positional[0]
        if not isinstance(pattern, str):
            raise _Unconvertible(expr, f"the pattern {pattern!r} is not a string")
        if func is pc.starts_with:
            pattern = escape_like(pattern) + "%"
        try:
            return Like(name, pattern)
        except FilterError as exc:
            raise _Unconvertible(expr, str(exc)) from None

    def _column(self, operand: RayExpr, whole: RayExpr) -> str:
        operand = _unalias(operand)
        if not isinstance(operand, ColumnExpr):
            raise _Unconvertible(whole, "the operand must be a plain column")
        if operand.name not in self.schema.names:
            raise _Unconvertible(whole, f"unknown column {operand.name!r}")
        return str(operand.name)

    def _check_exact_literal(self, expr: RayExpr, name: str, value: Any) -> None:
        """Reject literals that change value when cast to the column type (see module doc)."""
        typ = self.schema.field(name).type
        if pa.types.is_dictionary(typ):
            typ = typ.value_type
        if not (pa.types.is_floating(typ) or pa.types.is_integer(typ)):
            return
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return  # bind() rejects these with its own message
        if pa.types.is_integer(typ) and isinstance(value, float):
            # pyarrow compares in float64: exact only for integral values below 2**53.
            if not (value.is_integer() and abs(value) < 2**53):
                raise _Unconvertible(expr, f"{value!r} is not exact as {typ} (column {name!r})")
            value = int(value)
        try:
            cast = pa.scalar(value, type=typ).as_py()
        except (pa.ArrowException, OverflowError, TypeError, ValueError):
            raise _Unconvertible(expr, f"{value!r} does not fit column {name!r} ({typ})") from None
        if cast != value:
            raise _Unconvertible(expr, f"{value!r} is not exact as {typ} (column {name!r})")

    def _check_negatable(self, expr: RayExpr, child: Expr) -> None:
        for node in _predicates(child):
            if not isinstance(node, Compare) or node.op not in _ORDERING:
                continue
            if pa.types.is_floating(self.schema.field(node.column).type):
                raise _Unconvertible(
                    expr, f"negated ordering on float column {node.column!r} differs for NaN"
                )


def _is_float_column(schema: pa.Schema, name: str) -> bool:
    typ = schema.field(name).type
    return bool(pa.types.is_floating(typ.value_type if pa.types.is_dictionary(typ) else typ))


def _is_zero(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and value == 0


def _predicates(expr: Expr) -> list[Expr]:
    stack, out = [expr], []
    while stack:
        node = stack.pop()
        children = node.children()
        if children:
            stack.extend(children)
        else:
            out.append(node)
    return out
