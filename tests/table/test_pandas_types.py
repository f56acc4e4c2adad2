"""One mapping from pandas to the table's types, whatever the installed pandas (2 or 3),
and reads back in the installed pandas' defaults (docs/pandas.md)."""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import raylake
from raylake.errors import (
    InvalidArgumentError,
    NullConstraintError,
    SchemaError,
    UnknownKeywordError,
)

STRING_DTYPES = [object, "string", "string[pyarrow]", pd.StringDtype("python")]
if hasattr(pd, "ArrowDtype"):
    STRING_DTYPES.append(pd.ArrowDtype(pa.large_string()))


@pytest.mark.parametrize("dtype", [object, "string", "string[pyarrow]", "str"])
def test_every_pandas_string_dtype_makes_a_string_column(tmp_path: Path, dtype: object) -> None:
    df = pd.DataFrame({"s": pd.Series(["a", None, "c"], dtype=dtype)})
    tbl = raylake.from_pandas(df, str(tmp_path))
    assert tbl.schema == pa.schema([("s", pa.string())])
    assert tbl.to_arrow().column("s").to_pylist() == ["a", None, "c"]


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_times_of_every_unit_are_stored_in_nanoseconds(tmp_path: Path, unit: str) -> None:
    """pandas 3 parses dates to microseconds, pandas 2 to nanoseconds: the table is the same."""
    times = pd.to_datetime(["2024-01-01 10:00", "2024-01-02 00:00"]).astype(f"datetime64[{unit}]")
    df = pd.DataFrame({"t": times, "tz": times.tz_localize("UTC"), "d": times - times[0]})
    tbl = raylake.from_pandas(df, str(tmp_path))
    assert tbl.schema == pa.schema(
        [("t", pa.timestamp("ns")), ("tz", pa.timestamp("ns", "UTC")), ("d", pa.duration("ns"))]
    )
    nanos = pd.DataFrame(
        {
            "t": [pd.Timestamp("2024-01-03 00:00:00.000000001")],
            "tz": [pd.Timestamp("2024-01-03 00:00:00.000000001", tz="UTC")],
            "d": [pd.Timedelta(1, "ns")],
        }
    )
    tbl.write(nanos)  # a nanosecond value fits the table a microsecond frame made
    assert tbl.count() == 3
    back = tbl.to_pandas().sort_values("t")
    assert back["t"].dtype == "datetime64[ns]" and back["t"].iloc[-1].nanosecond == 1


def test_a_time_nanoseconds_cannot_hold_is_refused_naming_the_column(tmp_path: Path) -> None:
    far = pd.Series([np.datetime64("2500-01-01", "us")], dtype="datetime64[us]")
    with pytest.raises(SchemaError, match=r"column 't'.*timestamp\[ns\]"):
        raylake.from_pandas(pd.DataFrame({"t": far}), str(tmp_path / "t"))
    assert not (tmp_path / "t").exists()
    tbl = raylake.from_pandas(
        pd.DataFrame({"t": far}), str(tmp_path / "t"), pa.schema([("t", pa.timestamp("us"))])
    )
    assert tbl.to_arrow().column("t").to_pylist()[0].year == 2500


def test_an_arrow_dtype_keeps_the_type_it_names(tmp_path: Path) -> None:
    df = pd.DataFrame({"s": pd.Series(["a"], dtype=pd.ArrowDtype(pa.large_string()))})
    assert raylake.from_pandas(df, str(tmp_path)).schema == pa.schema([("s", pa.large_string())])


@pytest.mark.parametrize("dtype", STRING_DTYPES, ids=str)
def test_any_pandas_string_dtype_writes_into_a_string_column(tmp_path: Path, dtype: object) -> None:
    tbl = raylake.create_table(str(tmp_path), pa.schema([("s", pa.string())]))
    tbl.write(pd.DataFrame({"s": pd.Series(["x", None], dtype=dtype)}))
    assert tbl.to_arrow().column("s").to_pylist() == ["x", None]


