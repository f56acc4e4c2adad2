"""Bad input: each gets a specific RaylakeError naming the problem, and nothing is committed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

import raylake
from raylake import col
from raylake.errors import (
    CorruptMetadataError,
    FilterError,
    FilterParseError,
    NullConstraintError,
    RaylakeError,
    SchemaError,
    SchemaMismatchError,
    SnapshotNotFoundError,
    TableNotFoundError,
    UnknownColumnError,
    UnsupportedOperationError,
    UnsupportedTypeError,
)
from raylake.table import Table

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("dt", pa.string()),
        ("n", pa.int32()),
        ("x", pa.float64()),
    ]
)


def rows(start: int, count: int, dt: str = "2024-01-01") -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table(
        {"id": ids, "dt": [dt] * count, "n": ids, "x": [i / 4 for i in ids]}, schema=SCHEMA
    )


@pytest.fixture
def tbl(tmp_path: Path) -> Table:
    t = raylake.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["dt"])
    t.write(rows(0, 5))
    t.write(rows(5, 5, dt="2024-01-02"))
    return t


def data_files_on_disk(t: Table) -> set[str]:
    return {rel for rel, _ in t.file_io.list_files("data") if rel.endswith(".parquet")}


def live_data_files(t: Table) -> set[str]:
    return {p for split in t.scan().plan() for p in split.paths}


def assert_nothing_committed(
    t: Table, action: Callable[[], Any], error: type[Exception]
) -> Exception:
    """Run ``action``, expect ``error``; the table must be exactly as before, with no new files."""
    snapshots = [s.id for s in t.snapshots()]
    before = t.to_arrow().sort_by("id")
    with pytest.raises(error) as info:
        action()
    assert isinstance(info.value, RaylakeError)
    assert [s.id for s in t.snapshots()] == snapshots
    assert t.to_arrow().sort_by("id").equals(before)
    assert data_files_on_disk(t) == live_data_files(t)
    return info.value


# -- schema mismatch on write -------------------------------------------------------------


def test_missing_column(tbl: Table) -> None:
    err = assert_nothing_committed(
        tbl, lambda: tbl.write(rows(20, 3).drop_columns(["x"])), SchemaMismatchError
    )
    assert "missing column(s) ['x']" in str(err)
    assert err.column == "x"  # type: ignore[attr-defined]


def test_extra_column(tbl: Table) -> None:
    data = rows(20, 3).append_column("extra", pa.array([1, 2, 3]))
    err = assert_nothing_committed(tbl, lambda: tbl.write(data), SchemaMismatchError)
    assert "['extra']" in str(err)


@pytest.mark.parametrize(
    ("column", "values", "message"),
    [
        ("n", pa.array(["1", "2", "3"]), "column 'n' has type string, but the table stores int32"),
        # pandas' int column with a missing value: the way out is named
        (
            "n",
            pa.array([1.0, None, 3.0]),
            "column 'n' has type double, but the table stores int32 "
            "(floats are not truncated into integers; pandas makes an integer column with a "
            "missing value float64: give it the dtype 'Int64'",
        ),
        ("x", pa.array(["a", "b", "c"]), "column 'x' has type string"),
        ("dt", pa.array([1, 2, 3]), "column 'dt' has type int64"),
        ("n", pa.array([1, 2, 2**40]), "does not fit int32 without loss"),
        ("x", pa.array([1, 2, 2**60 + 1]), "does not fit double without loss"),
    ],
)
def test_wrong_type(tbl: Table, column: str, values: pa.Array, message: str) -> None:
    data = rows(20, 3)
    data = data.set_column(data.schema.get_field_index(column), column, values)
    err = assert_nothing_committed(tbl, lambda: tbl.write(data), SchemaMismatchError)
    assert message in str(err)
    assert err.column == column  # type: ignore[attr-defined]


def test_safe_casts_are_allowed(tbl: Table) -> None:
    narrow = pa.schema(
        [
            pa.field("id", pa.int32(), nullable=False),
            ("dt", pa.large_string()),
            ("n", pa.int8()),
            ("x", pa.float32()),
        ]
    )
    data = rows(20, 3).cast(narrow)
    tbl.write(data)
    assert tbl.count() == 13
    assert tbl.to_arrow(filter="id >= 20").schema == SCHEMA


def test_a_float_beyond_a_narrower_float_column_is_refused(tmp_path: Path) -> None:
    """pandas' float64 into a float32 column rounds, as the column's type means, but a
    finite value beyond float32's range would be stored as infinity: refused."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("x", pa.float32())])
    t = raylake.create_table(str(tmp_path / "f32"), schema)
    t.write(pd.DataFrame({"id": [0, 1, 2, 3], "x": [0.1, float("inf"), float("nan"), None]}))
    got = t.to_arrow().column("x").to_pylist()
    assert got[0] == pytest.approx(0.1) and got[1] == float("inf") and got[3] is None
    data = pd.DataFrame({"id": [4, 5], "x": [1.0, 1e300]})
    err = assert_nothing_committed(t, lambda: t.write(data), SchemaMismatchError)
    assert "column 'x' of type double does not fit float" in str(err)
    assert "1 value(s) beyond its range" in str(err)
    half = pa.schema([pa.field("id", pa.int64(), nullable=False), ("x", pa.float16())])
    h = raylake.create_table(str(tmp_path / "f16"), half)
    h.write(pa.table({"id": [0], "x": pa.array([1.5], pa.float32())}))
    err = assert_nothing_committed(
        h, lambda: h.write(pa.table({"id": [1], "x": [70000.0]})), SchemaMismatchError
    )
    assert "does not fit halffloat" in str(err)


