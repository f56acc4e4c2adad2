"""Arrow types through schema JSON and through data files; table options validation."""

from __future__ import annotations

import datetime
import decimal
import json
import re
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from property_depth import examples

import raylake
from raylake.errors import InvalidOptionError, SchemaError
from raylake.format.options import TableOptions
from raylake.format.schema import TableSchema
from raylake.format.types import normalize_type, type_from_json, type_to_json

_PYARROW_MAJOR = int(pa.__version__.split(".")[0])

PRIMITIVES = [
    pa.null(),
    pa.bool_(),
    pa.int8(),
    pa.int16(),
    pa.int32(),
    pa.int64(),
    pa.uint8(),
    pa.uint16(),
    pa.uint32(),
    pa.uint64(),
    pa.float16(),
    pa.float32(),
    pa.float64(),
    pa.string(),
    pa.large_string(),
    pa.binary(),
    pa.large_binary(),
    pa.date32(),
    pa.date64(),
]
PARAMETERIZED = [
    pa.timestamp("s"),
    pa.timestamp("ms", tz="UTC"),
    pa.timestamp("us", tz="Europe/Berlin"),
    pa.timestamp("ns"),
    pa.time32("s"),
    pa.time32("ms"),
    pa.time64("us"),
    pa.time64("ns"),
    pa.duration("s"),
    pa.duration("ns"),
    pa.decimal128(10, 2),
    pa.decimal256(50, 7),
    pa.binary(16),
    pa.list_(pa.int32(), 4),
    pa.list_(pa.string()),
    pa.large_list(pa.float64()),
    pa.map_(pa.string(), pa.int64()),
    pa.struct([("a", pa.int32()), pa.field("b", pa.list_(pa.string()), nullable=False)]),
]


@pytest.mark.parametrize("dtype", PRIMITIVES + PARAMETERIZED, ids=str)
def test_type_round_trips_through_json(dtype: pa.DataType) -> None:
    encoded = type_to_json(dtype)
    assert type_from_json(json.loads(json.dumps(encoded))) == dtype


def test_primitive_names_are_the_constructor_names() -> None:
    names = [type_to_json(t) for t in PRIMITIVES]
    assert names == [
        "null", "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
        "uint64", "float16", "float32", "float64", "string", "large_string", "binary",
        "large_binary", "date32", "date64",
    ]  # fmt: skip
    # pyarrow's own spellings are accepted too.
    for alias, dtype in [("double", pa.float64()), ("halffloat", pa.float16()),
                         ("utf8", pa.string()), ("date32[day]", pa.date32())]:  # fmt: skip
        assert type_from_json(alias) == dtype


def _types() -> st.SearchStrategy[pa.DataType]:
    leaves = st.sampled_from(PRIMITIVES + PARAMETERIZED[:13])
    names = st.text("abcxyz_", min_size=1, max_size=4)

    def nested(inner: st.SearchStrategy[pa.DataType]) -> st.SearchStrategy[pa.DataType]:
        # pyarrow refuses a non-nullable field of the null type.
        fields = st.builds(
            lambda name, dtype, nullable: pa.field(
                name, dtype, nullable or pa.types.is_null(dtype)
            ),
            names,
            inner,
            st.booleans(),
        )
        return st.one_of(
            inner.map(pa.list_),
            inner.map(pa.large_list),
            st.builds(pa.list_, inner, st.integers(1, 5)),
            st.builds(pa.map_, st.sampled_from([pa.string(), pa.int32()]), inner),
            st.lists(fields, min_size=1, max_size=3, unique_by=lambda f: f.name).map(pa.struct),
        )

    return st.recursive(leaves, nested, max_leaves=6)


@settings(max_examples=examples(60), deadline=None)
@given(dtype=_types())
def test_nested_types_round_trip_through_json(dtype: pa.DataType) -> None:
    assert type_from_json(json.loads(json.dumps(type_to_json(dtype)))) == dtype