def test_a_refused_string_column_is_named_string_whatever_the_pandas(tmp_path: Path) -> None:
    tbl = raylake.create_table(str(tmp_path), pa.schema([("n", pa.int64())]))
    for dtype in STRING_DTYPES:
        with pytest.raises(raylake.SchemaMismatchError, match="has type string,"):
            tbl.write(pd.DataFrame({"n": pd.Series(["1"], dtype=dtype)}))
    assert tbl.latest_snapshot() is None


def test_nullable_integers_round_trip(tmp_path: Path) -> None:
    df = pd.DataFrame(
        {
            "i": pd.array([1, None, 2**53 + 1], dtype="Int64"),
            "u": pd.array([1, 2, None], dtype="UInt8"),
            "n": [1, 2, 3],
        }
    )
    tbl = raylake.from_pandas(df, str(tmp_path))
    back = tbl.to_pandas()
    pd.testing.assert_frame_equal(back, df)  # not float64: 2**53 + 1 survives
    assert tbl.scan().to_pandas()["i"].dtype == "Int64"


def test_to_pandas_gives_the_installed_pandas_defaults(tmp_path: Path) -> None:
    tbl = raylake.from_pandas(pd.DataFrame({"s": ["a", "b"], "i": [1, 2]}), str(tmp_path))
    back = tbl.to_pandas()
    assert back["s"].dtype == pd.Series(["a", "b"]).dtype  # object in pandas 2, str in 3
    assert back["i"].dtype == np.int64


def test_to_pandas_takes_a_types_mapper(tmp_path: Path) -> None:
    df = pd.DataFrame({"i": pd.array([1, None], dtype="Int64"), "s": ["a", "b"]})
    tbl = raylake.from_pandas(df, str(tmp_path))
    back = tbl.to_pandas(types_mapper=pd.ArrowDtype, columns=["i", "s"])
    assert back.dtypes.tolist() == [pd.ArrowDtype(pa.int64()), pd.ArrowDtype(pa.string())]
    assert tbl.scan().to_pandas(types_mapper=pd.ArrowDtype)["i"].dtype == pd.ArrowDtype(pa.int64())


@pytest.mark.parametrize("mapper", [{pa.int64(): pd.Int64Dtype()}, pd.Int64Dtype()], ids=str)
def test_a_types_mapper_that_is_not_a_function_is_refused_naming_it(
    tmp_path: Path, mapper: object
) -> None:
    """pyarrow's bare TypeError ("'dict' object is not callable") came after the read."""
    tbl = raylake.from_pandas(pd.DataFrame({"i": [1, 2]}), str(tmp_path / "t"))
    for to_pandas in (tbl.to_pandas, tbl.scan().to_pandas, tbl.changes(0).to_pandas):
        with pytest.raises(InvalidArgumentError, match="types_mapper must be a function"):
            to_pandas(types_mapper=mapper)


def test_an_unknown_keyword_of_a_read_names_the_closest(tmp_path: Path) -> None:
    tbl = raylake.from_pandas(pd.DataFrame({"i": [1]}), str(tmp_path))
    with pytest.raises(UnknownKeywordError, match="'colums'; did you mean 'columns'"):
        tbl.to_pandas(colums=["i"])
    with pytest.raises(UnknownKeywordError, match="did you mean 'types_mapper'"):
        tbl.to_pandas(type_mapper=pd.ArrowDtype)
    with pytest.raises(UnknownKeywordError, match="did you mean 'filter'"):
        tbl.to_arrow(filtr="i > 0")


def test_a_pandas_null_in_an_integer_key_is_named_a_null_in_the_key(tmp_path: Path) -> None:
    tbl = raylake.create_table(
        str(tmp_path), pa.schema([("id", pa.int64()), ("v", pa.string())]), primary_key=["id"]
    )
    df = pd.DataFrame({"id": [1, None], "v": ["a", "b"]})  # pandas makes it float64
    with pytest.raises(NullConstraintError, match="primary-key column 'id' cannot hold nulls"):
        tbl.write(df)
    with pytest.raises(NullConstraintError, match="primary-key column 'id'"):
        raylake.from_pandas(df, str(tmp_path / "new"), primary_key=["id"])
    assert tbl.latest_snapshot() is None and not (tmp_path / "new").exists()