def test_struct_fields_follow_the_rules_of_columns(tmp_path: Path) -> None:
    """A string field is not parsed into an int field, a float field not truncated into
    one (as for columns); fields in another order are matched by name."""
    struct = pa.struct([("a", pa.int64()), ("b", pa.string())])
    tbl = raylake.create_table(str(tmp_path / "t"), pa.schema([("s", struct)]))
    for a in (["12"], [2.0]):
        given = pa.table(
            {"s": pa.StructArray.from_arrays([pa.array(a), pa.array(["x"])], ["a", "b"])}
        )
        with pytest.raises(SchemaMismatchError, match="column 's' has type struct"):
            tbl.write(given)
    reordered = pa.StructArray.from_arrays([pa.array(["x"]), pa.array([1])], ["b", "a"])
    try:
        tbl.write(pa.table({"s": reordered}))
    except SchemaMismatchError as exc:  # pyarrow before 17 casts fields only in order
        assert exc.column == "s"
    else:
        assert tbl.to_arrow().to_pylist() == [{"s": {"a": 1, "b": "x"}}]


def test_pandas_int64_into_int32(tbl: Table) -> None:
    fits = pd.DataFrame({"id": [30, 31], "dt": ["d", "d"], "n": [1, -(2**31)], "x": [0.5, 1.5]})
    assert fits["n"].dtype == "int64"
    tbl.write(fits)
    assert tbl.to_arrow(filter="dt = 'd'").column("n").to_pylist() == [1, -(2**31)]
    overflow = fits.assign(n=[1, 2**31])
    err = assert_nothing_committed(tbl, lambda: tbl.write(overflow), SchemaMismatchError)
    assert "'n'" in str(err) and "int32" in str(err)


@pytest.mark.parametrize(
    ("n", "message"),
    [([1.0, 2.5], "column 'n' has type double"), (["1", "2"], "column 'n' has type string")],
)
def test_pandas_float_or_string_into_int(tbl: Table, n: list, message: str) -> None:
    df = pd.DataFrame({"id": [30, 31], "dt": ["d", "d"], "n": n, "x": [0.5, 1.5]})
    err = assert_nothing_committed(tbl, lambda: tbl.write(df), SchemaMismatchError)
    assert message in str(err)


def test_timezone_mismatch(tmp_path: Path) -> None:
    t = raylake.create_table(str(tmp_path), pa.schema([("t", pa.timestamp("us", tz="UTC"))]))
    naive = pa.table({"t": pa.array([0], pa.timestamp("us"))})
    with pytest.raises(SchemaMismatchError, match="timestamp"):
        t.write(naive)
    t.write(pa.table({"t": pa.array([0], pa.timestamp("s", tz="UTC"))}))  # units may differ
    assert t.count() == 1


