"""Bad input to primary-key tables: a specific error naming the problem, nothing committed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import raylake
from raylake.errors import (
    InvalidArgumentError,
    InvalidOptionError,
    NullConstraintError,
    SchemaError,
    SchemaMismatchError,
    UnsupportedOperationError,
)
from raylake.table.catalog import table_exists

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("dt", pa.string()),
        ("v", pa.float64()),
        ("s", pa.string()),
        ("tags", pa.list_(pa.string())),
    ]
)


def create(tmp_path: Path, **kwargs: Any) -> raylake.Table:
    kwargs.setdefault("primary_key", ["id"])
    return raylake.create_table(str(tmp_path / "t"), SCHEMA, **kwargs)


def data_files(tbl: raylake.Table) -> list[str]:
    return [p for p, _ in tbl.file_io.list_files("data") if p.endswith(".parquet")]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"partition_by": ["dt"]},
            SchemaError,
            r"partition column\(s\) \['dt'\] must be part of the primary key",
        ),
        ({"primary_key": ["v"]}, SchemaError, "primary-key column 'v' has type double"),
        ({"primary_key": ["tags"]}, SchemaError, "primary-key column 'tags'"),
        ({"options": {"merge-engine": "replace"}}, InvalidOptionError, "merge-engine='replace'"),
        (
            {"options": {"merge-engine": "aggregation", "fields.v.aggregate-function": "avg"}},
            InvalidOptionError,
            "fields.v.aggregate-function='avg'",
        ),
        (
            {"options": {"merge-engine": "aggregation", "fields.s.aggregate-function": "sum"}},
            InvalidOptionError,
            "'sum' does not support column 's' of type string",
        ),
        (
            {"options": {"merge-engine": "aggregation", "fields.tags.aggregate-function": "max"}},
            InvalidOptionError,
            "'max' does not support column 'tags'",
        ),
        (
            {
                "options": {
                    "merge-engine": "aggregation",
                    "fields.default-aggregate-function": "sum",
                }
            },
            InvalidOptionError,
            "fields.default-aggregate-function='sum'.*column 'dt'",
        ),
        (
            {"options": {"merge-engine": "aggregation", "fields.nope.aggregate-function": "sum"}},
            InvalidOptionError,
            "no column 'nope'",
        ),
        (
            {"options": {"merge-engine": "aggregation", "fields.id.aggregate-function": "sum"}},
            InvalidOptionError,
            "key columns are not aggregated",
        ),
        (
            {"options": {"fields.v.aggregate-function": "sum"}},
            InvalidOptionError,
            "need merge-engine=aggregation, not deduplicate",
        ),
        ({"options": {"sequence.field": "nope"}}, InvalidOptionError, "no such column"),
        ({"options": {"sequence.field": "id"}}, InvalidOptionError, "primary-key column"),
        ({"options": {"sequence.field": "v"}}, InvalidOptionError, "no exact order"),
        ({"options": {"changelog-producer": "full"}}, InvalidOptionError, "changelog-producer"),
        ({"options": {"compaction.auto": "maybe"}}, InvalidOptionError, "true or false"),
    ],
)
def test_bad_table_definitions_fail_at_create(
    tmp_path: Path, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        create(tmp_path, **kwargs)
    assert not table_exists(str(tmp_path / "t"))


def test_null_key_is_rejected_and_nothing_committed(tmp_path: Path) -> None:
    tbl = create(tmp_path, options={"write.buffer-size": 1})
    good = pa.table({"id": [1], "dt": ["a"], "v": [1.0], "s": ["x"], "tags": [["t"]]})
    bad = pa.table({"id": [2, None], "dt": ["a", "b"], "v": [1.0, 2.0], "s": ["x", "y"]})
    bad = bad.append_column("tags", pa.array([None, None], pa.list_(pa.string())))
    with pytest.raises(NullConstraintError, match="primary-key column 'id' cannot hold nulls"):
        tbl.write([good, bad])  # the first chunk was flushed to a file already
    assert tbl.latest_snapshot() is None
    assert data_files(tbl) == []


def test_missing_key_column_is_rejected(tmp_path: Path) -> None:
    tbl = create(tmp_path)
    with pytest.raises(SchemaMismatchError, match=r"missing column\(s\) \['id'\]"):
        tbl.write(pa.table({"dt": ["a"], "v": [1.0], "s": ["x"], "tags": [["t"]]}))
    assert tbl.latest_snapshot() is None


@pytest.mark.parametrize(
    ("kinds", "match"),
    [
        (pa.array(["+I", "+X"]), r"row kind '\+X'"),
        (pa.array(["+I", None]), "null row kind"),
        (pa.array([0, 7], pa.int8()), "outside 0..3"),
        (pa.array([0.0, 1.0]), "must hold row kinds"),
    ],
)
def test_bad_row_kinds_are_rejected(tmp_path: Path, kinds: pa.Array, match: str) -> None:
    tbl = create(tmp_path)
    data = pa.table({"id": [1, 2], "dt": ["a", "b"], "v": [1.0, 2.0], "s": ["x", "y"]})
    data = data.append_column("tags", pa.array([None, None], pa.list_(pa.string())))
    with pytest.raises(SchemaMismatchError, match=match):
        tbl.write(data.append_column("_rl_kind", kinds))
    assert tbl.latest_snapshot() is None


def test_delete_and_compact_of_an_append_table_without_files_do_nothing(tmp_path: Path) -> None:
    tbl = raylake.create_table(str(tmp_path / "a"), SCHEMA)
    assert tbl.delete("id = 1") is None  # append tables delete by filter (copy-on-write)
    assert tbl.compact() is None  # append tables compact; this one has no file
    assert tbl.latest_snapshot() is None


def test_delete_keys_need_every_key_column_and_no_nulls(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("a", pa.int64()), pa.field("b", pa.string()), ("v", pa.int64())])
    tbl = raylake.create_table(str(tmp_path / "t"), schema, primary_key=["a", "b"])
    tbl.write(pa.table({"a": [1], "b": ["x"], "v": [1]}))
    with pytest.raises(SchemaMismatchError, match=r"lack primary-key column\(s\) \['b'\]"):
        tbl.delete(pa.table({"a": [1]}))
    with pytest.raises(NullConstraintError, match="'b'"):
        tbl.delete({"a": [1], "b": [None]})
    with pytest.raises(raylake.UnknownColumnError, match="'nope'"):
        tbl.delete("nope = 1")
    assert tbl.latest_snapshot().id == 1  # type: ignore[union-attr]
    assert tbl.to_arrow().num_rows == 1


@pytest.mark.parametrize(
    ("keys", "error", "message"),
    [
        # Key values without their column's name said "cannot write an iterable of int".
        ([1, 2], InvalidArgumentError, r"keys_or_filter must be a filter, or keys in columns"),
        (1, InvalidArgumentError, r"a dict \(\{'id': \[1, 2\]\}\)"),
        # pyarrow's bare OverflowError came out.
        ({"id": [2**64]}, InvalidArgumentError, "keys that fit the key columns"),
        ([{"id": 2**64}], InvalidArgumentError, "keys that fit the key columns"),
        # Only the first chunk was checked: a later one gave pyarrow's KeyError.
        (
            [pa.table({"id": [1]}), pa.table({"x": [2]})],
            SchemaMismatchError,
            r"lack primary-key column\(s\) \['id'\]",
        ),
    ],
    ids=[
        "list-of-values",
        "one-value",
        "dict-int-beyond-64-bits",
        "row-int-beyond-64-bits",
        "later-chunk-without-key",
    ],
)
def test_delete_keys_of_a_form_it_does_not_take_are_refused_naming_them(
    tmp_path: Path, keys: Any, error: type[Exception], message: str
) -> None:
    tbl = create(tmp_path)
    tbl.write(
        pa.table(
            {"id": [1, 2], "dt": ["a"] * 2, "v": [1.0] * 2, "s": ["x"] * 2, "tags": [["t"]] * 2}
        )
    )
    with pytest.raises(error, match=message):
        tbl.delete(keys)
    assert tbl.latest_snapshot().id == 1  # type: ignore[union-attr]
    assert tbl.count() == 2


def test_changelog_needs_a_producer(tmp_path: Path) -> None:
    tbl = create(tmp_path)
    tbl.write(pa.table({"id": [1], "dt": ["a"], "v": [1.0], "s": ["x"], "tags": [["t"]]}))
    with pytest.raises(UnsupportedOperationError, match="changelog-producer=none"):
        tbl.changelog(1)


def test_append_mode_is_rejected_for_primary_key_tables(tmp_path: Path) -> None:
    tbl = create(tmp_path)
    with pytest.raises(UnsupportedOperationError, match="mode 'append'"):
        tbl.write(pa.table({"id": [1]}), mode="append")