def test_duplicate_dataframe_columns_are_refused_naming_them(tmp_path: Path) -> None:
    """pyarrow names a column 0 "0", so 0 and "0" are duplicates too."""
    tbl = raylake.create_table(str(tmp_path / "t"), pa.schema([("a", pa.int64())]))
    for df in (
        pd.DataFrame([[1, 2]], columns=["a", "a"]),
        pd.DataFrame([[1, 2]], columns=[0, "0"]),
    ):
        with pytest.raises(SchemaError, match="duplicate column"):
            raylake.from_pandas(df, str(tmp_path / "new"))
        with pytest.raises(SchemaError, match="duplicate column"):
            tbl.write(df)
    assert not (tmp_path / "new").exists()
    assert tbl.latest_snapshot() is None


def test_from_pandas_into_an_existing_table_casts_as_a_write_does(tmp_path: Path) -> None:
    """The nanoseconds a new table's times get are not the existing table's type: a
    year-1500 time appended to a microsecond table fits it, as Table.write takes it."""
    uri = str(tmp_path / "t")
    schema = pa.schema([("t", pa.timestamp("us")), ("s", pa.large_string())])
    tbl = raylake.create_table(uri, schema)
    df = pd.DataFrame(
        {"t": np.array(["1500-01-01", "2024-01-01"], "datetime64[us]"), "s": ["a", "b"]}
    )
    raylake.from_pandas(df, uri, mode="append")
    raylake.from_pandas(df, uri, mode="overwrite")
    tbl.write(df)
    assert tbl.to_arrow().schema == schema and tbl.count() == 4
    assert tbl.to_arrow().column("t")[0].as_py().year == 1500


@pytest.mark.parametrize("primary_key", [(), ("id",)])
def test_what_to_pandas_gives_writes_back(tmp_path: Path, primary_key: tuple) -> None:
    """A map column comes back as lists of (key, value) pairs, whose type pyarrow cannot
    infer: a write takes the table's type for it."""
    schema = pa.schema(
        [("id", pa.int64()), ("m", pa.map_(pa.string(), pa.int64())), ("l", pa.list_(pa.int8()))]
    )
    tbl = raylake.create_table(str(tmp_path / "t"), schema, primary_key=list(primary_key))
    rows = pa.table({"id": [1, 2], "m": [[("a", 1)], None], "l": [[1], []]}, schema=schema)
    tbl.write(rows)
    tbl.write(tbl.to_pandas())
    with tbl.update_schema() as u:
        u.add_column("extra", pa.string())
    tbl.write(tbl.to_pandas().drop(columns=["extra"]), schema_mode="merge")
    want = rows.to_pylist() * (1 if primary_key else 4)
    got = tbl.to_arrow().sort_by("id").drop_columns(["extra"]).to_pylist()
    assert got == sorted(want, key=lambda r: r["id"])
    with pytest.raises(SchemaError, match="'m'"):
        tbl.write(pd.DataFrame({"id": [3], "m": [[1, 2]], "l": [[1]], "extra": ["x"]}))


@pytest.mark.parametrize("primary_key", [(), ("id",)])
def test_a_slice_whose_maps_are_all_empty_or_missing_writes_back(
    tmp_path: Path, primary_key: tuple
) -> None:
    """pyarrow types such a column list<null>, which was refused as not the map column."""
    schema = pa.schema([("id", pa.int64()), ("m", pa.map_(pa.string(), pa.int64()))])
    uri = str(tmp_path / "t")
    tbl = raylake.create_table(uri, schema, primary_key=list(primary_key))
    tbl.write(pa.table({"id": [1, 2, 3], "m": [[("a", 1)], [], None]}, schema=schema))
    df = tbl.to_pandas().sort_values("id")
    tbl.write(df.iloc[1:].assign(id=[4, 5]))
    tbl.write(df.iloc[1:2].assign(id=[6]))
    tbl.merge(df.iloc[1:], on="id").when_matched_update().execute()
    got = tbl.to_arrow().sort_by("id").to_pylist()
    assert [(r["id"], r["m"]) for r in got] == [
        (1, [("a", 1)]), (2, []), (3, None), (4, []), (5, None), (6, [])
    ]  # fmt: skip


