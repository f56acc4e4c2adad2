"""Rows as JSON lines for ``raylake scan --format json``: every line valid JSON.

Python's ``json`` writes NaN and the infinities as the bare words ``NaN`` and
``Infinity``, which no strict JSON parser reads (``jq``, JavaScript's ``JSON.parse``),
and ``str()`` of bytes gives Python's ``b'...'``. They follow the convention of
Spark's and protobuf's JSON instead: a float that is not finite is the string
``"NaN"``, ``"Infinity"`` or ``"-Infinity"`` (not null, which is a null value), and
binary values are base64 strings. Other values that JSON lacks (decimals, dates,
times, timestamps) are strings as ``str()`` writes them.
"""

from __future__ import annotations

import base64
import datetime
import json
import math
from typing import Any

_NOT_FINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}


def json_line(row: dict[str, Any]) -> str:
    """One row (``pa.Table.to_pylist``) as one line of strict JSON."""
    return json.dumps(_jsonable(row), default=str, allow_nan=False)


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else _NOT_FINITE[value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, datetime.datetime) and _offset_has_seconds(value):
        # A zone's offset of old had seconds (Europe/Paris before 1911, +00:09:21):
        # str() writes them, which no ISO 8601 offset has and `raylake write` could not
        # read. The same instant in UTC has an offset of whole minutes.
        return str(value.astimezone(datetime.timezone.utc))
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _offset_has_seconds(value: datetime.datetime) -> bool:
    offset = value.utcoffset()
    return offset is not None and offset % datetime.timedelta(minutes=1) != datetime.timedelta(0)
