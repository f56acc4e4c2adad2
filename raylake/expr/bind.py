"""``bind``: resolve a filter against a schema, converting each literal to its column's type.

Binding convention: in a bound expression every literal (``Compare.value`` and each
of ``In.values`` / ``NotIn.values``) is a ``pyarrow.Scalar`` whose type is exactly the
column's type (for a dictionary column: the dictionary's value type). Typed scalars
make comparisons unambiguous downstream: pyarrow would otherwise infer
``timestamp[us]`` for a ``datetime`` and refuse to compare it with a
``timestamp[ns, tz=UTC]`` column, or compare a float32 column with a float64 literal.
Binding is idempotent. Unbound expressions hold plain Python literals as written.

Conversions are deliberately narrow so that a typo fails loudly instead of silently
filtering everything out: ints and integral floats to integer columns, ints/floats to
float columns, ISO strings (or ``date``/``datetime``/``time``) to date, timestamp and
time-of-day columns; naive timestamps for a time-zone-aware column are taken as UTC. A
timestamp or time literal keeps up to nine fractional digits (Python's ``datetime``
holds six) and must fit its column's unit exactly: ``'...00.001001001'`` on a
nanosecond column is that instant, on a microsecond column an error, never the
truncated ``.001001`` (which would change what ``=``, ``<`` and ``>=`` select).
"""

from __future__ import annotations

import datetime
import decimal
import math
import re
from typing import Any

import numpy as np
import pyarrow as pa

from raylake.arguments import iso_time
from raylake.errors import FilterError, UnknownColumnError
from raylake.expr.tree import (
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
    half,
)
from raylake.expr.visitor import ExprRewriter, ExprVisitor, visit


class _Mismatch(ValueError):
    """A literal of the wrong kind for a column type; the message is the reason."""


def _is_nested(typ: pa.DataType) -> bool:
    return bool(pa.types.is_nested(typ) or pa.types.is_union(typ))


def _to_int(raw: Any) -> int:
    if isinstance(raw, bool):
        raise _Mismatch("expected an integer, not a boolean")
    if isinstance(raw, int):
        return raw
    if isinstance(raw, float) and raw.is_integer():
        return int(raw)
    if isinstance(raw, decimal.Decimal) and raw == raw.to_integral_value():
        return int(raw)
    raise _Mismatch("expected an integer")


def _check_range(value: int, typ: pa.DataType) -> None:
    """pyarrow's own refusal speaks of "C integer types"."""
    info = np.iinfo(typ.to_pandas_dtype())
    if not info.min <= value <= info.max:
        raise _Mismatch(f"{value} is outside {typ}'s range ({info.min} to {info.max})")


def _check_finite(raw: Any, converted: Any, typ: pa.DataType) -> None:
    """A finite literal that a narrower float type holds only as infinity, refused as an
    int beyond its type's range is: ``x > 1e39`` on a float32 column read ``x > inf``."""
    with np.errstate(over="ignore"):
        narrow = np.float32(converted) if pa.types.is_float32(typ) else converted
        if np.isinf(narrow) and math.isfinite(float(raw)):
            largest = float(np.finfo(typ.to_pandas_dtype()).max)
            raise _Mismatch(f"{raw} is outside {typ}'s range (finite values up to {largest:g})")


def _to_float(raw: Any) -> float:
    if isinstance(raw, (int, float, decimal.Decimal)) and not isinstance(raw, bool):
        return float(raw)
    raise _Mismatch("expected a number")


def _to_decimal(raw: Any) -> decimal.Decimal:
    if isinstance(raw, (int, decimal.Decimal)) and not isinstance(raw, bool):
        return decimal.Decimal(raw)
    if isinstance(raw, float):
        return decimal.Decimal(repr(raw))
    raise _Mismatch("expected a number")


def _to_date(raw: Any) -> datetime.date:
    if isinstance(raw, str):
        try:
            return datetime.date.fromisoformat(raw.strip())
        except ValueError:
            try:
                raw = iso_time(raw)
            except ValueError:
                raise _Mismatch("expected a date such as '2024-01-31'") from None
    if isinstance(raw, datetime.datetime):
        if raw.time() != datetime.time():
            raise _Mismatch("a timestamp with a time of day is not a date")
        return raw.date()
    if isinstance(raw, datetime.date):
        return raw
    raise _Mismatch("expected a date such as '2024-01-31'")