@pytest.mark.parametrize("mode", ["append", "overwrite"])
def test_from_pandas_into_an_existing_table_takes_what_to_pandas_gives(
    tmp_path: Path, mode: str
) -> None:
    """A map column (lists of key-value pairs) was refused: only Table.write typed it by
    the table."""
    schema = pa.schema([("id", pa.int64()), ("m", pa.map_(pa.string(), pa.int64()))])
    uri = str(tmp_path / "t")
    tbl = raylake.create_table(uri, schema)
    rows = pa.table({"id": [1, 2, 3], "m": [[("a", 1)], [], None]}, schema=schema)
    tbl.write(rows)
    df = tbl.to_pandas()
    raylake.from_pandas(df, uri, mode=mode)
    raylake.from_pandas(df.iloc[1:], uri, mode="append")
    want = rows.to_pylist() * (2 if mode == "append" else 1) + rows.slice(1).to_pylist()
    assert tbl.to_arrow().to_pylist() == want


def test_python_ints_beyond_64_bits_write_into_a_decimal_column(tmp_path: Path) -> None:
    """pyarrow infers no type for them (OverflowError): the table's type takes them."""
    schema = pa.schema([("id", pa.int64()), ("big", pa.decimal128(38, 0))])
    tbl = raylake.create_table(str(tmp_path / "t"), schema)
    tbl.write(pd.DataFrame({"id": [1, 2], "big": pd.Series([2**64, None], dtype=object)}))
    assert tbl.to_arrow().column("big").to_pylist() == [Decimal(2**64), None]


class _Frame(pd.DataFrame):
    """A DataFrame subclass defined outside pandas, as users and geopandas make them."""

    @property
    def _constructor(self) -> type:
        return _Frame


@pytest.mark.parametrize("primary_key", [(), ("id",)])
def test_a_dataframe_subclass_is_written_as_a_dataframe(tmp_path: Path, primary_key: tuple) -> None:
    """It was taken for an Arrow stream (pandas 2.2 and later), whose filtered index came
    as a column '__index_level_0__' and whose named index was dropped, or refused as 'an
    iterable of str' (pandas before 2.2)."""
    schema = pa.schema([pa.field("id", pa.int64(), not primary_key), ("s", pa.string())])
    tbl = raylake.create_table(str(tmp_path / "t"), schema, primary_key=list(primary_key))
    frame = _Frame({"id": [1, 2, 3], "s": ["a", None, "c"]})
    tbl.write(frame[frame.id > 1])
    tbl.write(frame.set_index("id").head(1))
    got = tbl.to_arrow().sort_by("id").to_pylist()
    assert got == [{"id": 1, "s": "a"}, {"id": 2, "s": None}, {"id": 3, "s": "c"}]
    result = (
        tbl.merge(_Frame({"id": [3], "s": ["z"]}), on="id")
        .when_matched_update({"s": "s.s"})
        .execute()
    )
    assert result.updated == 1
    if primary_key:
        tbl.delete(_Frame({"id": [1]}))
        assert tbl.count() == 2


def test_integers_with_nulls_in_structs_and_lists_keep_their_values(tmp_path: Path) -> None:
    """pyarrow makes them float64 by default: 2**60 + 1 rounded, and a struct of floats
    that the table's column of integers refuses on the way back."""
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("st", pa.struct([("a", pa.int64())])),
            ("l", pa.list_(pa.int64())),
        ]
    )
    tbl = raylake.create_table(str(tmp_path / "t"), schema)
    big = 2**60 + 1
    rows = pa.table(
        {"id": [1, 2], "st": [{"a": big}, None], "l": [[big, None], None]}, schema=schema
    )
    tbl.write(rows)
    df = tbl.to_pandas()
    assert df["st"][0] == {"a": big} and list(df["l"][0]) == [big, None]
    tbl.write(df)
    assert tbl.to_arrow().to_pylist() == rows.to_pylist() * 2


