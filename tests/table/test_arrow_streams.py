"""Scans as Arrow streams: RecordBatchReader, the PyCapsule interface, DuckDB and polars."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import raylake
from raylake.table import Table

SCHEMA = pa.schema([("id", pa.int64()), ("dt", pa.string()), ("x", pa.float64())])


def rows(start: int, count: int, dt: str) -> pa.Table:
    ids = np.arange(start, start + count, dtype=np.int64)
    return pa.table({"id": ids, "dt": [dt] * count, "x": ids / 10.0}, schema=SCHEMA)


@pytest.fixture
def days(tmp_path: Path) -> Table:
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["dt"])
    for i, day in enumerate(["2024-01-01", "2024-01-02", "2024-01-03"]):
        tbl.write(rows(i * 1000, 1000, day))
    return tbl


@pytest.fixture
def users(tmp_path: Path) -> Table:
    schema = pa.schema([("k", pa.int64()), ("v", pa.string())])
    tbl = raylake.create_table(str(tmp_path / "pk"), schema, primary_key=["k"], buckets=2)
    tbl.write(pa.table({"k": [1, 2, 3], "v": ["a", "b", "c"]}, schema=schema))
    tbl.write(pa.table({"k": [2], "v": ["B"]}, schema=schema))
    return tbl


def test_arrow_reader_streams_the_scan(days: Table) -> None:
    reader = days.to_arrow_reader(columns=["id", "x"], filter="id >= 1500")
    assert isinstance(reader, pa.RecordBatchReader)
    assert reader.schema == pa.schema([("id", pa.int64()), ("x", pa.float64())])
    got = reader.read_all().sort_by("id")
    assert got.equals(days.to_arrow(columns=["id", "x"], filter="id >= 1500").sort_by("id"))
    assert got.num_rows == 1500


def test_a_scan_is_an_arrow_stream_read_more_than_once(days: Table) -> None:
    scan = days.scan(filter="dt = '2024-01-02'")
    first = pa.table(scan)  # pyarrow reads objects with __arrow_c_stream__
    second = pa.table(scan)
    assert first.num_rows == second.num_rows == 1000
    assert sorted(first["id"].to_pylist()) == list(range(1000, 2000))


def test_the_reader_plans_on_first_batch(days: Table) -> None:
    reader = days.scan().to_arrow_reader()
    days.write(rows(5000, 10, "2024-01-04"))  # after the reader, before its first batch
    assert reader.read_all().num_rows == 3010  # the plan is made when reading starts


def test_primary_key_scan_stream_is_merged(users: Table) -> None:
    got = pa.table(users.scan()).sort_by("k")
    assert got.to_pydict() == {"k": [1, 2, 3], "v": ["a", "B", "c"]}


def test_duckdb_queries_a_scan_and_a_registered_table(days: Table) -> None:
    duckdb = pytest.importorskip("duckdb")
    scan = days.scan(columns=["id", "dt"])  # noqa: F841  (DuckDB finds it by name)
    assert duckdb.sql("select count(*), max(id) from scan").fetchall() == [(3000, 2999)]
    con = days.to_duckdb("days", filter="id < 2000")
    days.write(rows(9000, 5, "2024-01-09"))  # the view is pinned to its snapshot
    query = "select dt, count(*) from days group by dt order by dt"
    expected = [("2024-01-01", 1000), ("2024-01-02", 1000)]
    assert con.sql(query).fetchall() == expected
    assert con.sql(query).fetchall() == expected  # a second query streams again
    con.close()


def test_duckdb_uses_a_given_connection(users: Table) -> None:
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    assert users.to_duckdb("users", con) is con
    assert con.sql("select v from users order by k").fetchall() == [("a",), ("B",), ("c",)]
    con.close()


def test_duckdb_view_name_must_be_given(users: Table) -> None:
    pytest.importorskip("duckdb")
    with pytest.raises(raylake.InvalidArgumentError, match="name"):
        users.to_duckdb("")


def test_polars_frame(days: Table, users: Table) -> None:
    pl = pytest.importorskip("polars")
    frame = days.to_polars(columns=["id", "x"], filter="id < 10")
    assert isinstance(frame, pl.DataFrame)
    assert frame.columns == ["id", "x"]
    assert sorted(frame["id"].to_list()) == list(range(10))
    assert pl.DataFrame(users.scan()).sort("k")["v"].to_list() == ["a", "B", "c"]


def test_where_combines_with_the_existing_filter(days: Table) -> None:
    scan = days.scan(filter="id >= 500").where("id < 1500").where("dt = '2024-01-02'")
    assert sorted(scan.to_arrow()["id"].to_pylist()) == list(range(1000, 1500))


def test_a_scan_reads_its_snapshot_once(days: Table) -> None:
    scan = days.scan()
    first = scan.snapshot()
    days.write(rows(7000, 3, "2024-01-05"))
    assert scan.snapshot() is first  # resolved once: one scan reads one snapshot
    assert scan.select(["id"]).to_arrow().num_rows == 3000
    assert days.scan().count() == 3003
    pinned = days.scan().pin()
    days.write(rows(8000, 3, "2024-01-06"))
    assert pinned.count() == 3003
    assert pinned.at(None).count() == 3006  # a new `at` resolves anew


# -- writes of Arrow streams: anything with __arrow_c_stream__ ------------------------------


class _Exporter:
    """A library's own object that exports an Arrow stream and is nothing else."""

    def __init__(self, data: pa.Table) -> None:
        self.data = data

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        return self.data.__arrow_c_stream__(requested_schema)