def _to_datetime(raw: Any) -> datetime.datetime:
    if isinstance(raw, str):
        try:
            return iso_time(raw)
        except ValueError:
            raise _Mismatch(
                "expected an ISO 8601 timestamp such as '2024-01-31 12:00:00'"
            ) from None
    if isinstance(raw, datetime.datetime):
        return raw
    if isinstance(raw, datetime.date):
        return datetime.datetime.combine(raw, datetime.time())
    raise _Mismatch("expected a timestamp such as '2024-01-31 12:00:00'")


_UNIT_NANOS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}
# The fraction of a second of an ISO timestamp string: written back as six digits, since
# Python 3.10's fromisoformat takes only three or six, and digits past six are kept apart.
_FRACTION = re.compile(r"(?<=:\d\d)\.(\d+)")


def _timestamp_scalar(value: Any, typ: pa.TimestampType) -> pa.Scalar:
    """``value`` as a scalar of the timestamp type ``typ``: the literal's exact instant,
    or :class:`_Mismatch` where ``typ``'s unit cannot hold it."""
    if isinstance(value, pa.TimestampScalar):
        if not value.is_valid:
            return pa.scalar(None, type=typ)
        nanos = value.cast(pa.int64()).as_py() * _UNIT_NANOS[value.type.unit]
    else:
        extra = 0
        if isinstance(value, str) and (fraction := _FRACTION.search(value)):
            digits = fraction.group(1)
            if digits[9:].strip("0"):
                raise _Mismatch("a timestamp has at most nine fractional digits")
            extra = int(digits[6:9].ljust(3, "0"))
            value = (
                value[: fraction.start()] + "." + digits[:6].ljust(6, "0") + value[fraction.end() :]
            )
        micros = pa.scalar(_to_datetime(value), type=pa.timestamp("us", typ.tz))
        nanos = micros.cast(pa.int64()).as_py() * 1000 + extra
    step = _UNIT_NANOS[typ.unit]
    if nanos % step:
        raise _Mismatch(f"the literal is finer than the column's unit ({typ.unit})")
    if not -(2**63) <= nanos // step < 2**63:
        raise _Mismatch(f"the literal is out of the range of {typ}")
    return pa.scalar(nanos // step, type=typ)


_TIME_OF_DAY = re.compile(r"(\d\d):(\d\d)(?::(\d\d)(?:\.(\d{1,9}))?)?")
_DAY_NANOS = 86_400 * 10**9


def _time_scalar(value: Any, typ: pa.DataType) -> pa.Scalar:
    """``value`` as a scalar of the time-of-day type ``typ``: ``'12:30'``,
    ``'12:30:00.000001'`` (up to nine fractional digits), a ``datetime.time``, a time
    scalar, or an int counting ``typ``'s unit (as pyarrow takes it); :class:`_Mismatch`
    where ``typ``'s unit cannot hold it."""
    if isinstance(value, int) and not isinstance(value, bool):
        return pa.scalar(value, type=typ)
    if isinstance(value, pa.Scalar) and pa.types.is_time(value.type):
        if not value.is_valid:
            return pa.scalar(None, type=typ)
        nanos = _scalar_nanos(value)
    elif isinstance(value, str) and (match := _TIME_OF_DAY.fullmatch(value.strip())):
        hours, minutes, seconds, digits = match.groups()
        nanos = ((int(hours) * 60 + int(minutes)) * 60 + int(seconds or 0)) * 10**9
        nanos += int((digits or "").ljust(9, "0"))
    elif isinstance(value, datetime.time) and value.tzinfo is None:
        seconds = (value.hour * 60 + value.minute) * 60 + value.second
        nanos = seconds * 10**9 + value.microsecond * 1000
    else:
        raise _Mismatch("expected a time of day such as '12:30:00'")
    if not 0 <= nanos < _DAY_NANOS:
        raise _Mismatch("a time of day is from 00:00:00 to 23:59:59.999999999")
    return _in_unit(nanos, typ)


def _duration_scalar(value: Any, typ: pa.DataType) -> pa.Scalar:
    """``value`` as a scalar of the duration type ``typ``: a ``timedelta`` (pandas' keeps
    its nanoseconds), a duration scalar (numpy's ``timedelta64`` becomes one), or an int
    counting ``typ``'s unit; :class:`_Mismatch` where ``typ``'s unit cannot hold it."""
    if isinstance(value, int) and not isinstance(value, bool):
        return pa.scalar(value, type=typ)
    if isinstance(value, pa.Scalar) and pa.types.is_duration(value.type):
        if not value.is_valid:
            return pa.scalar(None, type=typ)
        nanos = _scalar_nanos(value)
    elif isinstance(value, datetime.timedelta) and hasattr(value, "asm8"):
        nanos = int(value.value)  # type: ignore[attr-defined]  # pandas.Timedelta
    elif isinstance(value, datetime.timedelta):
        micros = (value.days * 86_400 + value.seconds) * 10**6 + value.microseconds
        nanos = micros * 1000
    else:
        raise _Mismatch("expected a duration (a datetime.timedelta) or a count of its unit")
    return _in_unit(nanos, typ)


def _scalar_nanos(value: pa.Scalar) -> int:
    """A valid time or duration scalar's value in nanoseconds."""
    count = value.cast(pa.int32() if value.type.bit_width == 32 else pa.int64())
    return int(count.as_py()) * _UNIT_NANOS[value.type.unit]


def _in_unit(nanos: int, typ: pa.DataType) -> pa.Scalar:
    """``nanos`` as a scalar of the time or duration type ``typ``; :class:`_Mismatch`
    where its unit cannot hold them exactly."""
    step = _UNIT_NANOS[typ.unit]
    if nanos % step:
        raise _Mismatch(f"the literal is finer than the column's unit ({typ.unit})")
    if not -(2 ** (typ.bit_width - 1)) <= nanos // step < 2 ** (typ.bit_width - 1):
        raise _Mismatch(f"the literal is out of the range of {typ}")
    return pa.scalar(nanos // step, type=typ)


def _exact(kind: type, description: str) -> Any:
    def convert(raw: Any) -> Any:
        if isinstance(raw, kind) and not (kind is int and isinstance(raw, bool)):
            return raw
        raise _Mismatch(f"expected {description}")

    return convert


def _is_string(typ: pa.DataType) -> bool:
    is_view = getattr(pa.types, "is_string_view", lambda t: False)
    return bool(pa.types.is_string(typ) or pa.types.is_large_string(typ) or is_view(typ))


def _converter(typ: pa.DataType) -> Any:
    """The Python-side conversion for a column type, or raise :class:`_Mismatch`."""
    checks = [
        (pa.types.is_boolean, _exact(bool, "true or false")),
        (pa.types.is_integer, _to_int),
        (pa.types.is_floating, _to_float),
        (pa.types.is_decimal, _to_decimal),
        (pa.types.is_date, _to_date),
        (pa.types.is_timestamp, _to_datetime),
        (_is_string, _exact(str, "a string")),
        (lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t), _to_bytes),
    ]
    for matches, convert in checks:
        if matches(typ):
            return convert
    if _is_nested(typ) or pa.types.is_null(typ):
        raise _Mismatch(f"comparisons on {typ} columns are not supported")
    return lambda raw: raw  # let pyarrow try


def _to_bytes(raw: Any) -> bytes:
    if isinstance(raw, str):
        return raw.encode("utf-8")
    if isinstance(raw, bytes):
        return raw
    raise _Mismatch("expected bytes or a string")


def _holds_nan(typ: pa.DataType) -> bool:
    return bool(pa.types.is_floating(typ))


def bind_literal(column: str, value: Any, typ: pa.DataType) -> pa.Scalar:
    """Convert one literal to a scalar of the column's type, or raise :class:`FilterError`."""
    target = typ.value_type if pa.types.is_dictionary(typ) else typ
    raw = value.as_py() if isinstance(value, pa.Scalar) else value
    if isinstance(raw, float) and raw != raw and not _holds_nan(target):
        # pandas' missing value in a column of strings (pandas 3's str), dates, objects:
        # what df.x.unique() holds where x has nulls.
        raise FilterError(
            f"cannot compare column {column!r} of type {typ} with nan, pandas' missing "
            "value: a null never matches; use is_null()"
        )
    try:
        return literal_scalar(value, target)
    except LITERAL_ERRORS as exc:
        raise FilterError(
            f"cannot compare column {column!r} of type {typ} with {value!r}: {exc}"
        ) from None


#: What :func:`literal_scalar` raises for a value that is none of its type's.
LITERAL_ERRORS = (ValueError, TypeError, OverflowError, ArithmeticError, pa.ArrowException)


def literal_scalar(value: Any, target: pa.DataType) -> pa.Scalar:
    """``value`` as a scalar of ``target``, read as a filter reads a literal (a date,
    time or timestamp written as text, an int as a time's or duration's count), or one
    of ``LITERAL_ERRORS`` saying why it is none."""
    if isinstance(value, pa.Scalar) and value.type == target:
        return value
    raw = value.as_py() if isinstance(value, pa.Scalar) else value
    if pa.types.is_timestamp(target):
        return _timestamp_scalar(value, target)
    if pa.types.is_time(target):
        return _time_scalar(raw if isinstance(raw, int) else value, target)
    if pa.types.is_duration(target):
        return _duration_scalar(raw if isinstance(raw, int) else value, target)
    converted = _converter(target)(raw)
    if pa.types.is_integer(target):
        _check_range(converted, target)
    if pa.types.is_float16(target):
        converted = half(converted)
    if pa.types.is_float16(target) or pa.types.is_float32(target):
        _check_finite(raw, converted, target)
    return pa.scalar(converted, type=target)


class _Binder(ExprRewriter):
    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema

    def field_type(self, node: Predicate) -> pa.DataType:
        if node.column not in self.schema.names:
            raise UnknownColumnError(node.column, list(self.schema.names))
        return self.schema.field(node.column).type

    def visit_compare(self, node: Compare) -> Expr:
        value = bind_literal(node.column, node.value, self.field_type(node))
        return Compare(node.op, node.column, value)

    def visit_in(self, node: In) -> Expr:
        typ = self.field_type(node)
        return In(node.column, tuple(bind_literal(node.column, v, typ) for v in node.values))

    def visit_not_in(self, node: NotIn) -> Expr:
        typ = self.field_type(node)
        return NotIn(node.column, tuple(bind_literal(node.column, v, typ) for v in node.values))

    def visit_is_null(self, node: IsNull) -> Expr:
        self.field_type(node)
        return node

    def visit_not_null(self, node: NotNull) -> Expr:
        self.field_type(node)
        return node

    def visit_like(self, node: Like) -> Expr:
        typ = self.field_type(node)
        values = typ.value_type if pa.types.is_dictionary(typ) else typ
        if not _is_string(values):
            op = "not like" if node.negated else "like"
            raise FilterError(f"'{op}' needs a string column, but {node.column!r} is {typ}")
        return node


def bind(expr: Expr, schema: pa.Schema) -> Expr:
    """Check that every column exists in ``schema`` and type every literal (see module doc).

    Raises :class:`UnknownColumnError` for a missing column and :class:`FilterError`
    for a literal that does not fit its column's type.
    """
    return visit(expr, _Binder(schema))


class _Columns(ExprVisitor[frozenset[str]]):
    def visit_true(self) -> frozenset[str]:
        return frozenset()

    def visit_false(self) -> frozenset[str]:
        return frozenset()

    def visit_not(self, node: Not, child: frozenset[str]) -> frozenset[str]:
        return child

    def visit_and(self, node: And, left: frozenset[str], right: frozenset[str]) -> frozenset[str]:
        return left | right

    def visit_or(self, node: Or, left: frozenset[str], right: frozenset[str]) -> frozenset[str]:
        return left | right

    def visit_predicate(self, node: Predicate) -> frozenset[str]:
        return frozenset((node.column,))


def referenced_columns(expr: Expr) -> set[str]:
    """Names of all columns the filter reads (e.g. to add them to a projection)."""
    columns: frozenset[str] = visit(expr, _Columns())
    return set(columns)
