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
A file may cover only part of its group's rows (a BLOB column's ``.blob`` files,
raylake/paimon/blob.py, roll by size): each row takes each column from the newest file
that holds the column and covers the row.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import pyarrow as pa

from raylake.errors import UnsupportedPaimonError
from raylake.paimon.meta import PaimonFileSlice, PaimonTableSchema


def row_range_groups(files: list[PaimonFileSlice]) -> list[list[PaimonFileSlice]]:
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


def group_rows(group: list[PaimonFileSlice]) -> int:
    """A row-range group's rows: its files hold columns of the same rows."""
    return max(f.row_count for f in group)


def read_row_range(ctx: Any, files: Sequence[PaimonFileSlice], columns: Sequence[str]) -> pa.Table:
    """The rows of one row-range group, ``columns`` (current names) in current types.

    Each row takes each column from the newest file (highest sequence number) that
    holds the column and covers the row: a file may cover part of the group's range
    (Paimon rolls a BLOB column's ``.blob`` files by size, so that several of them tile
    the rows of one file of the other columns)."""
    from raylake.paimon.read import read_file

    ts: PaimonTableSchema = ctx.table_schema
    info = ts.info
    if any(f.deletion is not None for f in files):
        raise UnsupportedPaimonError(info.uri, "deletion vectors on data evolution files")
    first = {f.path: f.first_row_id or 0 for f in files}
    start = min(first.values())
    rows = max(first[f.path] + f.row_count for f in files) - start
    ids = {f.name: f.id for f in info.current.fields}
    pieces: dict[str, list[tuple[int, int, PaimonFileSlice | None]]] = {}
    wanted: dict[str, list[str]] = {}
    for column in columns:
        holders = [f for f in files if _holds(info.schemas.get(f.schema_id), f, ids[column])]
        pieces[column] = _tiles(start, start + rows, holders, first)
        for _, _, f in pieces[column]:
            if f is not None:
                wanted.setdefault(f.path, []).append(column)
    read: dict[str, pa.Table] = {}
    for f in files:
        if f.path not in wanted:
            continue
        part = read_file(ctx, f, list(dict.fromkeys(wanted[f.path])))
        if part.num_rows != f.row_count:
            raise UnsupportedPaimonError(
                info.uri,
                f"data evolution file {f.path} holds {part.num_rows} rows, its metadata "
                f"{f.row_count}",
            )
        read[f.path] = part
    if not columns:
        return pa.table({"_": pa.nulls(rows)}).select([])
    schema = pa.schema([ts.arrow_schema.field(c) for c in columns])
    arrays = []
    for column in columns:
        dtype = schema.field(column).type
        chunks = []
        for lo, hi, f in pieces[column]:
            if f is None:
                chunks.append(pa.nulls(hi - lo, dtype))
            else:
                values = read[f.path].column(column).slice(lo - first[f.path], hi - lo)
                chunks.extend(values.chunks)
        arrays.append(pa.chunked_array(chunks, dtype))
    return pa.Table.from_arrays(arrays, schema=schema)


def _tiles(
    start: int, end: int, holders: Sequence[PaimonFileSlice], first: dict[str, int]
) -> list[tuple[int, int, PaimonFileSlice | None]]:
    """Row-id intervals tiling ``[start, end)``, each with the newest of ``holders``
    that covers it (None: no file holds the column there; it reads as nulls)."""
    newest = sorted(holders, key=lambda f: f.max_sequence, reverse=True)
    cuts = sorted(
        {start, end}
        | {min(max(first[f.path], start), end) for f in holders}
        | {min(max(first[f.path] + f.row_count, start), end) for f in holders}
    )
    tiles: list[tuple[int, int, PaimonFileSlice | None]] = []
    for lo, hi in pairwise(cuts):
        cover = next(
            (f for f in newest if first[f.path] <= lo and hi <= first[f.path] + f.row_count),
            None,
        )
        if tiles and tiles[-1][2] is cover and tiles[-1][1] == lo:
            tiles[-1] = (tiles[-1][0], hi, cover)
        else:
            tiles.append((lo, hi, cover))
    return tiles


def _holds(schema: Any, f: PaimonFileSlice, field_id: int) -> bool:
    """Whether file ``f`` (written under ``schema``) holds the field ``field_id``."""
    if schema is None:
        return False
    name = schema.by_id().get(field_id)
    if name is None:
        return False
    return f.write_cols is None or name.name in f.write_cols