def test_write_takes_any_arrow_stream(tmp_path: Path) -> None:
    tbl = raylake.create_table(str(tmp_path), SCHEMA)
    tbl.write(_Exporter(rows(0, 3, "a")))
    tbl.write([_Exporter(rows(3, 2, "b"))])
    assert tbl.count() == 5


def test_string_views_are_cast_like_large_strings(tmp_path: Path) -> None:
    schema = pa.schema([("s", pa.string()), ("ls", pa.large_string())])
    tbl = raylake.create_table(str(tmp_path), schema)
    views = pa.array(["a", None, "c"], pa.string_view())
    tbl.write(pa.table({"s": views, "ls": views}))
    assert tbl.to_arrow().to_pydict() == {"s": ["a", None, "c"], "ls": ["a", None, "c"]}


def test_dictionaries_of_views_and_binary_views_are_written(tmp_path: Path) -> None:
    """polars' Categorical and Enum are dictionaries of string_view, its Binary is
    binary_view: written into string and binary columns like their plain forms."""
    schema = pa.schema([("c", pa.string()), ("b", pa.binary()), ("lb", pa.large_binary())])
    tbl = raylake.create_table(str(tmp_path), schema)
    codes = pa.array([0, 1, None], pa.uint32())
    categories = pa.DictionaryArray.from_arrays(codes, pa.array(["x", "y"], pa.string_view()))
    binaries = pa.array([b"a", None, b""], pa.binary_view())
    tbl.write(pa.table({"c": categories, "b": binaries, "lb": binaries}))
    assert tbl.to_arrow().to_pydict() == {
        "c": ["x", "y", None],
        "b": [b"a", None, b""],
        "lb": [b"a", None, b""],
    }


def test_polars_categoricals_and_binaries_are_written(tmp_path: Path) -> None:
    pl = pytest.importorskip("polars")
    schema = pa.schema([("id", pa.int64()), ("c", pa.string()), ("b", pa.binary())])
    tbl = raylake.create_table(str(tmp_path), schema, primary_key=["id"])
    tbl.write(
        pl.DataFrame(
            {
                "id": [1, 2],
                "c": pl.Series(["x", None], dtype=pl.Categorical),
                "b": [b"1", None],
            }
        )
    )
    tbl.write(pl.DataFrame({"id": [3], "c": pl.Series(["y"], dtype=pl.Enum(["y"])), "b": [b""]}))
    assert tbl.to_arrow().sort_by("id").to_pydict() == {
        "id": [1, 2, 3],
        "c": ["x", None, "y"],
        "b": [b"1", None, b""],
    }


