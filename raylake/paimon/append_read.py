"""Append files that need no mapping, read by one pyarrow.dataset scan.

A Parquet file written with the current names, ids and types of the columns read, and
without a deletion vector, is read as raylake reads its own append files: one
``pyarrow.dataset`` scan over all such files, which reads files ahead in parallel,
pushes the filter into the Parquet reader (row-group statistics) and assembles the
result on all cores. Other files go through raylake/paimon/read.py one by one.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

from raylake.expr import AlwaysTrue, nan_sensitive, to_arrow
from raylake.paimon.meta import PaimonFileSlice, PaimonTableSchema
from raylake.table.fragments import (
    fragments_dataset,
    parquet_fragment,
    scan_arguments,
    scan_batches,
)
from raylake.table.split import Split


def split_files(
    ctx: Any, splits: Sequence[Split]
) -> tuple[list[PaimonFileSlice], list[PaimonFileSlice]]:
    """The files a dataset scan can read as they are, and the rest."""
    ts: PaimonTableSchema = ctx.table_schema
    plain: list[PaimonFileSlice] = []
    other: list[PaimonFileSlice] = []
    compatible: dict[int, bool] = {}
    for split in splits:
        for f in split.files:
            assert isinstance(f, PaimonFileSlice)
            if f.schema_id not in compatible:
                compatible[f.schema_id] = _same_columns(ts, f.schema_id)
            usable = compatible[f.schema_id] and f.deletion is None and f.file_format == "parquet"
            (plain if usable else other).append(f)
    return plain, other


def _same_columns(ts: PaimonTableSchema, schema_id: int) -> bool:
    info = ts.info
    written = info.schemas.get(schema_id)
    if written is None:
        return False
    by_id = written.by_id()
    for f in info.current.fields:
        old = by_id.get(f.id)
        if old is None or old.name != f.name or old.type.to_arrow() != f.type.to_arrow():
            return False
    return True


def _dataset(ctx: Any, files: Sequence[PaimonFileSlice]) -> ds.FileSystemDataset:
    fragments = [parquet_fragment(ctx.file_io, f.path, file_size=f.file_size) for f in files]
    return fragments_dataset(ctx.file_io, ctx.table_schema.arrow_schema, fragments)


def _arguments(ctx: Any) -> dict[str, Any]:
    row_filter = None if isinstance(ctx.filter, AlwaysTrue) else to_arrow(ctx.filter)
    return {
        "columns": None if ctx.columns is None else list(ctx.columns),
        "filter": row_filter,
        "batch_size": ctx.batch_size,
        **scan_arguments(ctx.file_io),
    }


def usable(ctx: Any) -> bool:
    """Whether the filter may go to pyarrow's scan (NaN-sensitive filters may not: it
    would prune row groups by statistics that ignore NaN)."""
    return not nan_sensitive(ctx.filter)


def plain_batches(ctx: Any, files: Sequence[PaimonFileSlice]) -> Iterator[pa.RecordBatch]:
    if files:
        yield from scan_batches(ctx.file_io, _dataset(ctx, files), **_arguments(ctx))


def plain_table(ctx: Any, files: Sequence[PaimonFileSlice]) -> pa.Table:
    return _dataset(ctx, files).to_table(**_arguments(ctx))