def test_dictionary_columns_store_their_value_type() -> None:
    assert normalize_type(pa.dictionary(pa.int8(), pa.string())) == pa.string()
    assert type_to_json(pa.dictionary(pa.int32(), pa.int64())) == "int64"


@pytest.mark.parametrize(
    "dtype",
    [
        pa.month_day_nano_interval(),
        pa.dense_union([pa.field("a", pa.int8())]),
        pa.string_view(),
        # Parquet holds no struct without fields: the table was made, and every write failed
        # with pyarrow's "Cannot write struct type 'c' with no child field to Parquet".
        pa.struct([]),
        pa.list_(pa.struct([])),
    ],
    ids=str,
)
def test_unsupported_types_are_rejected(dtype: pa.DataType, tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match="cannot be stored"):
        type_to_json(dtype)
    with pytest.raises(SchemaError, match=r"column 'c': .*cannot be stored"):
        raylake.create_table(str(tmp_path), pa.schema([("id", pa.int64()), ("c", dtype)]))
    assert not (tmp_path / "schema").exists()


def test_a_write_bringing_a_column_of_a_type_not_stored_names_it(tmp_path: Path) -> None:
    tbl = raylake.create_table(str(tmp_path), pa.schema([("id", pa.int64())]))
    intervals = pa.array([(1, 2, 3)], pa.month_day_nano_interval())
    with pytest.raises(SchemaError, match=r"column 'iv': .*cannot be stored"):
        tbl.write(pa.table({"id": [1], "iv": intervals}), schema_mode="merge")
    assert tbl.latest_snapshot() is None


_EMPTY_ROW = pa.list_(pa.float32(), 0)


@pytest.mark.parametrize(
    "dtype",
    [
        _EMPTY_ROW,
        pa.struct([("a", pa.int32()), ("e", _EMPTY_ROW)]),
        pa.list_(_EMPTY_ROW),
        pa.list_(_EMPTY_ROW, 2),
        pa.map_(pa.string(), _EMPTY_ROW),
    ],
    ids=str,
)
def test_fixed_size_lists_of_width_0_are_refused_naming_the_column(
    dtype: pa.DataType, tmp_path: Path
) -> None:
    """Parquet writes a fixed-size list of width 0, but pyarrow reads none back ("Expected
    all lists to be of size=0"), naming no column: the table was made and written, and
    every read of it failed."""
    refused = r"column 'c': .*cannot be stored.*fixed-size list needs width >= 1"
    with pytest.raises(SchemaError, match=refused):
        raylake.create_table(str(tmp_path / "new"), pa.schema([("id", pa.int64()), ("c", dtype)]))
    tbl = raylake.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64())]))
    with pytest.raises(SchemaError, match=refused), tbl.update_schema() as u:
        u.add_column("c", dtype)
    rows = pa.table({"id": pa.array([1], pa.int64()), "c": pa.array([None], dtype)})
    with pytest.raises(SchemaError, match=refused):
        tbl.write(rows, schema_mode="merge")
    assert tbl.schema.names == ["id"] and tbl.latest_snapshot() is None


@pytest.mark.parametrize("value", ["int128", {"type": "tensor"}, {"no": "type"}])
def test_unknown_json_types_are_rejected(value: object) -> None:
    with pytest.raises(SchemaError, match="unknown type"):
        type_from_json(value)  # type: ignore[arg-type]


