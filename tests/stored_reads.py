"""Reads of a table whose files store some nullable columns non-null (the writers mark a
column without nulls ``required``): split by split and piece by piece, each with the
table's own fields (tests/table/test_append_nonnull.py, test_pk_nonnull.py)."""

from __future__ import annotations

import pyarrow as pa

import raylake
from raylake.train.source import LakeSource


def split_and_piece_reads(tbl: raylake.Table, schema: pa.Schema) -> list[pa.Table]:
    """The whole table read split by split (splits of one file or less) and as the
    loaders' pieces; each read has exactly ``schema``."""
    parts = tbl.scan().with_split_size(1).plan()
    assert len(parts) > 1
    by_split = pa.Table.from_batches([b for s in parts for b in tbl.read_split(s)], schema=schema)
    source = LakeSource.open(tbl, columns=None)
    pieces = [source.read_piece(i) for i in range(len(source.pieces))]
    assert all(p.schema == schema for p in pieces)
    return [by_split, pa.concat_tables(pieces)]
