"""A read that failed because its ``Table`` object is older than the table's schema.

A ``Table`` keeps the schema it was opened with until ``refresh()`` and reads every
file under it (docs/schema-evolution.md). Where another writer widened a column since
(int32 to int64) and wrote values only the wider type holds, the cast of those values
to the older type fails inside pyarrow's scan with a bare ``ArrowInvalid``: here that
becomes a :class:`~raylake.errors.SchemaError` that names the columns and says to call
``refresh()``. The latest schema is read only once a read has failed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

import pyarrow as pa

from raylake.errors import SchemaError
from raylake.format.schema import TableSchema
from raylake.format.schema_files import load_schema
from raylake.io import FileIO

T = TypeVar("T")


@contextmanager
def stale_schema_errors(file_io: FileIO, ts: TableSchema) -> Iterator[None]:
    """Raise a failed cast inside (a value the reader's older column type cannot hold)
    as SchemaError, where the table's latest schema changed the type of a column."""
    try:
        yield
    except pa.ArrowInvalid as exc:
        changed = _changed_columns(file_io, ts)
        if not changed:
            raise
        raise SchemaError(
            f"cannot read {file_io.uri} under the schema this Table was opened with: "
            f"another writer changed the type of {', '.join(changed)} since, and a value "
            f"does not fit the older type; call refresh() and read again ({exc})"
        ) from exc


def stale_schema_batches(file_io: FileIO, ts: TableSchema, batches: Iterator[T]) -> Iterator[T]:
    """``batches``, with a failed cast named as :func:`stale_schema_errors` names it."""
    with stale_schema_errors(file_io, ts):
        yield from batches


def _changed_columns(file_io: FileIO, ts: TableSchema) -> list[str]:
    """The reader's columns whose type the latest schema changed ('id: int32 -> int64')."""
    try:
        latest = load_schema(file_io)
    except Exception:  # a Paimon table has no raylake schema; the failed read says more
        return []
    if latest.schema_id <= ts.schema_id:
        return []
    newer = dict(zip(latest.field_ids, latest.arrow_schema, strict=True))
    return [
        f"{f.name}: {f.type} -> {newer[i].type}"
        for i, f in zip(ts.field_ids, ts.arrow_schema, strict=True)
        if i in newer and not newer[i].type.equals(f.type)
    ]