def _values(dtype: pa.DataType) -> pa.Array:
    """Two rows for a column of ``dtype``: a value and a null."""
    samples: dict[str, object] = {
        "bool": True, "string": "s", "large_string": "t", "binary": b"b", "large_binary": b"l",
        "date32": datetime.date(2024, 2, 29), "date64": datetime.date(1999, 12, 31),
    }  # fmt: skip
    t = pa.types
    name = type_to_json(dtype)
    if isinstance(name, str) and name in samples:
        value = samples[name]
    elif t.is_null(dtype):
        value = None
    elif t.is_integer(dtype) or t.is_floating(dtype):
        value = 7
    elif t.is_timestamp(dtype):
        value = datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    elif t.is_time(dtype):
        value = datetime.time(12, 30, 1)
    elif t.is_duration(dtype):
        value = datetime.timedelta(seconds=-90)
    elif t.is_decimal(dtype):
        value = decimal.Decimal("-12.25")
    elif t.is_fixed_size_binary(dtype):
        value = b"x" * dtype.byte_width
    elif t.is_fixed_size_list(dtype):
        value = [1, 2, None, 4]
    elif t.is_list(dtype) or t.is_large_list(dtype):
        value = ["a", None] if t.is_string(dtype.value_type) else [1.5, None]
    elif t.is_map(dtype):
        value = [("k", 1), ("j", None)]
    else:
        value = {"a": 1, "b": ["z"]}
    if t.is_floating(dtype) and dtype.bit_width == 16:
        import numpy as np

        return pa.array(np.array([7, 0], dtype=np.float16), mask=np.array([False, True]))
    if t.is_fixed_size_list(dtype) and _PYARROW_MAJOR < 26:
        # pyarrow before 26 writes a null fixed-size list to Parquet that it cannot read
        # back ("Expected all lists to be of size=4"): an Arrow bug (docs/dependencies.md).
        return pa.array([value, value], type=dtype)
    return pa.array([value, None], type=dtype)


def test_every_type_round_trips_through_a_table(tmp_path: Path) -> None:
    columns = {f"c{i}": _values(t) for i, t in enumerate(PRIMITIVES + PARAMETERIZED)}
    data = pa.table(columns)
    tbl = raylake.create_table(str(tmp_path), data.schema)
    tbl.write(data)
    tbl.write(data)
    reopened = raylake.open_table(str(tmp_path))
    assert reopened.schema == data.schema
    assert reopened.to_arrow().equals(pa.concat_tables([data, data]))
    # Filters on columns with statistics are pruned and evaluated with the column's type.
    assert tbl.count(filter="c5 = 7") == 2
    assert tbl.count(filter="c19 = '2024-01-02 03:04:05'") == 2
    assert tbl.count(filter="c17 > '2024-03-01'") == 0


def test_duration_columns_have_statistics(tmp_path: Path) -> None:
    """pyarrow has no min_max kernel for durations; the writer must still gather them."""
    schema = pa.schema([("d", pa.duration("ms"))])
    tbl = raylake.create_table(str(tmp_path), schema)
    seconds = [[-5, 1], [10, 20]]
    for batch in seconds:
        tbl.write(
            pa.table(
                {"d": pa.array([datetime.timedelta(seconds=s) for s in batch], schema[0].type)}
            )
        )
    assert tbl.count() == 4
    high = pa.scalar(datetime.timedelta(seconds=5), schema[0].type)
    plan = tbl.scan(filter=raylake.col("d") > high).plan()
    assert sum(len(s.files) for s in plan) == 1
    assert tbl.to_arrow(filter=raylake.col("d") > high).num_rows == 2


def test_schema_json_round_trip(tmp_path: Path) -> None:
    schema = pa.schema(
        [pa.field("id", pa.int64(), nullable=False), ("dt", pa.date32()), ("m", PARAMETERIZED[16])]
    )
    tbl = raylake.create_table(
        str(tmp_path), schema, partition_by=["dt"], options={"write.row-group-rows": 10}
    )
    stored = json.loads((tmp_path / "schema" / "schema-0.json").read_text())
    assert stored["fields"][0] == {"id": 0, "name": "id", "type": "int64", "nullable": False}
    assert stored["partition_keys"] == ["dt"] and stored["primary_key"] == []
    assert stored["options"] == {"write.row-group-rows": "10"}
    assert TableSchema.from_json(stored) == tbl.table_schema