def test_polars_and_duckdb_frames_are_written(tmp_path: Path) -> None:
    pl = pytest.importorskip("polars")
    duckdb = pytest.importorskip("duckdb")
    tbl = raylake.create_table(str(tmp_path), SCHEMA)
    tbl.write(pl.DataFrame({"id": [1, 2], "dt": ["a", "b"], "x": [0.1, 0.2]}))
    tbl.write(duckdb.sql("select 3::BIGINT as id, 'c' as dt, 0.3::DOUBLE as x"))
    assert sorted(tbl.to_arrow().column("dt").to_pylist()) == ["a", "b", "c"]


def test_a_stream_of_arrays_is_refused_with_nothing_written(tmp_path: Path) -> None:
    tbl = raylake.create_table(str(tmp_path), SCHEMA)
    with pytest.raises(raylake.SchemaMismatchError, match="not a stream of record batches"):
        tbl.write(pa.chunked_array([[1, 2]]))
    assert tbl.latest_snapshot() is None


def test_merge_mode_write_of_views_adds_plain_columns(tmp_path: Path) -> None:
    """A stream of views (polars' strings, lists of strings and Categoricals) brings its
    new columns as string and binary, the types its views are written into."""
    tbl = raylake.create_table(str(tmp_path), pa.schema([("id", pa.int64())]))
    categories = pa.DictionaryArray.from_arrays(
        pa.array([0], pa.uint32()), pa.array(["x"], pa.string_view())
    )
    data = pa.table(
        {
            "id": [1],
            "s": pa.array(["a"], pa.string_view()),
            "b": pa.array([b"z"], pa.binary_view()),
            "l": pa.array([["p", None]], pa.large_list(pa.string_view())),
            "c": categories,
        }
    )
    tbl.write(_Exporter(data), schema_mode="merge")
    assert raylake.open_table(str(tmp_path)).schema == pa.schema(
        [
            ("id", pa.int64()),
            ("s", pa.string()),
            ("b", pa.binary()),
            ("l", pa.large_list(pa.string())),
            ("c", pa.string()),
        ]
    )
    assert tbl.to_arrow().to_pylist() == [
        {"id": 1, "s": "a", "b": b"z", "l": ["p", None], "c": "x"}
    ]


def test_dictionaries_in_lists_and_structs_are_written_as_their_values(tmp_path: Path) -> None:
    """As a dictionary column is (polars' List(Categorical) is a list of dictionaries of
    string_view): they were refused, even by the table made from their own schema."""
    values = pa.array(["x", "y", "x"]).dictionary_encode()
    data = pa.table(
        {
            "l": pa.ListArray.from_arrays(pa.array([0, 2, 2, 3], pa.int32()), values),
            "s": pa.StructArray.from_arrays([values], names=["f"]),
        }
    )
    tbl = raylake.create_table(str(tmp_path / "own"), data.schema)
    assert tbl.schema == pa.schema(
        [("l", pa.list_(pa.string())), ("s", pa.struct([("f", pa.string())]))]
    )
    tbl.write(data)
    assert tbl.to_arrow().to_pydict() == {
        "l": [["x", "y"], [], ["x"]],
        "s": [{"f": "x"}, {"f": "y"}, {"f": "x"}],
    }
    views = pa.DictionaryArray.from_arrays(
        pa.array([0, 1, None], pa.uint32()), pa.array(["p", "q"], pa.string_view())
    )
    listed = pa.LargeListArray.from_arrays(pa.array([0, 2, 3]), views)
    plain = raylake.create_table(str(tmp_path / "plain"), pa.schema([("l", pa.list_(pa.string()))]))
    plain.write(pa.table({"l": listed}))
    plain.write(pa.table({"l": listed}), schema_mode="merge")
    assert plain.to_arrow().column("l").to_pylist() == [["p", "q"], [None]] * 2
    with pytest.raises(raylake.SchemaMismatchError, match="'l'"):
        raylake.create_table(
            str(tmp_path / "ints"), pa.schema([("l", pa.list_(pa.int64()))])
        ).write(pa.table({"l": listed}))