def test_nulls_in_a_non_nullable_column(tbl: Table) -> None:
    data = rows(20, 3).cast(SCHEMA.set(0, pa.field("id", pa.int64())))
    data = data.set_column(0, "id", pa.array([1, None, None], pa.int64()))
    err = assert_nothing_committed(tbl, lambda: tbl.write(data), NullConstraintError)
    assert "'id' is not nullable" in str(err) and "2 null value(s)" in str(err)


def test_a_bad_batch_late_in_a_stream_commits_nothing(tbl: Table) -> None:
    good = rows(20, 3).to_batches()[0]
    bad = rows(30, 3).drop_columns(["n"]).to_batches()[0]
    assert_nothing_committed(tbl, lambda: tbl.write([good, good, bad]), SchemaMismatchError)


@pytest.mark.parametrize("data", [[1, 2], {"id": [1]}, "text", 42])
def test_unsupported_input_objects(tbl: Table, data: object) -> None:
    err = assert_nothing_committed(tbl, lambda: tbl.write(data), SchemaMismatchError)
    assert "cannot write" in str(err)


def test_unsupported_write_modes(tbl: Table) -> None:
    assert_nothing_committed(
        tbl, lambda: tbl.write(rows(20, 1), mode="upsert"), UnsupportedOperationError
    )
    err = assert_nothing_committed(
        tbl, lambda: tbl.write(rows(20, 1), overwrite_filter="dt = 'x'"), UnsupportedOperationError
    )
    assert "overwrite_filter applies only to mode='overwrite'" in str(err)


# -- bad reads -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("filter", "error", "message"),
    [
        ("nope = 1", UnknownColumnError, "unknown column 'nope'"),
        ("id >", FilterParseError, "position 4"),
        ("id = = 1", FilterParseError, "position"),
        ("(id = 1", FilterParseError, "position"),
        ("id = 'abc'", FilterError, "cannot compare column 'id' of type int64 with 'abc'"),
        (col("n") > "x", FilterError, "column 'n'"),
        (42, FilterError, "got int"),
    ],
)
def test_bad_filters(tbl: Table, filter: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message) as info:
        tbl.to_arrow(filter=filter)
    assert isinstance(info.value, RaylakeError)


def test_unknown_projection(tbl: Table) -> None:
    with pytest.raises(UnknownColumnError, match="unknown column 'nope'") as info:
        tbl.to_arrow(columns=["id", "nope"])
    assert info.value.column == "nope" and "id" in info.value.available


def test_missing_snapshot(tbl: Table) -> None:
    with pytest.raises(SnapshotNotFoundError, match=r"snapshot 7 does not exist .* 1\.\.2") as info:
        tbl.to_arrow(snapshot_id=7)
    assert info.value.snapshot_id == 7
    empty = raylake.create_table(str(Path(tbl.uri).parent / "empty"), SCHEMA)
    with pytest.raises(SnapshotNotFoundError, match="no snapshots"):
        empty.snapshot(1)


def test_uri_with_no_table(tmp_path: Path) -> None:
    with pytest.raises(TableNotFoundError, match="no raylake table"):
        raylake.open_table(str(tmp_path / "missing"))


# -- corrupted metadata --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe\x00", "not valid JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"id": 2}', "not a valid snapshot"),
        (b"", "not valid JSON"),
    ],
)
def test_corrupted_snapshot_file(tbl: Table, content: bytes, reason: str) -> None:
    path = Path(tbl.uri) / "snapshot" / "snapshot-2.json"
    path.write_bytes(content)
    for read in (tbl.to_arrow, lambda: tbl.to_arrow(snapshot_id=2), tbl.latest_snapshot):
        with pytest.raises(CorruptMetadataError, match=reason) as info:
            read()
        assert info.value.path.endswith("snapshot-2.json")
    # A write refuses to build on a snapshot it cannot read, and leaves no files behind.
    with pytest.raises(CorruptMetadataError):
        tbl.write(rows(50, 2))
    assert data_files_on_disk(tbl) == _data_files_of_snapshot_1(tbl)
    assert tbl.count(snapshot_id=1) == 5  # older snapshots still read