# -- options -----------------------------------------------------------------------------


def test_options_are_typed_and_stored_as_strings(tmp_path: Path) -> None:
    options = {
        "write.target-file-size": 1 << 20,
        "write.row-group-rows": "5000",
        "write.compression": "ZSTD",
        "read.split.target-size": 1 << 22,
        "read.split.open-file-cost": 1024,
        "manifest.merge-min-count": 5,
        "commit.max-retries": 3,
        "snapshot.num-retained.min": 2,
    }
    tbl = raylake.create_table(str(tmp_path), pa.schema([("a", pa.int8())]), options=options)
    typed = raylake.open_table(str(tmp_path)).table_schema.table_options
    assert typed.row_group_rows == 5000 and typed.compression == "zstd"
    assert typed.manifest_merge_min_count == 5 and typed.commit_max_retries == 3
    assert tbl.table_schema.options["write.target-file-size"] == str(1 << 20)
    assert TableOptions.from_mapping(None) == TableOptions()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"write.bogus": "1"}, "unknown option; known options: .*commit.max-retries"),
        ({"read.split.target-size": "big"}, "expected an integer"),
        ({"write.row-group-rows": 0}, "expected a positive integer"),
        ({"manifest.merge-min-count": -3}, "expected a positive integer"),
        ({"write.compression": "zip"}, "expected one of"),
    ],
)
def test_invalid_options_are_rejected(tmp_path: Path, options: dict, message: str) -> None:
    with pytest.raises(InvalidOptionError, match=message) as info:
        raylake.create_table(str(tmp_path), pa.schema([("a", pa.int8())]), options=options)
    key = next(iter(options))
    assert info.value.key == key and key in str(info.value)
    assert not (tmp_path / "schema").exists()


def test_write_options_take_effect(tmp_path: Path) -> None:
    tbl = raylake.create_table(
        str(tmp_path),
        pa.schema([("a", pa.int64())]),
        options={
            "write.row-group-rows": 10,
            "write.target-file-size": 400,
            "write.compression": "none",
        },
    )
    tbl.write(pa.table({"a": pa.array(range(100), pa.int64())}))
    files = [f for s in tbl.scan().plan() for f in s.files]
    assert len(files) > 1  # rolled at the target size (in-memory bytes)
    assert sum(f.row_count for f in files) == 100
    assert sorted(tbl.to_arrow().column("a").to_pylist()) == list(range(100))


@pytest.mark.parametrize(
    "options",
    [
        {"merge-engine": "deduplicate"},
        {"changelog-producer": "input"},
        {"fields.x.aggregate-function": "sum"},
    ],
)
def test_primary_key_options_on_append_table_are_refused(tmp_path, options):
    with pytest.raises(raylake.InvalidOptionError, match="only to primary-key tables"):
        raylake.create_table(str(tmp_path / "t"), pa.schema([("x", pa.int64())]), options=options)
    assert not (tmp_path / "t").exists() or not any((tmp_path / "t").rglob("*.json"))


def test_dictionary_is_an_encoding_not_a_type(tmp_path: Path) -> None:
    """Declared or written dictionary<string> is stored as string (docs/format.md); the
    Parquet pages still use dictionary encoding, so the files stay compact."""
    import pyarrow.parquet as pq

    declared = pa.schema([("id", pa.int64()), ("c", pa.dictionary(pa.int32(), pa.string()))])
    tbl = raylake.create_table(str(tmp_path / "t"), declared)
    assert tbl.schema.field("c").type == pa.string()
    tbl.write(pa.table({"id": [1, 2], "c": pa.array(["x", "y"]).dictionary_encode()}))
    tbl.write(pa.table({"id": [3], "c": ["x"]}))  # plain strings are accepted too
    out = tbl.to_arrow().sort_by("id")
    assert out.schema.field("c").type == pa.string()
    assert out.column("c").to_pylist() == ["x", "y", "x"]
    assert tbl.count(filter="c = 'x'") == 2
    for path in (tmp_path / "t" / "data").rglob("*.parquet"):
        encodings = pq.ParquetFile(path).metadata.row_group(0).column(1).encodings
        assert any("DICTIONARY" in e for e in encodings)


