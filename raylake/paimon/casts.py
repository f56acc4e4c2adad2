"""Paimon's cast rules for a column whose type a schema change altered.

A file keeps the values it was written with; a read under a later schema casts them
as Java Paimon's ``CastExecutors`` do, which differ from Arrow's casts in places:

- STRING to BOOLEAN accepts ``t/true/y/yes/1`` and ``f/false/n/no/0`` in any case;
  STRING to a number, DATE, TIME or TIMESTAMP trims blanks first.
- A TIMESTAMP is a wall clock, a TIMESTAMP WITH LOCAL TIME ZONE (LTZ) an instant: a
  cast between them, or between either and a number, a DATE or a STRING, goes through
  the *session time zone* (Java: the JVM's default zone). A number is seconds since
  the epoch; a timestamp to a number truncates to whole seconds.
- TIMESTAMP and LTZ to STRING print ``yyyy-MM-dd HH:mm:ss`` and a fraction of at least
  the type's precision (trailing zeros beyond it dropped).
- Integers narrow by wrapping, as a Java cast does; FLOAT/DOUBLE to an integer drops
  the fraction; a timestamp of lower precision drops digits (floors, before 1970 too).
- FLOAT/DOUBLE and TIME to STRING are refused: Java prints them its own way.

Each rule is one vectorized Arrow computation per column and batch. A cast raylake
does not implement raises :class:`UnsupportedPaimonError` naming the two types.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from raylake.errors import UnsupportedPaimonError
from raylake.expr.decimals import cast_through_text
from raylake.paimon.types import PaimonType

# The environment variable that sets the session time zone of Paimon reads (Java's
# user.timezone); unset, the process's own zone (TZ, then /etc/localtime), as Java.
TIME_ZONE_VARIABLE = "RAYLAKE_PAIMON_TIME_ZONE"

_TRUE = ["t", "true", "y", "yes", "1"]
_FALSE = ["f", "false", "n", "no", "0"]
_INTEGERS = ("TINYINT", "SMALLINT", "INT", "INTEGER", "BIGINT")
_NUMBERS = (*_INTEGERS, "FLOAT", "DOUBLE", "DECIMAL")
_STRINGS = ("STRING", "VARCHAR", "CHAR")
_TIMESTAMPS = ("TIMESTAMP", "TIMESTAMP_LTZ")
_UNITS = ["s", "ms", "us", "ns"]

Array = Any  # pa.Array or pa.ChunkedArray


def session_time_zone() -> str:
    """The session time zone of a Paimon read, as Java picks its default zone."""
    for value in (os.environ.get(TIME_ZONE_VARIABLE), os.environ.get("TZ")):
        if value:
            return value.lstrip(":")
    try:
        target = str(Path("/etc/localtime").resolve())
    except OSError:  # pragma: no cover - no zone database
        return "UTC"
    marker = "zoneinfo/"
    return target.split(marker, 1)[1] if marker in target else "UTC"


def column_caster(
    changed: Mapping[str, tuple[PaimonType, PaimonType]], zone: str, uri: str
) -> Callable[[str, Array, pa.DataType], Array]:
    """A ``cast(column, values, arrow_type)`` for the columns whose Paimon type changed
    (column -> (written type, read type)); other columns get Arrow's cast."""

    def cast(column: str, values: Array, target: pa.DataType) -> Array:
        types = changed.get(column)
        if types is None:
            return values if values.type.equals(target) else values.cast(target)
        source, dest = types
        refused = _refused(source, dest)
        if refused:
            raise UnsupportedPaimonError(
                uri,
                f"column {column!r} changed type from {_name(source)} to {_name(dest)}: {refused}",
            )
        try:
            return paimon_cast(values, source, dest, zone)
        except pa.ArrowException as exc:
            raise UnsupportedPaimonError(
                uri,
                f"column {column!r} changed type from {_name(source)} to {_name(dest)} and a "
                f"value does not cast ({exc})",
            ) from exc

    return cast


def _refused(source: PaimonType, dest: PaimonType) -> str:
    """Why raylake does not make a cast (''): where Java prints values its own way."""
    if dest.root in _STRINGS and source.root in ("FLOAT", "DOUBLE"):
        return "Java prints them with Double.toString (1.0E10), which raylake does not copy"
    if dest.root in _STRINGS and source.root == "TIME":
        return "Java prints a TIME its own way, which raylake does not copy"
    return ""


def paimon_cast(values: Array, source: PaimonType, dest: PaimonType, zone: str) -> Array:
    """``values`` (as stored for ``source``) as ``dest``, by Paimon's rules."""
    target = dest.to_arrow()
    values = values.cast(source.to_arrow())  # the stored physical type as the logical one
    src, dst = source.root, dest.root
    if src in _STRINGS and dst not in _STRINGS:
        return _from_string(pc.utf8_trim_whitespace(values), dest, zone)
    if src in _TIMESTAMPS and dst in _STRINGS:
        return _timestamp_string(_wall_clock(values, src, zone), source.precision)
    if src in _TIMESTAMPS and dst in _TIMESTAMPS:
        return _as_timestamp(_wall_clock(values, src, zone), dest, zone)
    if src in _TIMESTAMPS and dst in _INTEGERS:
        seconds = _epoch_seconds(values, src, zone)
        return seconds.cast(target, safe=False)
    if src in _TIMESTAMPS and dst == "DATE":
        return _wall_clock(values, src, zone).cast(pa.date32())
    if src == "DATE" and dst in _TIMESTAMPS:
        return _as_timestamp(values.cast(pa.timestamp("s")), dest, zone)
    if src in _INTEGERS and dst in _TIMESTAMPS:
        instant = values.cast(pa.int64()).cast(pa.timestamp("s", tz="UTC"))
        return _as_timestamp(_wall_clock(instant, "TIMESTAMP_LTZ", zone), dest, zone)
    if src in _INTEGERS and dst in _INTEGERS:
        return values.cast(target, safe=False)  # a Java narrowing cast wraps
    if src in ("FLOAT", "DOUBLE") and dst in _INTEGERS:
        return pc.trunc(values).cast(target)  # Java drops the fraction
    if src in _INTEGERS and dst in ("FLOAT", "DOUBLE"):
        # Java's (double) of a long rounds to the nearest float: 2**53 + 1 is 2**53
        # (Arrow's safe cast refuses what does not fit exactly)
        return values.cast(target, safe=False)
    if src == "DECIMAL" and dst in ("FLOAT", "DOUBLE"):
        return cast_through_text(values, target)  # as BigDecimal.doubleValue() rounds
    return values.cast(target)


