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
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value
