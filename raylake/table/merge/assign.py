"""The value a merge clause sets, as its target column's type (docs/merge.md): cast
safely, a float into a decimal by its shortest digits, a quoted date, time or
timestamp read as a predicate reads it, or an error naming the column."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from raylake.errors import FilterError, NullConstraintError, SchemaMismatchError
from raylake.expr.bind import bind_literal
from raylake.expr.decimals import cast_through_text
from raylake.table.conform import made_infinite


def assigned(name: str, value: Any, field: pa.Field) -> Any:
    """A computed column cast to the target column's type, or an error naming both."""
    if _is_dated(field.type) and _is_text(value.type):
        value = _read_as_literals(name, value, field.type)
    if value.type != field.type:
        if pa.types.is_floating(value.type) and pa.types.is_decimal(field.type):
            value = _float_as_decimal(name, value, field)
        else:
            try:
                cast = value.cast(field.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise _unfit(name, value, field, _why_unfit(exc, value.type)) from None
            overflowed = made_infinite(value, cast)  # a safe cast checks integers only
            if overflowed:
                reason = f"{overflowed} value(s) beyond its range would become infinite"
                raise _unfit(name, value, field, reason)
            value = cast
    if not field.nullable and value.null_count:
        raise NullConstraintError(name, value.null_count)
    return value


def _why_unfit(exc: Exception, typ: pa.DataType) -> str:
    """Arrow's reason, said of digits where a decimal does not fit a decimal column, as
    for a float: a decimal result (``t.d + 0.001``, exact since decimal arithmetic is)
    gave "Rescaling Decimal value would cause data loss" where the float did this."""
    if pa.types.is_decimal(typ) and "Rescaling" in str(exc):
        return "a value has more digits than its scale keeps"
    if pa.types.is_decimal(typ) and "does not fit in precision" in str(exc):
        return f"a value has more digits than its precision keeps ({exc})"
    return str(exc)


def _float_as_decimal(name: str, value: Any, field: pa.Field) -> Any:
    """Floats as decimals of their shortest text, or an error naming the column (Arrow's
    safe cast rounds 1.239 into decimal(10, 2) as 1.24, where a decimal source with
    those digits is refused)."""
    try:
        return cast_through_text(value, field.type)
    except pa.ArrowInvalid as exc:
        finite = pc.is_finite(value)
        if not pc.all(pc.fill_null(finite, True)).as_py():
            reason = "NaN and infinity have no decimal value"
        elif "Rescaling" in str(exc):
            reason = "a value has more digits than its scale keeps"
        else:  # Arrow speaks of the text the float was read through
            reason = "a value has more digits than its precision keeps"
        raise _unfit(name, value, field, reason) from None


def _unfit(name: str, value: Any, field: pa.Field, reason: str) -> SchemaMismatchError:
    return SchemaMismatchError(
        f"the value assigned to column {name!r} has type {value.type}, which does not "
        f"fit {field.type}: {reason}; nothing was written",
        column=name,
        expected=field.type,
        actual=value.type,
    )


def _is_text(typ: pa.DataType) -> bool:
    return pa.types.is_string(typ) or pa.types.is_large_string(typ)


def _is_dated(typ: pa.DataType) -> bool:
    return bool(pa.types.is_date(typ) or pa.types.is_time(typ) or pa.types.is_timestamp(typ))


def _read_as_literals(name: str, value: Any, typ: pa.DataType) -> Any:
    """Text into a date, time or timestamp column, read as a predicate reads the same
    literal (bind_literal, docs/filters.md): Arrow's cast reads no time of day, no date
    into a timestamp column, no text without an offset into a column with a time zone
    and none with one into a column without, so ``'2024-02-01 00:00:00'`` into a UTC
    column was refused where ``t.at = '2024-02-01 00:00:00'`` matched. Only a literal gets here (a source's string column is refused as
    another kind), so its few distinct values are parsed one by one."""
    distinct = pc.unique(value)
    try:
        times = [None if v is None else bind_literal(name, v, typ) for v in distinct.to_pylist()]
    except FilterError as exc:
        raise SchemaMismatchError(
            f"the value assigned to column {name!r} does not fit {typ}: {exc}; nothing was written",
            column=name,
            expected=typ,
            actual=value.type,
        ) from None
    storage = pa.int32() if typ.bit_width == 32 else pa.int64()  # as_py drops nanoseconds
    counts = [None if t is None else t.cast(storage).as_py() for t in times]
    parsed = pa.array(counts, storage).view(typ)
    return pc.take(parsed, pc.index_in(value, value_set=distinct))