def _data_files_of_snapshot_1(t: Table) -> set[str]:
    return {p for split in t.scan(snapshot_id=1).plan() for p in split.paths} | {
        p for p in data_files_on_disk(t) if "2024-01-02" in p
    }


def test_snapshot_file_with_a_wrong_id(tbl: Table) -> None:
    path = Path(tbl.uri) / "snapshot" / "snapshot-2.json"
    data = json.loads(path.read_text())
    data["id"] = 1
    path.write_text(json.dumps(data))
    with pytest.raises(CorruptMetadataError, match="holds snapshot id 1"):
        tbl.latest_snapshot()


def test_snapshot_with_an_unknown_commit_kind(tbl: Table) -> None:
    path = Path(tbl.uri) / "snapshot" / "snapshot-2.json"
    path.write_text(path.read_text().replace('"APPEND"', '"MERGE"'))
    with pytest.raises(CorruptMetadataError, match="unknown commit kind 'MERGE'"):
        tbl.snapshot(2)


def _delta_manifest(t: Table, snapshot_id: int) -> Path:
    return Path(t.uri) / t.snapshot(snapshot_id).delta_manifests[0].path


@pytest.mark.parametrize("damage", ["garbage", "truncate", "delete"])
def test_corrupted_manifest_file(tmp_path: Path, damage: str) -> None:
    # A fresh table: manifests are cached per process once read, so damage them unread.
    t = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    t.write(rows(0, 5))
    path = _delta_manifest(t, 1)
    if damage == "garbage":
        path.write_bytes(b"this is not parquet" * 10)
    elif damage == "truncate":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    else:
        path.unlink()
    with pytest.raises(CorruptMetadataError) as info:
        t.to_arrow()
    assert info.value.path.endswith(path.name)
    assert ("missing" if damage == "delete" else "not a readable manifest") in str(info.value)


def test_corrupted_schema_file(tbl: Table) -> None:
    path = Path(tbl.uri) / "schema" / "schema-0.json"
    path.write_text('{"format_version": 1, "fields": []}')
    with pytest.raises(CorruptMetadataError, match=r"schema-0\.json"):
        raylake.open_table(tbl.uri)
    path.write_text("{")
    with pytest.raises(CorruptMetadataError, match="not valid JSON"):
        raylake.open_table(tbl.uri)


def test_schema_from_a_newer_format_version(tbl: Table) -> None:
    path = Path(tbl.uri) / "schema" / "schema-0.json"
    data = json.loads(path.read_text())
    data["format_version"] = 99
    path.write_text(json.dumps(data))
    with pytest.raises(CorruptMetadataError, match="format version 99 is newer"):
        raylake.open_table(tbl.uri)


@pytest.mark.parametrize("hint", [b"garbage", b"1", b"99", b""])
def test_latest_hint_is_only_a_hint(tbl: Table, hint: bytes) -> None:
    (Path(tbl.uri) / "snapshot" / "LATEST").write_bytes(hint)
    assert tbl.latest_snapshot().id == 2  # type: ignore[union-attr]
    assert tbl.count() == 10
    assert tbl.write(rows(50, 1)).id == 3


def test_bad_table_definitions(tmp_path: Path) -> None:
    uri = str(tmp_path)
    cases: list[tuple[Callable[[], Any], str]] = [
        (lambda: raylake.create_table(uri, SCHEMA, partition_by=["nope"]), "not in the schema"),
        (lambda: raylake.create_table(uri, SCHEMA, partition_by="dt"), "list of column names"),
        (lambda: raylake.create_table(uri, SCHEMA, partition_by=["x"]), "cannot partition"),
        (lambda: raylake.create_table(uri, SCHEMA, partition_by=["dt", "dt"]), "repeat"),
        (lambda: raylake.create_table(uri, pa.schema([])), "at least one column"),
        (lambda: raylake.create_table(uri, pa.schema([("_rl_seq", pa.int8())])), "reserved"),
        (lambda: raylake.create_table(uri, {"a": pa.int8()}), "pyarrow.Schema"),  # type: ignore[arg-type]
    ]
    for action, message in cases:
        with pytest.raises(SchemaError, match=message):
            action()
    assert not (tmp_path / "schema").exists()


