"""Evaluating value expressions (raylake/expr/values.py) over whole Arrow columns with
pyarrow compute, under the filters' rules: SQL's three-valued logic, checked arithmetic,
a literal in its column's type where it converts, NaN matching no ordering comparison."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from raylake.errors import FilterError
from raylake.expr.bind import bind_literal
from raylake.expr.decimals import cast_through_text, decimal_literal, widened
from raylake.expr.like import match_like
from raylake.expr.values import InList, Like, Lit, Op, Ref, Unary, ValueExpr

Columns = Mapping[str, pa.Array | pa.ChunkedArray]

_CMP_FUNCS = {
    "=": pc.equal,
    "!=": pc.not_equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}
_ARITH_FUNCS = {
    "+": pc.add_checked,
    "-": pc.subtract_checked,
    "*": pc.multiply_checked,
    "/": pc.divide_checked,
}


_ORDERING = ("<", "<=", ">", ">=")


def _nan_unknown(result: Any, *operands: Any) -> Any:
    """An ordering comparison with NaN is unknown (null), as filters read it: pyarrow's
    false made ``not (t.v < 0)`` true for NaN, where the same filter selects no NaN, so
    a merge's delete and ``Table.delete`` with one predicate took different rows."""
    for operand in operands:
        if pa.types.is_floating(operand.type):
            nan = pc.fill_null(pc.is_nan(operand), False)
            result = pc.if_else(nan, pa.scalar(None, pa.bool_()), result)
    return result


def evaluate(expr: ValueExpr, columns: Columns, length: int) -> pa.Array | pa.ChunkedArray:
    """The expression's value for each of ``length`` rows; ``columns`` maps ``"t.x"``/
    ``"s.x"`` to arrays of that length. Errors name the expression."""
    try:
        out = _eval(expr, columns)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise FilterError(f"cannot evaluate {expr}: {exc}") from None
    if isinstance(out, pa.Scalar):
        return pa.array([out.as_py()] * length, type=out.type if out.is_valid else pa.null())
    return out


def evaluate_condition(expr: ValueExpr, columns: Columns, length: int) -> pa.Array:
    """A boolean mask: rows where the condition is true (null counts as false, as in SQL)."""
    out = evaluate(expr, columns, length)
    if pa.types.is_null(out.type):
        return pa.array([False] * length)
    if not pa.types.is_boolean(out.type):
        raise FilterError(f"condition {expr} is of type {out.type}, not boolean")
    filled = pc.fill_null(out, False)
    return filled.combine_chunks() if isinstance(filled, pa.ChunkedArray) else filled


def _typed_literal(
    lit: Lit, other: Any, context: ValueExpr, compared: object = None, arithmetic: bool = False
) -> Any:
    """A literal as a scalar of the other operand's type where it converts (a date
    string against a date column, an int against a float32 column); one that does not
    is taken as it is where the kinds agree (1.5 against an int column, 10**20 against
    a decimal(10, 2) one). Compared with the operand ``compared`` where the kinds do not,
    it is refused as a filter refuses it (``s.i = true`` on an int column; was: Arrow's
    "no kernel matching input types"). In ``arithmetic`` with a decimal, a number is
    the smallest decimal that holds it: the result type grows with the operands'."""
    if lit.value is None or isinstance(other, pa.Scalar) or other is None:
        return _scalar(lit.value)
    typ = other.type
    if arithmetic and pa.types.is_decimal(typ):
        smallest = decimal_literal(lit.value)
        if smallest is not None:
            return smallest
    if pa.types.is_integer(typ) and isinstance(lit.value, float):
        return _scalar(lit.value)  # 1.5 against an int column stays a float
    try:
        return bind_literal(str(compared), lit.value, typ)
    except FilterError as exc:
        as_is = _scalar(lit.value)
        if compared is not None and _kind(typ) not in (_kind(as_is.type), "null"):
            raise FilterError(f"{context}: {exc}") from None
        return as_is


def _kind(typ: pa.DataType) -> str:
    """What a literal must be to compare with a value of ``typ``."""
    if pa.types.is_dictionary(typ):
        typ = typ.value_type
    if pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_decimal(typ):
        return "number"
    if pa.types.is_boolean(typ):
        return "boolean"
    if pa.types.is_null(typ):
        return "null"
    return "temporal" if pa.types.is_temporal(typ) else "other"


def _scalar(value: Any) -> pa.Scalar:
    try:
        return pa.scalar(value)
    except OverflowError:  # an int beyond 64 bits is a decimal of scale 0, as in SQL
        pass
    try:
        return pa.scalar(Decimal(value))
    except (pa.ArrowInvalid, OverflowError):  # beyond 76 digits
        raise FilterError(f"the literal {value} has more digits than any decimal type") from None