def test_to_polars_reads_decimal256_that_fits_and_refuses_what_does_not(tmp_path: Path) -> None:
    """polars' decimals are 128-bit: it panics on decimal256 (a Rust PanicException)."""
    pl = pytest.importorskip("polars")
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("d", pa.decimal256(20, 2)),
            ("s", pa.struct([("d", pa.decimal256(20, 2))])),
            ("wide", pa.decimal256(50, 2)),
        ]
    )
    tbl = raylake.create_table(str(tmp_path), schema)
    d, wide = Decimal("123456789012345678.25"), Decimal("1" * 48 + ".25")
    tbl.write(pa.table({"id": [1], "d": [d], "s": [{"d": d}], "wide": [wide]}, schema=schema))
    frame = tbl.to_polars(columns=["id", "d", "s"])
    assert isinstance(frame, pl.DataFrame)
    assert frame.to_dicts() == [{"id": 1, "d": d, "s": {"d": d}}]
    with pytest.raises(raylake.errors.UnsupportedTypeError, match=r"'wide'.*columns="):
        tbl.to_polars()


def test_to_polars_reads_a_timestamp_of_a_zone_polars_lacks_in_utc(tmp_path: Path) -> None:
    """polars refuses an offset of other than whole hours (India's +05:30) as a zone:
    every to_polars of such a table failed with polars' ComputeError."""
    pl = pytest.importorskip("polars")
    schema = pa.schema(
        [
            ("t", pa.timestamp("us", "+05:30")),
            ("l", pa.list_(pa.timestamp("ms", "+05:45"))),
            ("p", pa.timestamp("us", "Europe/Paris")),
        ]
    )
    tbl = raylake.create_table(str(tmp_path), schema)
    tbl.write(pa.table({"t": [1_000_000, None], "l": [[5], None], "p": [7, None]}, schema=schema))
    frame = tbl.to_polars()
    assert frame.schema["t"] == pl.Datetime("us", "UTC")
    assert frame.schema["l"] == pl.List(pl.Datetime("ms", "UTC"))
    assert frame.schema["p"] == pl.Datetime("us", "Europe/Paris")  # a zone polars knows
    back = frame.to_arrow()
    assert back.column("t").cast(pa.int64()).to_pylist() == [1_000_000, None]
    assert back.column("l").to_pylist()[1] is None
    assert back.column("p").cast(pa.int64()).to_pylist() == [7, None]


def test_to_duckdb_reads_float16_and_decimal256_that_fits(tmp_path: Path) -> None:
    """DuckDB reads neither float16 nor decimal256: each query of the view failed."""
    pytest.importorskip("duckdb")
    schema = pa.schema(
        [
            ("h", pa.float16()),
            ("l", pa.list_(pa.float16())),
            ("d", pa.decimal256(20, 2)),
            ("wide", pa.decimal256(50, 2)),
        ]
    )
    tbl = raylake.create_table(str(tmp_path), schema)
    half = np.array([1.5], np.float16)
    d = Decimal("123456789012345678.25")
    tbl.write(
        pa.table(
            {"h": half, "l": [half], "d": [d], "wide": [Decimal("1" * 48 + ".25")]}, schema=schema
        )
    )
    con = tbl.to_duckdb("v", columns=["h", "l", "d"])
    tbl.write(tbl.to_arrow())  # not in the view, pinned at registration
    for _ in range(2):
        assert con.sql("select * from v").fetchall() == [(1.5, [1.5], d)]
    with pytest.raises(raylake.errors.UnsupportedTypeError, match="'wide'"):
        tbl.to_duckdb("w")