def test_nanosecond_times_keep_their_nanoseconds(tmp_path: Path) -> None:
    """time64[ns] values that differ below a microsecond (which datetime.time cannot
    hold) stay apart as partitions, keep their file's bounds and primary-key bounds."""
    ns = pa.time64("ns")
    data = pa.table({"t": pa.array([1, 2], ns), "k": pa.array([1, 3], ns), "v": [1, 2]})
    parted = raylake.create_table(str(tmp_path / "parted"), data.schema, partition_by=["t"])
    parted.write(data)
    assert parted.to_arrow().sort_by("v").column("t").cast(pa.int64()).to_pylist() == [1, 2]
    assert parted.count(filter=raylake.col("t") == pa.scalar(2, ns)) == 1
    first = raylake.col("t") == pa.scalar(1, ns)
    parted.write(data.slice(0, 1), mode="overwrite", overwrite_filter=first)
    assert parted.to_arrow().sort_by("v").column("t").cast(pa.int64()).to_pylist() == [1, 2]

    keyed = raylake.create_table(str(tmp_path / "keyed"), data.schema, primary_key=["k"])
    keyed.write(data)
    assert keyed.count(filter=raylake.col("k") == pa.scalar(3, ns)) == 1
    assert keyed.count(filter=raylake.col("k").isin([pa.scalar(3, ns)])) == 1
    # the file's maximum is 3 ns, not the microsecond 0 below it
    assert keyed.count(filter=raylake.col("t") > datetime.time(0, 0)) == 2


@pytest.mark.parametrize("dtype", [pa.timestamp("s"), pa.date32(), pa.date64()])
def test_dates_beyond_year_9999_are_stored_or_refused_by_name(
    tmp_path: Path, dtype: pa.DataType
) -> None:
    """Python's dates end at 9999: such a value is stored with unknown bounds (filters
    still select it), and refused by name in a partition or primary-key column."""
    far = {"timestamp[s]": 2**40, "date32[day]": 3_000_000, "date64[ms]": 10**7 * 86_400_000}[
        str(dtype)
    ]
    data = pa.table({"id": [1, 2], "x": pa.array([far, 0], dtype)})
    tbl = raylake.create_table(str(tmp_path / "t"), data.schema)
    tbl.write(data)
    assert tbl.to_arrow().equals(data)
    assert tbl.count(filter="x > '2024-01-01'") == 1 and tbl.count(filter="x < '2024-01-01'") == 1
    for name, layout in [("p", {"partition_by": ["x"]}), ("k", {"primary_key": ["x"]})]:
        refusing = raylake.create_table(str(tmp_path / name), data.schema, **layout)
        with pytest.raises(SchemaError, match=r"column 'x' .* outside Python's dates"):
            refusing.write(data)
        assert refusing.latest_snapshot() is None


@pytest.mark.parametrize("width", [32, 64])
def test_decimal32_and_decimal64_are_stored_as_decimal128(tmp_path: Path, width: int) -> None:
    """pyarrow's decimal32 and decimal64 were stored as decimal256, which polars (a
    panic) and DuckDB refuse when handed a scan, for a decimal of a few digits."""
    if not hasattr(pa, "decimal32"):
        pytest.skip("pyarrow before 18 has no decimal32 or decimal64")
    small = pa.decimal32(5, 2) if width == 32 else pa.decimal64(5, 2)
    values = pa.array([decimal.Decimal("1.23"), None, decimal.Decimal("-999.99")], small)
    tbl = raylake.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64()), ("d", small)]))
    assert tbl.schema.field("d").type == pa.decimal128(5, 2)
    tbl.write(pa.table({"id": [1, 2, 3], "d": values}))
    merged = raylake.create_table(str(tmp_path / "m"), pa.schema([("id", pa.int64())]))
    merged.write(pa.table({"id": [1, 2, 3], "d": values}), schema_mode="merge")
    for table in (tbl, merged):
        out = raylake.open_table(table.uri).to_arrow().sort_by("id")
        assert out.schema.field("d").type == pa.decimal128(5, 2)
        assert out.column("d").to_pylist() == values.to_pylist()
        assert pa.table(table.scan()).column("d").type == pa.decimal128(5, 2)


