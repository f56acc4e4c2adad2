"""Ray Data reads of an evolved table (issue 18): old files by field id, time travel under
each snapshot's schema, Ray's pushdown on renamed and added columns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

ray = pytest.importorskip("ray")
from lake_ray_util import ds_to_arrow, rows  # noqa: E402
from ray.data.expressions import col as rcol  # noqa: E402

import raylake  # noqa: E402
from raylake import read_lake, write_lake  # noqa: E402

pytestmark = pytest.mark.ray

SCHEMA = pa.schema([("id", pa.int64()), ("x", pa.int32()), ("gone", pa.string())])


@pytest.fixture(scope="module")
def evolved(tmp_path_factory: pytest.TempPathFactory) -> raylake.Table:
    tbl = raylake.create_table(
        str(tmp_path_factory.mktemp("evolved") / "t"), SCHEMA,
        options={"write.row-group-rows": 50, "read.split.target-size": 4_000},
    )  # fmt: skip
    for i in range(3):  # several files and read tasks of schema 0
        ids = list(range(i * 100, i * 100 + 100))
        tbl.write(pa.table({"id": ids, "x": ids, "gone": ["g"] * 100}, schema=SCHEMA))
    with tbl.update_schema() as u:
        u.rename_column("x", "x2")
        u.update_column("x2", pa.int64())
        u.delete_column("gone")
        u.add_column("z", pa.float64())
    ids = list(range(300, 400))
    tbl.write(pa.table({"id": ids, "x2": ids, "z": [float(i) for i in ids]}))
    return tbl


def test_ray_reads_equal_to_arrow_across_schema_versions(
    ray_cluster: Any, evolved: raylake.Table
) -> None:
    ds = read_lake(evolved.uri, override_num_blocks=6)
    got = ds_to_arrow(ds)
    assert got.schema == evolved.schema
    assert rows(got) == rows(evolved.to_arrow())
    assert got.column("z").null_count == 300
    renamed = ds_to_arrow(
        read_lake(evolved.uri).filter(expr=rcol("x2") >= 250).select_columns(["id", "x2"])
    )
    assert rows(renamed) == [{"id": i, "x2": i} for i in range(250, 400)]
    nulls = ds_to_arrow(read_lake(evolved.uri, filter="z is null", columns=["id"]))
    assert sorted(nulls.column("id").to_pylist()) == list(range(300))


def test_ray_time_travel_reads_the_snapshot_schema(
    ray_cluster: Any, evolved: raylake.Table
) -> None:
    got = ds_to_arrow(read_lake(evolved.uri, snapshot_id=2, filter="x < 5", columns=["x", "gone"]))
    assert got.schema == pa.schema([("x", pa.int32()), ("gone", pa.string())])
    assert sorted(got.column("x").to_pylist()) == [0, 1, 2, 3, 4]


def test_write_lake_in_merge_mode_adds_the_datasets_columns(
    ray_cluster: Any, tmp_path: Path
) -> None:
    schema = pa.schema([("id", pa.int64()), ("v", pa.int64())])
    tbl = raylake.create_table(str(tmp_path / "t"), schema)
    tbl.write(pa.table({"id": [1], "v": [10]}, schema=schema))
    ds = ray.data.from_arrow(pa.table({"id": [2, 3], "note": ["b", "c"]}))
    with pytest.raises(raylake.SchemaMismatchError):
        write_lake(ds, tbl.uri)
    write_lake(ds, tbl.uri, schema_mode="merge")
    assert rows(raylake.open_table(tbl.uri).to_arrow()) == [
        {"id": 1, "v": 10, "note": None},
        {"id": 2, "v": None, "note": "b"},
        {"id": 3, "v": None, "note": "c"},
    ]


def test_write_lake_in_merge_mode_adds_every_blocks_columns_with_the_data(
    ray_cluster: Any, tmp_path: Path
) -> None:
    """Only the first block's new columns were added, before the write: the later
    block's were refused in its task, and the first block's stayed without data."""
    tbl = raylake.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64())]))
    blocks = [pa.table({"id": [1], "a": [1.5]}), pa.table({"id": [2], "b": ["s"]})]
    write_lake(ray.data.from_arrow(blocks), tbl.uri, schema_mode="merge")
    assert rows(raylake.open_table(tbl.uri).to_arrow()) == [
        {"id": 1, "a": 1.5, "b": None},
        {"id": 2, "a": None, "b": "s"},
    ]
    # Unknown before the run (after a map), a later block's new column is refused and
    # the first one's is not added.
    other = raylake.create_table(str(tmp_path / "o"), pa.schema([("id", pa.int64())]))
    mapped = ray.data.from_arrow(blocks).map_batches(lambda b: b, batch_format="pyarrow")
    with pytest.raises(Exception, match="'b'"):
        write_lake(mapped, other.uri, schema_mode="merge")
    assert raylake.open_table(other.uri).schema.names == ["id"]