@pytest.mark.parametrize("schema_mode", [None, "merge"])
def test_a_column_with_the_reserved_prefix_is_refused_saying_so(
    tmp_path: Path, schema_mode: str | None
) -> None:
    """Only "the table does not have" it was said, even where schema_mode="merge" adds
    every other new column."""
    tbl = raylake.create_table(str(tmp_path / "t"), pa.schema([("a", pa.int64())]))
    data = pa.table({"a": [1], "_rl_x": [2]})
    with pytest.raises(SchemaMismatchError, match=r"reserved .* rename \['_rl_x'\]"):
        tbl.write(data, **({} if schema_mode is None else {"schema_mode": schema_mode}))
    assert tbl.latest_snapshot() is None


def test_a_decimal_beyond_its_precision_is_refused_naming_the_column(tmp_path: Path) -> None:
    """A 16-byte decimal holds 39 digits, decimal128(38, 0) allows 38 (DuckDB's HUGEINT
    maximum arrives so)."""
    raw = (10**38 + 5).to_bytes(16, "little", signed=True)
    values = pa.Array.from_buffers(pa.decimal128(38, 0), 1, [None, pa.py_buffer(raw)])
    tbl = raylake.create_table(str(tmp_path / "t"), pa.schema([("d", pa.decimal128(38, 0))]))
    with pytest.raises(SchemaMismatchError, match="column 'd' holds a value beyond its type"):
        tbl.write(pa.table({"d": values}))
    assert tbl.latest_snapshot() is None


def test_a_null_fixed_size_list_before_pyarrow_17_is_refused_naming_the_column(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyarrow 16's Parquet writer raised its bare 'Lists with non-zero length null
    components' for a null fixed-size list, as a column or a struct's field, and wrote
    one inside a list that no read could open: before 17 such a write is refused
    naming the column."""
    from raylake.table import conform

    monkeypatch.setattr(conform, "NULL_FIXED_LISTS_WRITE", False)  # as on pyarrow 16
    vec = pa.list_(pa.float32(), 2)
    columns = {
        "v": pa.array([[1.0, 2.0], None], vec),
        "s": pa.array([{"f": [1.0, 2.0]}, {"f": None}], pa.struct([("f", vec)])),
        "l": pa.ListArray.from_arrays(
            pa.array([0, 1, 2], pa.int32()), pa.array([[3, 4], None], vec)
        ),
    }
    for name, values in columns.items():
        tbl = raylake.create_table(str(tmp_path / name), pa.schema([(name, values.type)]))
        with pytest.raises(UnsupportedTypeError, match=f"column '{name}' has type .* null row"):
            tbl.write(pa.table({name: values}))
        assert tbl.latest_snapshot() is None
        tbl.write(pa.table({name: values.slice(0, 1)}))  # the row without a null: written
        assert tbl.to_arrow().column(name).to_pylist() == values.slice(0, 1).to_pylist()


def test_a_decimal_of_scale_0_goes_into_an_integer_column_where_it_fits(tmp_path: Path) -> None:
    """Spark reads uint64 as decimal(20, 0) and writes it back so: it was refused as
    another kind. A value that does not fit, or a decimal with a fraction, is refused
    naming the column."""
    from decimal import Decimal

    schema = pa.schema([("u", pa.uint64()), ("i", pa.int32())])
    tbl = raylake.create_table(str(tmp_path / "t"), schema)
    wide = pa.decimal128(20, 0)
    tbl.write(
        pa.table({"u": pa.array([Decimal(2**64 - 1)], wide), "i": pa.array([Decimal(7)], wide)})
    )
    assert tbl.to_arrow().to_pylist() == [{"u": 2**64 - 1, "i": 7}]
    negative = pa.table({"u": pa.array([Decimal(-1)], wide), "i": pa.array([None], wide)})
    with pytest.raises(SchemaMismatchError, match="column 'u' of type decimal128"):
        tbl.write(negative)
    fraction = pa.table({"u": pa.array([1], pa.uint64()), "i": pa.array([Decimal("7.0")])})
    with pytest.raises(SchemaMismatchError, match="column 'i' has type decimal128"):
        tbl.write(fraction)
    assert len(tbl.snapshots()) == 1
