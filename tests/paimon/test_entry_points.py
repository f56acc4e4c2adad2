"""Every entry point reads Paimon tables through the same scans and splits: the CLI,
Ray Data, Torch datasets and tf.data (Spark: tests/spark/test_spark_paimon.py)."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from paimon_util import FIXTURES, expected, rows_by_key

import raylake
from raylake.cli import main

PK = str(FIXTURES / "pk_deduplicate" / "table")
APPEND = str(FIXTURES / "append_partitioned" / "table")


def _ids(name: str, snapshot_id: int, where: Any = None) -> list[int]:
    rows = expected(name, snapshot_id).to_pylist()
    return sorted(r["id"] for r in rows if where is None or where(r))


def test_cli_info_snapshots_and_scan(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", PK]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["format"] == "paimon" and info["kind"] == "primary-key"
    assert info["primary_key"] == ["id"] and info["rows"] == 37 and info["latest_snapshot"] == 5
    assert main(["snapshots", PK]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[1:6]] == ["1", "2", "3", "4", "5"]
    assert main(["scan", PK, "--filter", "id >= 38", "--format", "json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(r["id"] for r in rows) == [38, 39]


def test_cli_info_shows_the_options_paimon_stored(capsys: pytest.CaptureFixture[str]) -> None:
    """They showed as {}: raylake's own options, of which a Paimon table has none."""
    assert main(["info", PK]) == 0
    options = json.loads(capsys.readouterr().out)["options"]
    assert options == {"bucket": "4", "merge-engine": "deduplicate", "rowkind.field": "op"}


@pytest.mark.ray
def test_read_lake_and_the_datasource(ray_cluster: Any) -> None:
    from raylake import LakeDatasource, read_lake

    ds = read_lake(PK, filter="x > 10", columns=["id", "x"])
    got = sorted(r["id"] for r in ds.take_all())
    assert got == _ids("pk_deduplicate", 5, lambda r: r["x"] > 10)
    source = LakeDatasource(APPEND, snapshot_id=2)
    rows = ray_cluster.data.read_datasource(source).take_all()
    assert sorted(r["id"] for r in rows) == _ids("append_partitioned", 2)
    assert source.estimate_inmemory_data_size() is not None


def test_torch_iterable_and_map_datasets() -> None:
    pytest.importorskip("torch")
    from raylake.train.torch_iterable import LakeIterableDataset
    from raylake.train.torch_map import LakeMapDataset

    iterable = LakeIterableDataset(PK, columns=["id", "x"], batch_size=8, shuffle=False)
    ids = sorted(int(i) for batch in iterable for i in batch["id"])
    assert ids == _ids("pk_deduplicate", 5)
    mapped = LakeMapDataset(PK, columns=["id", "x"], filter="id < 10")
    assert len(mapped) == len(_ids("pk_deduplicate", 5, lambda r: r["id"] < 10))
    assert sorted(int(mapped[i]["id"]) for i in range(len(mapped))) == _ids(
        "pk_deduplicate", 5, lambda r: r["id"] < 10
    )


def test_tf_dataset() -> None:
    pytest.importorskip("tensorflow")
    from raylake.train.tf import to_tf_dataset

    ds = to_tf_dataset(APPEND, columns=["id", "x"], batch_size=4, shuffle=False)
    ids = sorted(int(i) for batch in ds for i in batch["id"].numpy())
    assert ids == _ids("append_partitioned", 3)


def test_a_table_object_is_accepted_too() -> None:
    pytest.importorskip("torch")
    from raylake.train.torch_iterable import LakeIterableDataset

    tbl = raylake.open_table(PK)
    ds = LakeIterableDataset(tbl, columns=["id"], batch_size=64, shuffle=False, snapshot_id=1)
    assert sorted(int(i) for b in ds for i in b["id"]) == list(range(40))
    assert rows_by_key(tbl.to_arrow(snapshot_id=1), ["id"]) == rows_by_key(
        expected("pk_deduplicate", 1), ["id"]
    )


@pytest.mark.ray
def test_read_lake_stream(ray_cluster: Any, paimon_copy: Any) -> None:
    from raylake.streaming.ray_source import read_lake_stream

    table = paimon_copy("pk_changelog_input")
    stream = read_lake_stream(
        str(table), consumer_id="ray", start="earliest", include_row_kind=True
    )
    datasets = list(stream.datasets(timeout=0))
    kinds = [sorted(r["_rl_kind"] for r in ds.take_all()) for ds in datasets]
    assert kinds == [["+I"] * 8, ["+U"] * 6, ["-D"] * 2]
    stream.checkpoint()
    assert json.loads((table / "consumer" / "consumer-ray").read_text()) == {"nextSnapshot": 4}


def test_continual_training_on_a_paimon_table(paimon_copy: Any) -> None:
    pytest.importorskip("torch")
    from raylake.train.torch_stream import LakeStreamDataset

    table = paimon_copy("pk_changelog_input")
    ds = LakeStreamDataset(
        str(table),
        columns=["id", "x"],
        start="earliest",
        batch_size=4,
        shuffle=False,
        until_snapshot=3,
        idle_timeout=0,
    )
    ids = sorted(int(i) for batch in ds for i in batch["id"])
    assert ids == sorted([*range(8), *range(4, 10)])  # the first state, then the upserts


def test_cli_lists_paimon_consumers(capsys: pytest.CaptureFixture[str], paimon_copy: Any) -> None:
    table = paimon_copy("pk_deduplicate")
    reader = raylake.open_table(str(table)).stream(consumer_id="etl", start=3)
    reader.checkpoint()
    assert main(["consumers", str(table)]) == 0
    assert any(line.split()[:2] == ["etl", "3"] for line in capsys.readouterr().out.splitlines())


def test_the_package_names_the_format_as_its_source_does(tmp_path: Any) -> None:
    from raylake.paimon import FORMAT, is_paimon_table

    paimon = raylake.open_table(PK)
    own = raylake.create_table(str(tmp_path / "own"), pa.schema([("id", pa.int64())]))
    assert FORMAT == paimon.format == "paimon"
    assert is_paimon_table(paimon.file_io) and not is_paimon_table(own.file_io)
