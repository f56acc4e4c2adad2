"""The manifest codec: one field list drives DataFile's columns, and the format stays put."""

from __future__ import annotations

from dataclasses import fields

import pyarrow as pa

from raylake.format.manifest import (
    ADD,
    PLAIN_FIELDS,
    STRUCT_FIELDS,
    DataFile,
    data_files_from_table,
    entries_table,
    manifest_schema,
)
from raylake.format.schema import build_table_schema

SCHEMA = pa.schema([("id", pa.int64()), ("dt", pa.string()), ("v", pa.float64())])


def test_one_field_list_covers_every_datafile_field() -> None:
    names = [f.name for f in fields(DataFile)]
    assert sorted(names) == sorted([*PLAIN_FIELDS, *STRUCT_FIELDS]) and len(names) == 18


def test_every_field_round_trips() -> None:
    ts = build_table_schema(SCHEMA, partition_by=["dt"], primary_key=["id", "dt"], buckets=2)
    f = DataFile(
        path="data/x.parquet", file_size=10, row_count=3, partition=("2024",), bucket=1,
        level=2, schema_id=3, sequence_base=4, min_sequence=5, max_sequence=6,
        added_snapshot=7, delete_row_count=1, row_group_rows=(2, 1), row_group_sizes=(20, 10),
        column_sizes=(8, 9, 10), stats={"0": {"min": 1, "max": 3, "null_count": 0}},
        min_key=(1, "2024"), max_key=(3, "2024"),
    )  # fmt: skip
    (back,) = data_files_from_table(entries_table([(ADD, f)], ts), ts)
    assert back == f and back.stats["0"] == f.stats["0"]  # keyed by field id (v2)


def test_the_on_disk_columns_are_unchanged() -> None:
    ts = build_table_schema(SCHEMA, partition_by=["dt"], primary_key=["id", "dt"], buckets=2)
    schema = manifest_schema(ts)
    assert schema.names == [
        "kind", "path", "file_size", "row_count", "bucket", "level", "schema_id",
        "sequence_base", "min_sequence", "max_sequence", "added_snapshot", "delete_row_count",
        "row_group_rows", "row_group_sizes", "column_sizes", "stats", "partition", "min_key",
        "max_key",
    ]  # fmt: skip
    assert not schema.field("path").nullable and not schema.field("kind").nullable
    assert schema.field("bucket").type == pa.int32() and schema.field("level").type == pa.int32()
    assert schema.field("row_group_rows").type == pa.list_(pa.int64())