@pytest.mark.parametrize(
    "values",
    [pa.array([3_000_000, None], pa.date32()), pa.array([1, None], pa.time64("ns"))],
    ids=["year-10183", "nanosecond-time"],
)
def test_a_value_pandas_cannot_hold_is_named_with_the_way_to_read_it(
    tmp_path: Path, values: pa.Array
) -> None:
    """pandas makes Python dates and times of these columns, which hold neither."""
    tbl = raylake.create_table(str(tmp_path / "t"), pa.schema([("x", values.type)]))
    tbl.write(pa.table({"x": values}))
    with pytest.raises(raylake.errors.UnsupportedTypeError, match=r"'x'.*types_mapper"):
        tbl.to_pandas()
    assert tbl.to_pandas(types_mapper=pd.ArrowDtype)["x"].dtype == pd.ArrowDtype(values.type)


def test_columns_a_dataframe_adds_take_the_types_from_pandas_gives(tmp_path: Path) -> None:
    """schema_mode="merge" adds a DataFrame's new columns in from_pandas' types, whatever
    the pandas (pandas 3 infers microseconds): a pd.ArrowDtype keeps the type it names."""
    tbl = raylake.from_pandas(pd.DataFrame({"id": [1]}), str(tmp_path / "t"))
    at = np.array(["2024-01-01T10:00"], "datetime64[ms]")
    df = pd.DataFrame(
        {
            "id": [2],
            "at": at,
            "took": np.array([5], "timedelta64[s]"),
            "kind": pd.Series(
                ["a"], dtype="str" if int(pd.__version__.split(".")[0]) >= 3 else object
            ),
            "ms": pd.Series(at, dtype=pd.ArrowDtype(pa.timestamp("ms"))),
        }
    )
    tbl.write(df, schema_mode="merge")
    fresh = raylake.from_pandas(df, str(tmp_path / "fresh"))
    assert tbl.schema == fresh.schema
    assert tbl.schema.field("at").type == pa.timestamp("ns")
    assert tbl.schema.field("took").type == pa.duration("ns")
    assert tbl.schema.field("kind").type == pa.string()
    assert tbl.schema.field("ms").type == pa.timestamp("ms")


@pytest.mark.parametrize("how", ["write", "merge", "from_pandas"])
def test_a_large_string_arrow_dtype_a_dataframe_adds_keeps_its_type(
    tmp_path: Path, how: str
) -> None:
    """As from_pandas stores it (was: string, the strings made one type before the
    pd.ArrowDtype columns kept theirs)."""
    df = pd.DataFrame({"id": [2], "s": pd.Series(["x"], dtype=pd.ArrowDtype(pa.large_string()))})
    uri = str(tmp_path / "t")
    tbl = raylake.from_pandas(pd.DataFrame({"id": [1]}), uri, primary_key=["id"])
    if how == "write":
        tbl.write(df, schema_mode="merge")
    elif how == "merge":
        tbl.merge(df, on="id", schema_mode="merge").when_not_matched_insert().execute()
    else:
        raylake.from_pandas(df, uri, mode="append", schema_mode="merge")
    assert raylake.open_table(uri).schema.field("s").type == pa.large_string()
    assert raylake.from_pandas(df, str(tmp_path / "fresh")).schema.field("s").type == (
        pa.large_string()
    )


