"""write_lake of datasets whose blocks disagree on a column's type: the table takes the
dataset's schema as Ray unifies it, not the first block's."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

ray = pytest.importorskip("ray")

import raylake  # noqa: E402
from raylake import write_lake  # noqa: E402

pytestmark = pytest.mark.ray
# Workers cannot import this test module: ship its map function by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_a_first_block_of_nulls_does_not_type_a_new_table(ray_cluster: Any, tmp_path: Path) -> None:
    """from_items makes a block per item: the first block's column is null, the dataset's
    (Ray's unified schema) int64; the table was created with a null column and the next
    block's ints were refused in a write task."""
    ds = ray.data.from_items([{"id": 1, "a": None}, {"id": 2, "a": 5}])
    write_lake(ds, str(tmp_path / "t"))
    tbl = raylake.open_table(str(tmp_path / "t"))
    assert tbl.schema.field("a").type == pa.int64()
    assert sorted(tbl.to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "a": None},
        {"id": 2, "a": 5},
    ]


def test_a_merged_column_takes_the_datasets_type(ray_cluster: Any, tmp_path: Path) -> None:
    raylake.from_pandas(pa.table({"id": [0]}).to_pandas(), str(tmp_path / "t"))
    ds = ray.data.from_items([{"id": 1, "b": None}, {"id": 2, "b": "x"}])
    write_lake(ds, str(tmp_path / "t"), schema_mode="merge")
    tbl = raylake.open_table(str(tmp_path / "t"))
    assert tbl.schema.field("b").type == pa.string()
    assert sorted(tbl.to_arrow().column("b").to_pylist(), key=str) == [None, None, "x"]


def _x_from_id_one(batch: pd.DataFrame) -> pd.DataFrame:
    """'x' has no value in the first block (id 0): the block's column is null."""
    return batch.assign(x=None) if (batch["id"] < 1).all() else batch.assign(x=batch["id"] / 2)


def _b_null_then_float(batch: pd.DataFrame) -> pd.DataFrame:
    """'b' has no value in the first block, then floats: the driver's check passes."""
    return batch.assign(b=None) if (batch["id"] < 1).all() else batch.assign(b=batch["id"] / 2)


def _b_from_id_two(batch: pd.DataFrame) -> pd.DataFrame:
    """Rows from id 2 on get a column 'b'."""
    return batch.assign(b=batch["id"].astype(str)) if (batch["id"] >= 2).all() else batch


def test_a_mapped_datasets_first_block_is_named_and_schema_given_is_planned(
    ray_cluster: Any, tmp_path: Path
) -> None:
    """Ray knows a map_batches output's schema only by running it, so a new table's
    columns (and the columns schema_mode="merge" adds) were the first block's: the task
    that met a later block raised a bare mismatch, and schema= given for an existing
    table was not planned by merge, which then refused the column it exists to add."""

    def mapped(fn: Any) -> Any:
        return ray.data.range(4, override_num_blocks=4).map_batches(fn, batch_format="pandas")

    first_block = r"'x' has type double.*taken from its first block.*schema="
    with pytest.raises(Exception, match=first_block):
        write_lake(mapped(_x_from_id_one), str(tmp_path / "new"))
    assert not (tmp_path / "new").exists()  # the table made for the write is dropped
    uri = str(tmp_path / "t")
    raylake.from_pandas(pd.DataFrame({"id": [-1]}), uri)
    with pytest.raises(Exception, match=r"column\(s\) \['b'\].*taken from its first block"):
        write_lake(mapped(_b_from_id_two), uri, schema_mode="merge")
    given = pa.schema([("id", pa.int64()), ("b", pa.string())])
    write_lake(mapped(_b_from_id_two), uri, schema_mode="merge", schema=given)
    rows = sorted(raylake.open_table(uri).to_arrow().to_pylist(), key=lambda r: r["id"])
    assert rows == [{"id": i, "b": None if i < 2 else str(i)} for i in range(-1, 4)]
    # An existing table's columns are its own: the refusal does not blame the first block.
    with pytest.raises(Exception, match=r"'b' has type double") as info:
        write_lake(mapped(_b_null_then_float), uri)
    assert "first block" not in str(info.value)


def test_a_narrower_first_block_does_not_type_a_new_table(ray_cluster: Any, tmp_path: Path) -> None:
    """Ray unifies int32 and int64 blocks as int64, and a first block without nulls with
    a later one holding some as nullable: the table was created with the first block's
    int32 (non-nullable) column, and the next block was refused in its write task."""
    strict = pa.schema([pa.field("a", pa.int32(), nullable=False)])
    first = pa.table({"id": [1], "a": pa.array([1], pa.int32())}).cast(
        pa.schema([pa.field("id", pa.int64()), *strict])
    )
    later = pa.table({"id": [2, 3], "a": pa.array([2**40, None], pa.int64())})
    write_lake(ray.data.from_arrow([first, later]), str(tmp_path / "t"))
    tbl = raylake.open_table(str(tmp_path / "t"))
    assert tbl.schema.field("a") == pa.field("a", pa.int64())
    rows = sorted(tbl.to_arrow().to_pylist(), key=lambda r: r["id"])
    assert [r["a"] for r in rows] == [1, 2**40, None]


