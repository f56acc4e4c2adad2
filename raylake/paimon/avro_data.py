"""Avro data files (``file.format=avro``), read with fastavro.

pyarrow has no Avro reader, so fastavro decodes the file's records (in C, to Python
values) and Arrow builds the columns from them, typed by the Paimon schema the file
was written with: a slower path than Parquet or ORC (Python objects per value), taken
only for the columns a read asks for. Paimon writes a TIMESTAMP as ``timestamp-millis``
/ ``-micros`` (a wall clock counted as if in UTC) and an LTZ as
``local-timestamp-millis`` / ``-micros`` (the instant's UTC count): both become the
same Arrow timestamps as their Parquet twins.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any, cast

import pyarrow as pa

from raylake.errors import CorruptMetadataError, MissingDependencyError


def read_avro(source: Any, columns: Sequence[str], schema: pa.Schema, where: str) -> pa.Table:
    """``columns`` of the Avro file ``source``; those in ``schema`` get its types."""
    try:
        import fastavro
    except ImportError as exc:  # pragma: no cover - the extra is installed in tests
        raise MissingDependencyError("fastavro", "paimon") from exc
    try:
        records = cast(list[dict[str, Any]], list(fastavro.reader(source)))
    except (ValueError, EOFError) as exc:
        raise CorruptMetadataError(where, f"not a readable Avro data file: {exc}") from exc
    if not columns:
        return pa.table({"_": pa.nulls(len(records))}).select([])
    arrays, fields = [], []
    for name in columns:
        values = [_plain(r.get(name)) for r in records]
        if name in schema.names:
            field = schema.field(name)
            arrays.append(pa.array(values, type=field.type))
            fields.append(field)
        else:  # a system column (_SEQUENCE_NUMBER, _VALUE_KIND, _KEY_...): cast later
            array = pa.array(values)
            arrays.append(array)
            fields.append(pa.field(name, array.type))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _plain(value: Any) -> Any:
    """A timestamp as its UTC count without a zone (both Avro timestamp kinds)."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return value
