"""Reading one primary-key data file with its sequences made effective."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from raylake.format.manifest import DataFile
from raylake.format.schema import TableSchema
from raylake.io import FileIO
from raylake.io.read_errors import reading
from raylake.table.fragments import parquet_fragment
from raylake.table.pk.schema import SEQ, file_schema
from raylake.table.projection import projection_of
from raylake.table.split import FileSlice


def read_file(
    file_io: FileIO,
    ts: TableSchema,
    f: FileSlice | DataFile,
    columns: Sequence[str],
    key_filter: pc.Expression | None = None,
) -> pa.Table:
    """One data file's columns, with ``_rl_seq`` made effective (its sequence base added).

    A file of another schema version is read by field id (raylake/table/projection.py).
    """
    fs = file_io.arrow_filesystem()
    path = file_io.full_path(f.path)
    projection = projection_of(file_io, ts, f.schema_id)
    wanted = list(columns) if projection is None else projection.file_columns(columns)
    if key_filter is None:
        # The Parquet reader decodes the columns of a row group in parallel; a dataset
        # scan of one file would decode a whole row group on one thread.
        with reading(path), fs.open_input_file(path) as source:
            metadata = parquet_fragment(file_io, f.path, file_size=f.file_size).metadata
            reader = pq.ParquetFile(source, metadata=metadata)
            pa_table = reader.read(columns=wanted, use_threads=True)
    else:
        # Key columns never change (docs/schema-evolution.md): the key filter holds in
        # every schema version, under the file's own schema.
        fragment = parquet_fragment(file_io, f.path, file_size=f.file_size)
        schema = file_schema(ts) if projection is None else None
        with reading(path):
            pa_table = fragment.to_table(schema=schema, columns=wanted, filter=key_filter)
    if projection is not None:
        pa_table = projection.conform(pa_table, columns)
    else:
        pa_table = table_fields(pa_table, file_schema(ts))
    if f.sequence_base and SEQ in pa_table.column_names:
        i = pa_table.column_names.index(SEQ)
        shifted = pc.add(pa_table.column(i), pa.scalar(f.sequence_base, pa.int64()))
        pa_table = pa_table.set_column(i, pa_table.schema.field(i), shifted)
    return pa_table


def table_fields(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """``rows`` with ``schema``'s fields where a file marked a nullable column non-null,
    or stored a column in a type Parquet has in place of the table's.

    Writers store a column non-null in a file where it has no null (pk/write.py), so
    rows of different files would otherwise differ in their schemas (and could not be
    concatenated); no data is copied for that. Parquet has no seconds: timestamp[s] and
    time32[s] columns come back in milliseconds, date64 as date32, and rows read from
    files could not be concatenated with rows of the table's types (an empty bucket's).
    """
    fields, columns, changed = [], list(rows.columns), False
    for n, f in enumerate(rows.schema):
        i = schema.get_field_index(f.name)
        if i < 0:
            fields.append(f)
            continue
        target = schema.field(i)
        if not f.nullable and target.nullable:
            f, changed = f.with_nullable(True), True
        if _stored_otherwise(f.type, target.type):
            columns[n] = columns[n].cast(target.type)
            f, changed = f.with_type(target.type), True
        fields.append(f)
    if not changed:
        return rows
    return pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata=rows.schema.metadata))


def _stored_otherwise(stored: pa.DataType, wanted: pa.DataType) -> bool:
    """A column Parquet gave back in another type (a temporal unit or width, also inside
    a list or struct); dictionary-encoded reads are left to their readers."""
    return not stored.equals(wanted) and not pa.types.is_dictionary(stored)
