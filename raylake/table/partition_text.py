"""Whether a partition directory's value could be one raylake wrote for a column's type.

``writer.partition_dir`` names a directory ``<key>=<quote(str(value))>``, or
``<key>=__NULL__`` for a null. Orphan cleanup deletes only files under directories so
named (docs/maintenance.md): ``p=abc``, ``p=01``, ``p=1.0`` or ``p=`` under an integer
column ``p`` are a user's, since no value of the column prints so.
"""

from __future__ import annotations

import re
from datetime import date
from urllib.parse import quote, unquote

import pyarrow as pa

from raylake.table.writer import NULL_PARTITION

_INTEGER = re.compile(r"-?(0|[1-9][0-9]*)")


def could_be_written(text: str, dtype: pa.DataType) -> bool:
    """Whether ``text`` (a directory name after ``<key>=``, not shortened) names a value
    of ``dtype``."""
    if text == NULL_PARTITION:
        return True
    value = unquote(text)
    if quote(value, safe="") != text:
        return False  # raylake quotes every character that needs it, the same way
    if pa.types.is_integer(dtype):
        return _INTEGER.fullmatch(value) is not None
    if pa.types.is_boolean(dtype):
        return value in ("True", "False")
    if pa.types.is_date(dtype):
        try:
            return date.fromisoformat(value).isoformat() == value
        except ValueError:
            return False
    return True  # strings take any text; other types are not checked more closely