@pytest.mark.parametrize("dtype", STRING_DTYPES, ids=str)
@pytest.mark.parametrize(
    "typ", [pa.int64(), pa.bool_(), pa.timestamp("ns"), pa.date32(), pa.float64()], ids=str
)
def test_from_pandas_with_a_schema_does_not_parse_text(
    tmp_path: Path, dtype: object, typ: pa.DataType
) -> None:
    """Whatever the string dtype, as Table.write refuses it (was: pandas 3's str and
    StringDtype("pyarrow") parsed "1" into 1 and "true" into True; object was refused)."""
    df = pd.DataFrame({"a": pd.Series(["1", None], dtype=dtype)})
    with pytest.raises(raylake.SchemaMismatchError, match=r"column 'a' of dtype .* convert"):
        raylake.from_pandas(df, str(tmp_path / "t"), schema=pa.schema([("a", typ)]))
    assert not (tmp_path / "t").exists()
    nothing = pd.DataFrame({"a": pd.Series([None, None], dtype=dtype)})  # no text to parse
    tbl = raylake.from_pandas(nothing, str(tmp_path / "t"), schema=pa.schema([("a", typ)]))
    assert tbl.to_arrow().column("a").to_pylist() == [None, None]


def test_a_series_is_refused_saying_to_write_a_dataframe(tmp_path: Path) -> None:
    """pandas 3's Series exports an Arrow stream of no columns (was: "ArrowSchema
    describes non-struct type int64"); pandas 2's iterated ("an iterable of int")."""
    tbl = raylake.create_table(str(tmp_path), pa.schema([("a", pa.int64())]))
    with pytest.raises(raylake.SchemaMismatchError, match=r"pandas Series \('a'\).*to_frame"):
        tbl.write(pd.Series([1, 2], name="a"))


def test_columns_a_dataframe_merge_adds_take_the_types_from_pandas_gives(tmp_path: Path) -> None:
    """As a write's: a merge of a DataFrame source adds its new columns in from_pandas'
    types, whatever the pandas."""
    tbl = raylake.from_pandas(pd.DataFrame({"id": [1]}), str(tmp_path / "t"))
    source = pd.DataFrame({"id": [1, 2], "at": np.array(["2024-01-01", "NaT"], "datetime64[ms]")})
    merge = tbl.merge(source, on="id", schema_mode="merge")
    merge.when_matched_update().when_not_matched_insert().execute()
    assert tbl.schema.field("at").type == pa.timestamp("ns")
    assert tbl.count(filter="at = '2024-01-01'") == 1 and tbl.count() == 2


@pytest.mark.parametrize(
    ("column", "typ"),
    [
        (pd.to_datetime(["2024-01-01 00:00", "2024-01-02 12:30"]), pa.date32()),
        (pd.to_datetime(["2024-01-01 00:00:00", "2024-01-02 00:00:01"]), pa.date64()),
        # a zoned midnight is another day's evening in UTC, the date pyarrow makes of it
        (pd.to_datetime(["2024-01-01"]).tz_localize("Asia/Tokyo"), pa.date32()),
        (pd.Series([1.5, 1e300]), pa.float32()),
        (pd.Series([1.5, 1e6], dtype="float32"), pa.float16()),
    ],
    ids=["date32", "date64", "zoned", "float32", "float16"],
)
def test_a_given_schema_refuses_what_its_conversion_would_lose(
    tmp_path: Path, column: object, typ: pa.DataType
) -> None:
    """pyarrow's conversion to a given schema dropped a time of day (a zoned one moved to
    its UTC date) and made finite floats infinite without a word, which a write into a
    table of that type refuses."""
    df = pd.DataFrame({"a": column})
    with pytest.raises(SchemaError, match="column 'a'"):
        raylake.from_pandas(df, str(tmp_path / "t"), schema=pa.schema([("a", typ)]))
    assert not (tmp_path / "t").exists()


def test_a_given_schema_takes_midnights_as_dates_and_floats_in_range(tmp_path: Path) -> None:
    df = pd.DataFrame(
        {"d": pd.to_datetime(["2024-01-01", None]), "f": [0.1, np.nan], "g": [np.inf, 2.0]}
    )
    schema = pa.schema([("d", pa.date32()), ("f", pa.float32()), ("g", pa.float16())])
    tbl = raylake.from_pandas(df, str(tmp_path / "t"), schema=schema)
    out = tbl.to_arrow()
    assert out.column("d").to_pylist() == [date(2024, 1, 1), None]
    assert out.column("f").to_pylist() == [pytest.approx(0.1), None]
    assert out.column("g").to_pylist() == [float("inf"), 2.0]
