"""Data evolution: append-table rows whose columns lie in several files, joined by row id.

With ``data-evolution.enabled`` (and row tracking), Paimon adds or rewrites columns of
existing rows by writing files that hold only those columns (``_WRITE_COLS``) for the
same row ids (``_FIRST_ROW_ID`` and the row count). A read groups the files of a
partition and bucket whose row-id ranges overlap; within a group each column comes
from the newest file (highest sequence number) that holds it, and the files' rows line
up by position. A column no file of the group holds reads as nulls.

Planning keeps a group in one split (a split section, as a primary-key bucket's
overlapping files); :func:`read_row_range` reads a group: each file once, with only the
columns it supplies, mapped onto the current schema by field id like any file.
Groups whose files cover different row ranges (Paimon's BLOB files split a range) are
refused by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from raylake.errors import UnsupportedPaimonError
from raylake.paimon.meta import PaimonFileSlice, PaimonTableSchema
from raylake.table.split import Split, partition_sort_key


def row_range_splits(
    snapshot_id: int, pieces: Sequence[tuple[Any, Any]], target: int
) -> list[Split]:
    """Splits of about ``target`` bytes whose sections are the row-range groups."""
    buckets: dict[tuple[tuple[Any, ...], int], list[PaimonFileSlice]] = {}
    for f, s in pieces:
        buckets.setdefault((f.partition, f.bucket), []).append(s)
    splits: list[Split] = []
    for (partition, bucket), members in sorted(
        buckets.items(), key=lambda kv: (partition_sort_key(kv[0][0]), kv[0][1])
    ):
        current: list[list[PaimonFileSlice]] = []
        size = 0
        for group in _row_range_groups(members):
            group_size = sum(s.size_bytes for s in group)
            if current and size + group_size > target:
                splits.append(_split(snapshot_id, partition, bucket, current))
                current, size = [], 0
            current.append(group)
            size += group_size
        if current:
            splits.append(_split(snapshot_id, partition, bucket, current))
    return splits


def _row_range_groups(files: list[PaimonFileSlice]) -> list[list[PaimonFileSlice]]:
    """Files whose row-id ranges overlap, transitively, in row-id order."""
    tracked = sorted(
        (f for f in files if f.first_row_id is not None), key=lambda f: f.first_row_id or 0
    )
    groups: list[list[PaimonFileSlice]] = []
    end = 0
    for f in tracked:
        start = f.first_row_id or 0
        if groups and start < end:
            groups[-1].append(f)
            end = max(end, start + f.row_count)
        else:
            groups.append([f])
            end = start + f.row_count
    return groups + [[f] for f in files if f.first_row_id is None]


def _split(
    snapshot_id: int, partition: tuple[Any, ...], bucket: int, groups: list[list[PaimonFileSlice]]
) -> Split:
    files = tuple(f for group in groups for f in group)
    return Split(
        snapshot_id=snapshot_id,
        partition=partition,
        bucket=bucket,
        files=files,
        row_count=sum(max(f.row_count for f in group) for group in groups),
        size_bytes=sum(f.size_bytes for f in files),
        sections=tuple(len(group) for group in groups),
    )


def read_row_range(ctx: Any, files: Sequence[PaimonFileSlice], columns: Sequence[str]) -> pa.Table:
    """The rows of one row-range group, ``columns`` (current names) in current types."""
    from raylake.paimon.read import read_file

    ts: PaimonTableSchema = ctx.table_schema
    info = ts.info
    ranges = {(f.first_row_id, f.row_count) for f in files}
    if len(ranges) > 1:
        raise UnsupportedPaimonError(
            info.uri,
            f"data evolution files {[f.path for f in files]} cover different row ranges "
            f"{sorted(ranges, key=str)} (as BLOB files do)",
        )
    if any(f.deletion is not None for f in files):
        raise UnsupportedPaimonError(info.uri, "deletion vectors on data evolution files")
    ids = {f.name: f.id for f in info.current.fields}
    supplier: dict[str, PaimonFileSlice] = {}
    for column in columns:
        holders = [f for f in files if _holds(info.schemas.get(f.schema_id), f, ids[column])]
        if holders:
            supplier[column] = max(holders, key=lambda f: f.max_sequence)
    rows = files[0].row_count
    read: dict[str, pa.ChunkedArray] = {}
    for f in dict.fromkeys(supplier.values()):
        names = [c for c in columns if supplier.get(c) is f]
        part = read_file(ctx, f, names)
        if part.num_rows != rows:
            raise UnsupportedPaimonError(
                info.uri, f"data evolution file {f.path} holds {part.num_rows} rows of {rows}"
            )
        read.update({c: part.column(c) for c in names})
    schema = pa.schema([ts.arrow_schema.field(c) for c in columns])
    arrays = [
        read.get(c, pa.chunked_array([pa.nulls(rows, schema.field(c).type)])) for c in columns
    ]
    if not columns:
        return pa.table({"_": pa.nulls(rows)}).select([])
    return pa.Table.from_arrays(arrays, schema=schema)


def _holds(schema: Any, f: PaimonFileSlice, field_id: int) -> bool:
    """Whether file ``f`` (written under ``schema``) holds the field ``field_id``."""
    if schema is None:
        return False
    name = schema.by_id().get(field_id)
    if name is None:
        return False
    return f.write_cols is None or name.name in f.write_cols