@pytest.mark.parametrize("zone", ["Mars/Base", "+25:00", "Z"])
def test_a_time_zone_no_reader_knows_is_refused_naming_the_column(
    tmp_path: Path, zone: str
) -> None:
    """pyarrow takes any string as a zone: the table was made, and every to_pandas of it
    failed with pandas' UnknownTimeZoneError."""
    schema = pa.schema([("id", pa.int64()), ("t", pa.list_(pa.timestamp("us", zone)))])
    with pytest.raises(SchemaError, match=rf"column 't': .*{re.escape(repr(zone))}"):
        raylake.create_table(str(tmp_path / "t"), schema)
    assert not (tmp_path / "t" / "schema").exists()
    tbl = raylake.create_table(str(tmp_path / "ok"), pa.schema([("id", pa.int64())]))
    data = pa.table({"id": [1], "u": pa.array([0], pa.timestamp("us", zone))})
    with pytest.raises(SchemaError, match="column 'u'"):
        tbl.write(data, schema_mode="merge")
    assert tbl.latest_snapshot() is None


def test_a_table_that_stores_such_a_zone_already_stays_writable(tmp_path: Path) -> None:
    """A table made before such zones were refused (its schema file written so) takes
    writes, a column added and reads in Arrow as before: the refusal is for a column
    being made, never for a stored schema written again or compared at each commit."""
    tbl = raylake.create_table(str(tmp_path), pa.schema([("t", pa.timestamp("us", "UTC"))]))
    (schema_file,) = (tmp_path / "schema").iterdir()
    schema_file.write_text(schema_file.read_text().replace('"UTC"', '"Mars/Base"'))
    tbl = raylake.open_table(str(tmp_path))
    zoned = pa.timestamp("us", "Mars/Base")
    tbl.write(pa.table({"t": pa.array([0], zoned)}))
    tbl.update_schema().add_column("n", pa.int64()).commit()
    tbl.write(pa.table({"t": pa.array([1], zoned), "n": [2]}))
    assert tbl.to_arrow().column("t").type == zoned and tbl.count() == 2


@pytest.mark.parametrize("zone", ["UTC", "Europe/Paris", "+05:30", "-08:00", "Etc/GMT+5"])
def test_time_zone_names_and_offsets_are_stored(tmp_path: Path, zone: str) -> None:
    tbl = raylake.create_table(str(tmp_path), pa.schema([("t", pa.timestamp("us", zone))]))
    tbl.write(pa.table({"t": pa.array([0, None], pa.timestamp("us", zone))}))
    assert raylake.open_table(str(tmp_path)).schema.field("t").type.tz == zone
    assert tbl.to_pandas()["t"].isna().tolist() == [False, True]


def test_a_struct_with_repeated_field_names_is_refused_naming_the_column(tmp_path: Path) -> None:
    """Such a struct was stored; to_pandas and DuckDB read one field of each name and
    dropped the other's values without a word."""
    twice = pa.struct([("a", pa.int64()), ("a", pa.string())])
    for dtype in (twice, pa.list_(twice), pa.map_(pa.string(), twice)):
        with pytest.raises(SchemaError, match=r"column 's': .*distinct names \(\['a'\]"):
            raylake.create_table(str(tmp_path / "t"), pa.schema([("s", dtype)]))
        assert not (tmp_path / "t" / "schema").exists()