def _from_string(values: Array, dest: PaimonType, zone: str) -> Array:
    root = dest.root
    if root == "BOOLEAN":
        lower = pc.utf8_lower(values)
        truth = pc.is_in(lower, value_set=pa.array(_TRUE))
        falsity = pc.is_in(lower, value_set=pa.array(_FALSE))
        bad = pc.and_(pc.is_valid(values), pc.invert(pc.or_(truth, falsity)))
        if pc.any(bad).as_py():
            raise pa.ArrowInvalid(f"{pc.filter(values, bad)[0]} is no BOOLEAN")
        return pc.if_else(pc.is_null(values), pa.scalar(None, pa.bool_()), truth)
    if root in _TIMESTAMPS:
        return _as_timestamp(values.cast(pa.timestamp("ns")), dest, zone)
    if root == "TIME":
        day = pc.binary_join_element_wise("1970-01-01 ", values, "")
        stamp = pc.strptime(day, format="%Y-%m-%d %H:%M:%S", unit="ms")
        return stamp.cast(pa.int64()).cast(pa.int32()).cast(pa.time32("ms"))
    return values.cast(dest.to_arrow())


def _wall_clock(values: Array, root: str, zone: str) -> Array:
    """The wall clock (a naive timestamp) of a TIMESTAMP, or of an LTZ in ``zone``."""
    if root != "TIMESTAMP_LTZ":
        return values
    unit = values.type.unit
    return pc.local_timestamp(values.cast(pa.timestamp(unit, tz=zone)))


def _as_timestamp(wall: Array, dest: PaimonType, zone: str) -> Array:
    """A wall clock as ``dest``: itself for a TIMESTAMP, its instant in ``zone`` for LTZ."""
    target = dest.to_arrow()
    wall = _floor(wall, target.unit)  # a lower precision drops digits, before 1970 too
    if dest.root != "TIMESTAMP_LTZ":
        return wall.cast(target, safe=False)
    instant = pc.assume_timezone(wall, timezone=zone, ambiguous="earliest", nonexistent="earliest")
    return instant.cast(target, safe=False)


def _floor(values: Array, unit: str) -> Array:
    """Timestamps floored to ``unit`` (Arrow's unsafe cast truncates toward zero)."""
    if _UNITS.index(unit) >= _UNITS.index(values.type.unit):
        return values
    name = {"s": "second", "ms": "millisecond", "us": "microsecond"}[unit]
    return pc.floor_temporal(values, unit=name)


def _epoch_seconds(values: Array, root: str, zone: str) -> Array:
    """Seconds since the epoch, truncated toward zero: of the instant for an LTZ, of the
    wall clock taken in ``zone`` for a TIMESTAMP."""
    if root == "TIMESTAMP_LTZ":
        instant = values
    else:
        instant = pc.assume_timezone(
            values, timezone=zone, ambiguous="earliest", nonexistent="earliest"
        )
    nanos = instant.cast(pa.timestamp("ns", tz="UTC")).cast(pa.int64())
    return pc.divide(nanos, pa.scalar(1_000_000_000, pa.int64()))  # truncates toward zero


def _timestamp_string(wall: Array, precision: int | None) -> Array:
    """``yyyy-MM-dd HH:mm:ss[.fraction]`` as Java Paimon prints a timestamp."""
    p = 6 if precision is None else precision
    nanos = wall.cast(pa.timestamp("ns"))
    whole = pc.floor_temporal(nanos, unit="second")
    base = pc.strftime(whole.cast(pa.timestamp("s")), format="%Y-%m-%d %H:%M:%S")
    rest = pc.subtract(nanos.cast(pa.int64()), whole.cast(pa.int64()))
    digits = pc.utf8_lpad(rest.cast(pa.string()), width=9, padding="0")
    digits = pc.replace_substring_regex(digits, pattern=f"^(\\d{{{p}}}\\d*?)0*$", replacement="\\1")
    dotted = pc.binary_join_element_wise(base, digits, ".")
    return pc.if_else(pc.equal(pc.utf8_length(digits), 0), base, dotted)


def _name(t: PaimonType) -> str:
    if t.root == "TIMESTAMP_LTZ":
        return f"TIMESTAMP({t.precision}) WITH LOCAL TIME ZONE"
    if t.root == "DECIMAL":
        return f"DECIMAL({t.precision}, {t.scale or 0})"
    return t.root if t.precision is None else f"{t.root}({t.precision})"
