"""Interpretations of a filter: negation normal form, projection, row filters, an oracle.

All of them follow SQL three-valued logic: a comparison with null is *unknown*, ``not``
keeps unknown unknown, and a row is selected only when the filter is *true*.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raylake.errors import FilterError, UnknownColumnError
from raylake.expr._syntax import NEGATED_OP
from raylake.expr.like import like_regex, match_like
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
    Predicate,
    and_,
    check_expr,
    half,
    or_,
)
from raylake.expr.visitor import ExprVisitor, visit
from raylake.pyvalues import exact_py

_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "=": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}

_Pair = tuple[Expr, Expr]


class _NegationNormalForm(ExprVisitor[_Pair]):
    """Computes (expr, not expr) for every subtree, both free of ``Not``, bottom-up."""

    def visit_true(self) -> _Pair:
        return AlwaysTrue(), AlwaysFalse()

    def visit_false(self) -> _Pair:
        return AlwaysFalse(), AlwaysTrue()

    def visit_not(self, node: Not, child: _Pair) -> _Pair:
        return child[1], child[0]

    def visit_and(self, node: And, left: _Pair, right: _Pair) -> _Pair:
        return and_(left[0], right[0]), or_(left[1], right[1])

    def visit_or(self, node: Or, left: _Pair, right: _Pair) -> _Pair:
        return or_(left[0], right[0]), and_(left[1], right[1])

    def visit_compare(self, node: Compare) -> _Pair:
        return node, Compare(NEGATED_OP[node.op], node.column, node.value)

    def visit_in(self, node: In) -> _Pair:
        return node, NotIn(node.column, node.values)

    def visit_not_in(self, node: NotIn) -> _Pair:
        return node, In(node.column, node.values)

    def visit_is_null(self, node: IsNull) -> _Pair:
        return node, NotNull(node.column)

    def visit_not_null(self, node: NotNull) -> _Pair:
        return node, IsNull(node.column)

    def visit_like(self, node: Like) -> _Pair:
        return node, Like(node.column, node.pattern, not node.negated)


def negate_push_down(expr: Expr) -> Expr:
    """Rewrite ``expr`` without ``Not`` nodes (negation normal form), exactly.

    ``not (a < 3)`` becomes ``a >= 3``, ``not (a in ...)`` becomes ``a not in ...``,
    ``not (a is null)`` becomes ``a is not null`` and De Morgan handles and/or. Every
    rewrite is exact under three-valued logic (both sides are unknown for a null
    ``a``). Float NaN is the exception: ``not (x < 3)`` is true for NaN in pyarrow
    but ``x >= 3`` is false; raylake treats NaN as matching no comparison.
    Constants are folded on the way (``and_``/``or_`` simplification).
    """
    return visit(expr, _NegationNormalForm())[0]


def conjuncts(expr: Expr) -> list[Expr]:
    """The top-level ``and`` terms of ``expr``, left to right (``[]`` for AlwaysTrue).

    Only ``And`` nodes are flattened; apply :func:`negate_push_down` first to also
    split ``not (a or b)``.
    """
    result: list[Expr] = []
    stack = [check_expr(expr)]
    while stack:
        node = stack.pop()
        if isinstance(node, And):
            stack.extend((node.right, node.left))
        elif not isinstance(node, AlwaysTrue):
            result.append(node)
    return result


class _Projection(ExprVisitor[Expr]):
    def __init__(self, columns: set[str]) -> None:
        self.columns = columns

    def visit_true(self) -> Expr:
        return AlwaysTrue()

    def visit_false(self) -> Expr:
        return AlwaysFalse()

    def visit_not(self, node: Not, child: Expr) -> Expr:
        return AlwaysTrue()  # unreachable after negate_push_down; always a sound answer

    def visit_and(self, node: And, left: Expr, right: Expr) -> Expr:
        return and_(left, right)

    def visit_or(self, node: Or, left: Expr, right: Expr) -> Expr:
        return or_(left, right)  # AlwaysTrue if either side could not be projected

    def visit_predicate(self, node: Predicate) -> Expr:
        return node if node.column in self.columns else AlwaysTrue()


def filter_on_columns(expr: Expr, columns: set[str] | frozenset[str]) -> Expr:
    """The strongest filter on ``columns`` only that every row kept by ``expr`` passes.

    Used to push key or partition predicates below a merge: the result may keep more
    rows than ``expr`` but never drops one that ``expr`` keeps. Works on the negation
    normal form, where the tree is monotone, so replacing a predicate on another
    column by AlwaysTrue can only keep more rows.
    """
    return visit(negate_push_down(expr), _Projection(set(columns)))


def _literal(value: Any) -> Any:
    # time64[ns] as its nanoseconds, as partition values hold it (raylake/pyvalues.py)
    return exact_py(value) if isinstance(value, pa.Scalar) else value


class _PythonEvaluator(ExprVisitor[bool | None]):
    def __init__(self, row: Mapping[str, Any]) -> None:
        self.row = row

    def value(self, node: Predicate) -> Any:
        if node.column not in self.row:
            raise UnknownColumnError(node.column, list(self.row))
        return self.row[node.column]

    def visit_true(self) -> bool | None:
        return True

    def visit_false(self) -> bool | None:
        return False

    def visit_not(self, node: Not, child: bool | None) -> bool | None:
        return None if child is None else not child

    def visit_and(self, node: And, left: bool | None, right: bool | None) -> bool | None:
        if left is False or right is False:
            return False
        return None if left is None or right is None else True

    def visit_or(self, node: Or, left: bool | None, right: bool | None) -> bool | None:
        if left is True or right is True:
            return True
        return None if left is None or right is None else False

    def visit_compare(self, node: Compare) -> bool | None:
        value = self.value(node)
        return None if value is None else bool(_OPS[node.op](value, _literal(node.value)))

    def visit_in(self, node: In) -> bool | None:
        value = self.value(node)
        return None if value is None else any(value == _literal(v) for v in node.values)

    def visit_not_in(self, node: NotIn) -> bool | None:
        value = self.value(node)
        return None if value is None else all(value != _literal(v) for v in node.values)

    def visit_is_null(self, node: IsNull) -> bool | None:
        return self.value(node) is None

    def visit_not_null(self, node: NotNull) -> bool | None:
        return self.value(node) is not None

    def visit_like(self, node: Like) -> bool | None:
        value = self.value(node)
        if value is None:
            return None
        return (like_regex(node.pattern).fullmatch(value) is not None) != node.negated


def evaluate_python(expr: Expr, row: Mapping[str, Any]) -> bool:
    """Whether ``row`` (column name -> Python value, None = null) is selected by ``expr``.

    A slow, obviously-correct reference used as the oracle in property tests; the
    three-valued result is computed and *unknown* counts as not selected.
    """
    return visit(expr, _PythonEvaluator(row)) is True


def arrow_scalar(value: Any) -> pc.Expression:
    """A literal as a pyarrow expression; bound literals keep their exact type."""
    try:
        return pc.scalar(value)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise FilterError(f"cannot use {value!r} as a pyarrow literal: {exc}") from None


def arrow_value_set(values: tuple[Any, ...]) -> pa.Array:
    """The values of an ``in`` list as one typed array (bind first for mixed types).

    ``is_in`` hashes floats bitwise, so ``0.0`` would not match ``-0.0`` although
    ``=`` does; a float zero in the list is therefore added with both signs. For the
    same reason a NaN would match NaN, which ``=`` never does: it is left out.
    """
    plain = [_literal(v) for v in values]
    typ = values[0].type if values and all(isinstance(v, pa.Scalar) for v in values) else None
    if any(_is_nan(v) for v in plain):
        plain = [v for v in plain if not _is_nan(v)]
        typ = typ or pa.float64()
    if any(isinstance(v, float) and v == 0.0 for v in plain):
        plain += [0.0, -0.0]
    if typ is not None and pa.types.is_float16(typ):
        plain = [half(v) for v in plain]  # pyarrow before 17 takes only numpy's float16
    try:
        return pa.array(plain, type=typ)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise FilterError(f"cannot build a value list from {values!r}: {exc}") from None


def _is_nan(value: Any) -> bool:
    # numpy's float16 too: pyarrow before 17 gives a half float's value as one
    return isinstance(value, float | np.floating) and bool(value != value)


def _is_half(value: Any) -> bool:
    return isinstance(value, pa.Scalar) and pa.types.is_float16(value.type)


def _as_single(column: str) -> pc.Expression:
    """A float16 column compared as float32: Arrow has no comparison or ``is_in``
    kernels for half floats, and the widening is exact."""
    return pc.field(column).cast(pa.float32())


def _in(column: str, values: tuple[Any, ...]) -> pc.Expression:
    value_set = arrow_value_set(values)
    if pa.types.is_float16(value_set.type):
        return _as_single(column).isin(value_set.cast(pa.float32()))
    return pc.field(column).isin(value_set)


class _ArrowFilter(ExprVisitor[pc.Expression]):
    def visit_true(self) -> pc.Expression:
        return pc.scalar(True)

    def visit_false(self) -> pc.Expression:
        return pc.scalar(False)

    def visit_not(self, node: Not, child: pc.Expression) -> pc.Expression:
        return ~child

    def visit_and(self, node: And, left: pc.Expression, right: pc.Expression) -> pc.Expression:
        return left & right

    def visit_or(self, node: Or, left: pc.Expression, right: pc.Expression) -> pc.Expression:
        return left | right

    def visit_compare(self, node: Compare) -> pc.Expression:
        if _is_half(node.value):
            return _OPS[node.op](_as_single(node.column), pc.scalar(node.value.cast(pa.float32())))
        return _OPS[node.op](pc.field(node.column), arrow_scalar(node.value))

    def visit_in(self, node: In) -> pc.Expression:
        if not node.values:
            return pc.scalar(False)
        return _in(node.column, node.values)

    def visit_not_in(self, node: NotIn) -> pc.Expression:
        # is_in is false (not null) for a null input, so nulls must be excluded explicitly.
        field = pc.field(node.column)
        if not node.values:
            return field.is_valid()
        return field.is_valid() & ~_in(node.column, node.values)

    def visit_is_null(self, node: IsNull) -> pc.Expression:
        return pc.field(node.column).is_null()

    def visit_not_null(self, node: NotNull) -> pc.Expression:
        return pc.field(node.column).is_valid()

    def visit_like(self, node: Like) -> pc.Expression:
        # match_like has no dictionary kernel; the cast is free for plain strings' values.
        values = pc.field(node.column).cast(pa.large_string())
        matched = match_like(values, node.pattern)
        # Null stays null (unknown) under ~, so "not like" never selects a null row.
        return ~matched if node.negated else matched


def nan_sensitive(expr: Expr) -> bool:
    """Whether a filter selects NaN values that Parquet statistics would prune away.

    ``x != 3`` and ``x not in (...)`` on a float column match NaN (as Arrow compares),
    but pyarrow skips a row group whose min/max statistics, which ignore NaN, say every
    value is 3. Such filters must be applied to rows only, never to statistics.
    """
    stack = [negate_push_down(expr)]  # iterative: long or-chains must not recurse
    while stack:
        node = stack.pop()
        if isinstance(node, And | Or):
            stack += [node.left, node.right]
        elif (isinstance(node, Compare) and node.op == "!=" and _is_float(node.value)) or (
            isinstance(node, NotIn) and any(_is_float(v) for v in node.values)
        ):
            return True
    return False


def _is_float(value: Any) -> bool:
    if isinstance(value, pa.Scalar):
        return pa.types.is_floating(value.type)
    return isinstance(value, float)


def to_arrow(expr: Expr) -> pc.Expression:
    """A ``pyarrow.compute.Expression`` selecting the rows that ``expr`` selects.

    For ``pyarrow.dataset`` scans and ``Table.filter``. The filter is first put in
    negation normal form, so no ``~`` is ever applied to a possibly-unknown
    predicate: ``x != 1``, ``not (x = 1)`` and ``x not in (...)`` never match a null
    ``x``. Bind the expression first to get exactly typed literals.
    """
    return visit(negate_push_down(expr), _ArrowFilter())