def _exact(left: Any, right: Any) -> tuple[Any, Any]:
    """A decimal operand against a float one, both as float64, the decimal correctly
    rounded: Arrow's implicit cast reads 5091.15 as 5091.150000000001, which then equals
    that literal; and a float32 would make 16777217 equal 16777216 (Spark compares as
    double)."""
    decimals = (pa.types.is_decimal(left.type), pa.types.is_decimal(right.type))
    floats = (pa.types.is_floating(left.type), pa.types.is_floating(right.type))
    if not ((decimals[0] and floats[1]) or (floats[0] and decimals[1])):
        return left, right
    double = pa.float64()
    return tuple(  # type: ignore[return-value]
        cast_through_text(v, double) if is_decimal else v.cast(double)
        for v, is_decimal in zip((left, right), decimals)
    )


def _eval(expr: ValueExpr, columns: Columns) -> Any:
    if isinstance(expr, Ref):
        return columns[str(expr)]
    if isinstance(expr, Lit):
        return _scalar(expr.value)
    if isinstance(expr, Op):
        if expr.op in ("and", "or"):
            fn = pc.and_kleene if expr.op == "and" else pc.or_kleene
            return fn(_eval(expr.left, columns), _eval(expr.right, columns))
        compared = expr.op in _CMP_FUNCS
        left = None if isinstance(expr.left, Lit) else _eval(expr.left, columns)
        right = None if isinstance(expr.right, Lit) else _eval(expr.right, columns)
        if isinstance(expr.left, Lit):
            against = expr.right if compared else None
            left = _typed_literal(expr.left, right, expr, against, arithmetic=not compared)
        if isinstance(expr.right, Lit):
            against = expr.left if compared else None
            right = _typed_literal(expr.right, left, expr, against, arithmetic=not compared)
        left, right = _exact(left, right)
        if not compared:
            func = _ARITH_FUNCS[expr.op]
            return func(*widened(func, left, right, str(expr)))
        if expr.op in _ORDERING:
            return _nan_unknown(_CMP_FUNCS[expr.op](left, right), left, right)
        return _CMP_FUNCS[expr.op](left, right)
    if isinstance(expr, Unary):
        operand = _eval(expr.operand, columns)
        if expr.op == "neg":
            return pc.negate_checked(operand)
        if expr.op == "not":
            return pc.invert(operand)
        valid = pc.is_valid(operand)
        return pc.invert(valid) if expr.op == "isnull" else valid
    if isinstance(expr, Like):
        return _like(expr, _eval(expr.operand, columns))
    if isinstance(expr, InList):
        operand = _plain(_eval(expr.operand, columns))
        literals = [_typed_literal(Lit(v), operand, expr, expr.operand) for v in expr.values]
        exact = [s.as_py() for s in literals if s.type == operand.type]
        found = pc.is_in(operand, value_set=pa.array(exact, operand.type))
        # A value not of the column's type (1.001 against a decimal(10, 2) column) is
        # compared as `=` compares it: a cast into the type would round it to a match.
        for other in (s for s in literals if s.type != operand.type):
            found = pc.or_kleene(found, pc.equal(*_exact(operand, other)))
        found = pc.if_else(pc.is_valid(operand), found, pa.scalar(None, pa.bool_()))
        return pc.invert(found) if expr.negated else found
    args = [None if isinstance(a, Lit) else _eval(a, columns) for a in expr.args]
    typed = next((a for a in args if a is not None), None)
    values: list[Any] = [
        _typed_literal(a, typed, expr) if isinstance(a, Lit) else v for a, v in zip(expr.args, args)
    ]
    # A null (a literal, an all-null column) takes the others' type: coalesce(null, 3) is 3.
    known = next((v.type for v in values if not pa.types.is_null(v.type)), None)
    if known is not None:
        values = [v.cast(known) if pa.types.is_null(v.type) else v for v in values]
    return pc.coalesce(*values)


def _plain(operand: Any) -> Any:
    """A dictionary-encoded operand (a pandas category) as its values."""
    if pa.types.is_dictionary(operand.type):
        return operand.cast(operand.type.value_type)
    return operand


def _like(expr: Like, operand: Any) -> Any:
    operand = _plain(operand)
    if pa.types.is_null(operand.type):  # `null like 'a%'` is null, as in SQL
        return operand.cast(pa.bool_())
    if not (pa.types.is_string(operand.type) or pa.types.is_large_string(operand.type)):
        raise FilterError(f"{expr}: LIKE applies to strings, not {operand.type}")
    found = match_like(operand, expr.pattern)
    return pc.invert(found) if expr.negated else found