def test_a_new_primary_key_table_of_dataframes_takes_a_string_key(
    ray_cluster: Any, tmp_path: Path
) -> None:
    """pandas 2's strings are an object column, which the dataset's schema types null
    until its rows are seen: write_lake refused the key before the job ("primary-key
    column 'k' has type null"), where LakeDatasink and from_pandas made the table."""
    df = pd.DataFrame({"k": ["a", "b"], "p": ["x", "y"], "v": [1, 2]})
    uri = str(tmp_path / "t")
    write_lake(ray.data.from_pandas(df), uri, primary_key=["k", "p"], partition_by=["p"])
    tbl = raylake.open_table(uri)
    assert tbl.schema.field("k").type == pa.string()
    assert sorted(tbl.to_arrow().column("k").to_pylist()) == ["a", "b"]
    # A key column of nulls is still refused, when the rows show it.
    nulls = pd.DataFrame({"k": [None, None], "v": [1, 2]})
    with pytest.raises(raylake.errors.RaylakeError, match="'k'"):
        write_lake(ray.data.from_pandas(nulls), str(tmp_path / "nulls"), primary_key=["k"])
    assert not (tmp_path / "nulls").exists()  # the new table was removed


def test_a_new_table_of_dataframes_takes_the_types_from_pandas_gives(
    ray_cluster: Any, tmp_path: Path
) -> None:
    """Ray's blocks of DataFrames keep pandas' units: pandas 3 parses dates to
    microseconds, and either pandas keeps a datetime64[us] column so. A table made of them
    took timestamp[us] (and with pandas 3 duration[us], large_string from pandas batches),
    where from_pandas of the same DataFrame stores nanoseconds and string, so the table
    depended on the pandas installed; Arrow data keeps its types."""
    day = pd.to_datetime(["2024-01-01", "2024-01-02"])
    arrow_typed = pa.chunked_array([pa.array([1, 2], pa.timestamp("us"))])
    df = pd.DataFrame(
        {
            "id": [1, 2],
            "ts": day.astype("datetime64[us]"),
            "tz": day.tz_localize("UTC"),
            "td": pd.to_timedelta([1, 2], unit="s"),
            "s": pd.array(["a", "b"], dtype="string"),  # not object: see docs/ray-data.md
            "kept": arrow_typed.to_pandas(types_mapper=pd.ArrowDtype),
        }
    )
    expected = raylake.from_pandas(df, str(tmp_path / "pandas")).schema
    assert expected.field("ts").type == pa.timestamp("ns")
    assert expected.field("kept").type == pa.timestamp("us")
    datasets = {
        "blocks": ray.data.from_pandas(df),
        "batches": ray.data.from_pandas(df).map_batches(lambda b: b, batch_format="pandas"),
    }
    for name, ds in datasets.items():
        write_lake(ds, str(tmp_path / name))
        tbl = raylake.open_table(str(tmp_path / name))
        assert tbl.schema == expected, name
        got = tbl.to_arrow().sort_by("id")
        assert got.equals(raylake.open_table(str(tmp_path / "pandas")).to_arrow()), name
    write_lake(ray.data.from_arrow(pa.table({"t": arrow_typed})), str(tmp_path / "arrow"))
    assert raylake.open_table(str(tmp_path / "arrow")).schema.field("t").type == pa.timestamp("us")
    # Arrow made of a DataFrame with a schema: the units chosen there are kept.
    chosen = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("ms"))])
    made = pa.Table.from_pandas(df[["id", "ts"]], schema=chosen, preserve_index=False)
    write_lake(ray.data.from_arrow(made), str(tmp_path / "chosen"))
    assert raylake.open_table(str(tmp_path / "chosen")).schema.field("ts").type == pa.timestamp(
        "ms"
    )


def test_a_tensor_column_of_dataframes_is_refused_as_ray_types_it(
    ray_cluster: Any, tmp_path: Path
) -> None:
    """Ray's tensor dtype is left to Ray's own conversion: an empty column of it, as the
    DataFrame types are read, has no shape, and the refusal named a shape=() double."""
    import numpy as np

    vectors = [np.array([1.0, 2.0], dtype="float32"), np.array([3.0, 4.0], dtype="float32")]
    ds = ray.data.from_pandas(pd.DataFrame({"id": [1, 2], "v": vectors}))
    with pytest.raises(raylake.SchemaError, match=r"column 'v'.*shape=\(2,\), dtype=float"):
        write_lake(ds, str(tmp_path / "t"))
    assert not (tmp_path / "t").exists()
