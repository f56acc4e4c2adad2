"""The directory names Paimon gives partition values: ``k=v/``, as Java prints ``v``.

Paimon's manifests name a data file by its partition's values and bucket; the file lies
under the directory Java's writer made of them, so a reader must print each value as
Java does, or it looks for a directory that is not there.

- With ``partition.legacy-name=true`` (the default) a value prints as Java's
  ``toString()`` of its internal form: a DATE as its day number, a TIME as its
  millisecond of the day, a TIMESTAMP (also WITH LOCAL TIME ZONE, whose internal form is
  its UTC wall clock) as ``LocalDateTime.toString()`` (``2024-01-01T00:00``: seconds
  only when not zero, and a fraction of 3, 6 or 9 digits, as few as hold it), a DECIMAL
  as ``BigDecimal.toPlainString()`` (never an exponent: ``0.0000001``).
- With ``partition.legacy-name=false`` a value prints as Paimon's cast to STRING: a
  DATE as ``yyyy-MM-dd``, a TIMESTAMP as ``yyyy-MM-dd HH:mm:ss`` with the fraction's
  trailing zeros dropped down to the type's precision, a TIME as ``HH:mm:ss`` with up to
  its precision of digits of the millisecond, a LTZ in the writer's default zone (here:
  the session time zone, docs/paimon.md).

Then Hive's escaping applies to the text (``:`` is ``%3A``).
"""

from __future__ import annotations

from datetime import date, datetime, time, timezone
from typing import Any
from zoneinfo import ZoneInfo

from raylake.paimon.types import PaimonType

_EPOCH_DATE = date(1970, 1, 1)


def partition_text(value: Any, t: PaimonType, default: str, legacy: bool, zone: str) -> str:
    """The name of partition value ``value`` of type ``t`` in a directory ``k=<name>``."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return default
    return escape(_text(value, t, legacy, zone))


def _text(value: Any, t: PaimonType, legacy: bool, zone: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if t.root == "DECIMAL":
        return f"{value:f}"
    if t.root == "DATE":
        return str((value - _EPOCH_DATE).days) if legacy else value.isoformat()
    if t.root == "TIME":
        millis = _millis_of_day(value)
        return str(millis) if legacy else _cast_time(value, millis, t.precision or 0)
    if t.root in ("TIMESTAMP", "TIMESTAMP_LTZ"):
        nanos = value.microsecond * 1000 + int(getattr(value, "nanosecond", 0))
        if legacy:
            return _local_date_time(value, nanos)
        if t.root == "TIMESTAMP_LTZ":
            value = _in_zone(value, zone)
        precision = 6 if t.precision is None else t.precision
        return _cast_timestamp(value, nanos, precision)
    return str(value)


def _millis_of_day(value: time) -> int:
    return ((value.hour * 60 + value.minute) * 60 + value.second) * 1000 + value.microsecond // 1000


def _local_date_time(value: datetime, nanos: int) -> str:
    """Java's ``LocalDateTime.toString()``."""
    text = f"{value.year:04d}-{value.month:02d}-{value.day:02d}T{value.hour:02d}:{value.minute:02d}"
    if not (value.second or nanos):
        return text
    text += f":{value.second:02d}"
    if nanos % 1_000_000 == 0 and nanos:
        return f"{text}.{nanos // 1_000_000:03d}"
    if nanos % 1000 == 0 and nanos:
        return f"{text}.{nanos // 1000:06d}"
    return f"{text}.{nanos:09d}" if nanos else text


def _cast_timestamp(value: datetime, nanos: int, precision: int) -> str:
    """Paimon's TIMESTAMP to STRING: nine digits of fraction, trailing zeros dropped
    while more than ``precision`` are left."""
    text = (
        f"{value.year:04d}-{value.month:02d}-{value.day:02d} "
        f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}"
    )
    fraction = f"{nanos:09d}"
    while len(fraction) > precision and fraction.endswith("0"):
        fraction = fraction[:-1]
    return f"{text}.{fraction}" if fraction else text


def _cast_time(value: time, millis: int, precision: int) -> str:
    """Paimon's TIME to STRING: digits of the millisecond, one at a time, up to
    ``precision``, until only zeros are left (101 ms at precision 2 is ``.10``)."""
    text = f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}"
    if precision <= 0:
        return text
    ms, digits = millis % 1000, ""
    while precision > 0:
        digits += str(ms // 100)
        ms = ms % 100 * 10
        if ms == 0:
            break
        precision -= 1
    return f"{text}.{digits}"


def _in_zone(value: datetime, zone: str) -> Any:
    """A LTZ's UTC wall clock as the wall clock of ``zone``."""
    nanosecond = int(getattr(value, "nanosecond", 0))
    plain = datetime(*value.timetuple()[:6], value.microsecond, tzinfo=timezone.utc)
    local = plain.astimezone(ZoneInfo(zone)).replace(tzinfo=None)
    if nanosecond:
        import pandas as pd

        return pd.Timestamp(local) + pd.Timedelta(nanoseconds=nanosecond)
    return local


def escape(text: str) -> str:
    """Hive's escaping of partition path names (the characters Paimon escapes too)."""
    special = set("\"#%'*/:=?\\\x7f{[]^")
    return "".join(f"%{ord(c):02X}" if c in special or ord(c) < 0x20 else c for c in text)
