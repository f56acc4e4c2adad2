"""Every entry point refuses a keyword it does not take, naming the closest one it does
(UnknownKeywordError, a TypeError), before anything is read or written."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

import raylake
from raylake.errors import UnknownKeywordError

SCHEMA = pa.schema([("id", pa.int64())])


def _refused(call: object, keyword: str, closest: str) -> None:
    with pytest.raises(UnknownKeywordError, match=f"'{keyword}'; did you mean '{closest}'") as info:
        call()  # type: ignore[operator]
    assert isinstance(info.value, TypeError) and info.value.closest == closest


def test_the_table_entry_points(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _refused(
        lambda: raylake.create_table(uri, SCHEMA, partition_on=["id"]),
        "partition_on",
        "partition_by",
    )
    _refused(
        lambda: raylake.from_pandas(pd.DataFrame({"id": [1]}), uri, primary_keys=["id"]),
        "primary_keys",
        "primary_key",
    )
    _refused(
        lambda: raylake.open_table(uri, storage_option={}), "storage_option", "storage_options"
    )
    assert not (tmp_path / "t").exists()
    tbl = raylake.create_table(uri, SCHEMA)
    _refused(lambda: tbl.write(pa.table({"id": [1]}), mod="overwrite"), "mod", "mode")
    _refused(lambda: tbl.stream(shards=(0, 2)), "shards", "shard")
    _refused(lambda: tbl.remove_orphan_files(older_then=1), "older_then", "older_than")
    _refused(lambda: tbl.scan(colums=["id"]), "colums", "columns")
    assert tbl.latest_snapshot() is None


def test_read_lake_refuses_a_misspelled_keyword_before_ray_runs(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    from raylake import read_lake

    tbl = raylake.create_table(str(tmp_path), SCHEMA)
    tbl.write(pa.table({"id": [1]}))
    _refused(lambda: read_lake(tbl.uri, colums=["id"]), "colums", "columns")
    _refused(lambda: read_lake(tbl.uri, num_cpu=1), "num_cpu", "num_cpus")


def test_the_ray_entry_points_and_the_table_methods(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    from raylake import LakeDatasink, LakeDatasource, StreamingJob, write_lake

    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    tbl.write(pa.table({"id": [1]}))
    _refused(lambda: LakeDatasource(tbl.uri, colums=["id"]), "colums", "columns")
    _refused(lambda: LakeDatasink(tbl.uri, primary_keys=["id"]), "primary_keys", "primary_key")
    _refused(lambda: write_lake(None, tbl.uri, mod="append"), "mod", "mode")  # type: ignore[arg-type]
    _refused(
        lambda: StreamingJob(tbl.uri, lambda rows: rows, consumer_id="c", num_shard=2),
        "num_shard",
        "num_shards",
    )
    with pytest.raises(UnknownKeywordError, match=r"^LakeDatasink\(\) got"):
        LakeDatasink(tbl.uri, primary_keys=["id"])
    _refused(lambda: tbl.count(filters="id = 1"), "filters", "filter")
    _refused(lambda: tbl.commit([], allow_emtpy=True), "allow_emtpy", "allow_empty")
    _refused(lambda: tbl.new_writer(prefix="x"), "prefix", "file_prefix")
    _refused(lambda: tbl.read_split(tbl.scan().plan()[0], column=["id"]), "column", "columns")
    _refused(lambda: list(tbl.stream().plans(time_out=0)), "time_out", "timeout")
    _refused(lambda: tbl.reset_consumer("c", next_snapshot_id=1), "next_snapshot_id", "snapshot_id")
    _refused(lambda: tbl.snapshot(snapshotid=1), "snapshotid", "snapshot_id")
    _refused(lambda: tbl.schema_at(snapshot=1), "snapshot", "snapshot_id")
    _refused(lambda: tbl.delete_consumer(consumer="c"), "consumer", "consumer_id")
    pk = raylake.create_table(str(tmp_path / "pk"), SCHEMA, primary_key=["id"])
    _refused(lambda: pk.delete(key_or_filter={"id": [1]}), "key_or_filter", "keys_or_filter")
    assert len(tbl.snapshots()) == 1


def test_schema_updates_and_scans(tmp_path: Path) -> None:
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    tbl.write(pa.table({"id": [1]}))
    # The error ends the block: nothing commits.
    with pytest.raises(UnknownKeywordError), tbl.update_schema() as u:
        _refused(lambda: u.add_column("x", pa.int64(), nulable=True), "nulable", "nullable")
        _refused(lambda: u.update_column("id", nulable=True), "nulable", "nullable")
        _refused(lambda: u.rename_column("id", new_nam="y"), "new_nam", "new_name")
        u.delete_column(nam="id")
    assert tbl.refresh().schema.names == ["id"]
    scan = tbl.scan()
    _refused(lambda: scan.select(column=["id"]), "column", "columns")
    _refused(lambda: scan.at(snapshot=1), "snapshot", "snapshot_id")
    with pytest.raises(UnknownKeywordError, match=r"^plan\(\) got .*\(it takes no keywords\)"):
        scan.plan(limit=1)  # type: ignore[call-arg]
    with pytest.raises(UnknownKeywordError, match=r"^plan\(\) got"):
        tbl.changes(0).plan(limit=1)  # type: ignore[call-arg]
    _refused(lambda: scan.to_pandas(type_mapper=None), "type_mapper", "types_mapper")
    with tbl.stream(consumer_id="c") as reader:
        _refused(lambda: reader.checkpoint(propertie={}), "propertie", "properties")
        _refused(lambda: reader.seek(1, propertie={}), "propertie", "properties")
        _refused(
            lambda: reader.notify_checkpoint_complete(next_snapshot=1),
            "next_snapshot",
            "next_snapshot_id",
        )


def test_stream_options_positions_and_batch_samplers() -> None:
    """Python's bare TypeError named no keyword they take."""
    from raylake.streaming import StreamOptions, StreamPosition

    _refused(lambda: StreamOptions(shards=(0, 2)), "shards", "shard")
    _refused(lambda: StreamPosition(next_snapshot=1), "next_snapshot", "next_snapshot_id")
    assert StreamOptions(start="earliest").replace(shard=(0, 2)).shard == (0, 2)
    torch = pytest.importorskip("torch")
    from raylake.train.torch import DistributedBatchSampler, RandomBatchSampler

    items = list(range(4))
    _refused(lambda: RandomBatchSampler(items, 2, drop_lats=True), "drop_lats", "drop_last")
    _refused(
        lambda: DistributedBatchSampler(items, 2, num_replica=1, rank=0),
        "num_replica",
        "num_replicas",
    )
    assert len(list(RandomBatchSampler(items, 2, generator=torch.Generator()))) == 2
