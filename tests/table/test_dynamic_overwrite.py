"""Dynamic partition overwrites (Spark's ``partitionOverwriteMode=dynamic``): an overwrite
replaces only the partitions its data has rows in, through every Python entry point.
The model test of append tables (tests/table/test_append_model.py) drives them at random;
these pin the edges: several partition keys, nulls, no rows, conflicts, primary keys."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import raylake
from raylake.cli import main
from raylake.errors import CommitConflictError, InvalidArgumentError, UnsupportedOperationError
from raylake.table import CommitMessage, Table

SCHEMA = pa.schema([("id", pa.int64()), ("dt", pa.string()), ("region", pa.string())])


def rows(ids: list[int], dt: str | None, region: str | None = "eu") -> pa.Table:
    n = len(ids)
    return pa.table({"id": ids, "dt": [dt] * n, "region": [region] * n}, schema=SCHEMA)


def by_partition(tbl: Table, snapshot_id: int | None = None) -> dict[tuple[object, ...], list[int]]:
    out: dict[tuple[object, ...], list[int]] = {}
    for r in tbl.to_arrow(snapshot_id=snapshot_id).to_pylist():
        out.setdefault((r["dt"], r["region"]), []).append(r["id"])
    return {k: sorted(v) for k, v in out.items()}


def prepare(tbl: Table, data: pa.Table) -> list[CommitMessage]:
    writer = tbl.new_writer()
    writer.write(data)
    return writer.prepare_commit()


@pytest.fixture
def tbl(tmp_path: Path) -> Table:
    t = raylake.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["dt", "region"])
    t.write(
        pa.concat_tables(
            [rows([1, 2], "d1"), rows([3], "d1", "us"), rows([4], "d2"), rows([5], None, None)]
        )
    )
    return t


def test_only_the_partitions_written_are_replaced(tbl: Table) -> None:
    snap = tbl.write(
        pa.concat_tables([rows([10], "d1"), rows([11], "d3", "us")]),
        mode="overwrite",
        partition_overwrite_mode="dynamic",
    )
    assert snap is not None and snap.commit_kind == "OVERWRITE"
    assert by_partition(tbl) == {
        ("d1", "eu"): [10],  # replaced: same dt and region
        ("d1", "us"): [3],  # kept: same dt, another region
        ("d2", "eu"): [4],
        ("d3", "us"): [11],  # new
        (None, None): [5],
    }
    assert by_partition(tbl, snapshot_id=1)[("d1", "eu")] == [1, 2]  # time travel


def test_a_null_partition_is_replaced_only_by_null_values(tbl: Table) -> None:
    tbl.write(rows([20], None, None), mode="overwrite", partition_overwrite_mode="dynamic")
    assert by_partition(tbl)[(None, None)] == [20]
    tbl.write(rows([21], None, "eu"), mode="overwrite", partition_overwrite_mode="dynamic")
    assert by_partition(tbl)[(None, None)] == [20] and by_partition(tbl)[(None, "eu")] == [21]
    assert by_partition(tbl)[("d1", "eu")] == [1, 2]


def test_no_rows_replace_nothing_and_commit_nothing(tbl: Table) -> None:
    latest = tbl.latest_snapshot()
    snap = tbl.write(rows([], "d1"), mode="overwrite", partition_overwrite_mode="DYNAMIC")
    assert snap == latest and len(tbl.snapshots()) == 1
    assert tbl.commit([], mode="overwrite", partition_overwrite_mode="dynamic") == latest


def test_an_unpartitioned_table_is_replaced_whole_as_spark_does(tmp_path: Path) -> None:
    t = raylake.create_table(str(tmp_path / "flat"), SCHEMA)
    t.write(rows([1, 2], "d1"))
    t.write(rows([3], "d2"), mode="overwrite", partition_overwrite_mode="dynamic")
    assert t.to_arrow().column("id").to_pylist() == [3]
    snap = t.write(rows([], "d2"), mode="overwrite", partition_overwrite_mode="dynamic")
    assert snap is not None and snap.id == 3 and t.count() == 0  # static: an empty overwrite


def test_commit_of_several_writers_replaces_what_any_of_them_wrote(tbl: Table) -> None:
    messages = prepare(tbl, rows([30], "d2")) + prepare(tbl, rows([31], None, None))
    snap = tbl.commit(messages, mode="overwrite", partition_overwrite_mode="dynamic")
    assert snap is not None and snap.id == 2
    assert by_partition(tbl) == {
        ("d1", "eu"): [1, 2],
        ("d1", "us"): [3],
        ("d2", "eu"): [30],
        (None, None): [31],
    }


def test_a_concurrent_change_to_a_written_partition_conflicts(tbl: Table) -> None:
    messages = prepare(tbl, rows([40], "d2"))
    tbl.write(rows([41], "d2"))  # lands first, in the partition the overwrite replaces
    with pytest.raises(CommitConflictError, match="written partition") as info:
        tbl.commit(
            messages, mode="overwrite", partition_overwrite_mode="dynamic", base_snapshot_id=1
        )
    assert info.value.actual == 2 and "nothing was committed" in str(info.value)
    assert by_partition(tbl)[("d2", "eu")] == [4, 41]
    on_disk = {rel for rel, _ in tbl.file_io.list_files("data") if rel.endswith(".parquet")}
    assert on_disk == {p for split in tbl.scan().plan() for p in split.paths}


def test_a_concurrent_change_to_another_partition_is_kept(tbl: Table) -> None:
    messages = prepare(tbl, rows([50], "d2"))
    tbl.write(rows([51], "d1"))
    snap = tbl.commit(
        messages, mode="overwrite", partition_overwrite_mode="dynamic", base_snapshot_id=1
    )
    assert snap is not None and snap.id == 3
    assert by_partition(tbl)[("d1", "eu")] == [1, 2, 51]
    assert by_partition(tbl)[("d2", "eu")] == [50]


def test_changes_show_the_replaced_partitions_rows_only(tbl: Table) -> None:
    tbl.write(rows([60], "d1"), mode="overwrite", partition_overwrite_mode="dynamic")
    changed = tbl.changes(1, include_row_kind=True).to_arrow().to_pylist()
    assert sorted((r["_rl_kind"], r["id"]) for r in changed) == [
        ("+I", 60),
        ("-D", 1),
        ("-D", 2),
    ]


def test_a_primary_key_table_replaces_the_written_partitions(tmp_path: Path) -> None:
    t = raylake.create_table(
        str(tmp_path / "pk"), SCHEMA, partition_by=["dt"], primary_key=["dt", "id"], buckets=2
    )
    t.write(pa.concat_tables([rows([1, 2, 3], "d1"), rows([1, 4], "d2")]))
    t.write(rows([2], "d1"), mode="overwrite", partition_overwrite_mode="dynamic")
    got = sorted((r["dt"], r["id"]) for r in t.to_arrow().to_pylist())
    assert got == [("d1", 2), ("d2", 1), ("d2", 4)]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"mode": "append"}, UnsupportedOperationError, "only to mode='overwrite'"),
        (
            {"mode": "append", "partition_overwrite_mode": "DYNAMIC"},
            UnsupportedOperationError,
            "only to mode='overwrite'",
        ),
        ({"overwrite_filter": "dt = 'd1'"}, UnsupportedOperationError, "give one of them"),
        ({"partition_overwrite_mode": "partial"}, InvalidArgumentError, "'static', 'dynamic'"),
    ],
)
def test_wrong_arguments_are_refused_before_anything_is_written(
    tbl: Table, kwargs: dict[str, str], error: type[Exception], match: str
) -> None:
    args = {"mode": "overwrite", "partition_overwrite_mode": "dynamic", **kwargs}
    files = set(tbl.file_io.list_files("data"))
    with pytest.raises(error, match=match):
        tbl.write(rows([70], "d1"), **args)  # type: ignore[arg-type]
    assert set(tbl.file_io.list_files("data")) == files and len(tbl.snapshots()) == 1


def test_the_command_line_replaces_the_partitions_of_the_files(
    tbl: Table, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import pyarrow.parquet as pq

    pq.write_table(rows([80, 81, 82], "d1"), tmp_path / "d1.parquet")
    argv = ["write", tbl.uri, str(tmp_path / "d1.parquet"), "--mode", "overwrite"]
    assert main([*argv, "--partition-overwrite-mode", "dynamic"]) == 0
    out = capsys.readouterr().out
    assert out == "wrote 3 row(s) from 1 file(s): snapshot 2 (replaced 2 row(s))\n"
    assert by_partition(tbl)[("d1", "eu")] == [80, 81, 82] and tbl.count() == 6


def test_from_pandas_replaces_the_partitions_the_dataframe_has_rows_in(
    tbl: Table, tmp_path: Path
) -> None:
    """from_pandas took no partition_overwrite_mode (an unknown keyword), though Table.write,
    write_lake and raylake.spark.write take it: mode='overwrite' replaced the whole table."""
    df = rows([90], "d1").to_pandas()
    raylake.from_pandas(df, tbl.uri, mode="overwrite", partition_overwrite_mode="dynamic")
    assert by_partition(tbl) == {
        ("d1", "eu"): [90],
        ("d1", "us"): [3],
        ("d2", "eu"): [4],
        (None, None): [5],
    }
    for mode in ("append", "error"):  # refused before anything is written or created
        with pytest.raises(UnsupportedOperationError, match="only to mode='overwrite'"):
            raylake.from_pandas(
                df, str(tmp_path / "new"), mode=mode, partition_overwrite_mode="dynamic"
            )
    assert not (tmp_path / "new").exists() and len(tbl.snapshots()) == 2
    with pytest.raises(InvalidArgumentError, match="partition_overwrite_mode must be one of"):
        raylake.from_pandas(df, tbl.uri, mode="overwrite", partition_overwrite_mode="partial")  # type: ignore[arg-type]
    new = raylake.from_pandas(
        df, str(tmp_path / "new"), partition_by=["dt"], mode="overwrite",
        partition_overwrite_mode="dynamic",
    )  # fmt: skip
    assert new.to_arrow().column("id").to_pylist() == [90]


def test_the_command_line_names_its_flags_when_dynamic_lacks_mode_overwrite(
    tbl: Table, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It said "partition_overwrite_mode='dynamic' applies only to mode='overwrite'", the
    library's keywords, to a shell user who typed flags."""
    import pyarrow.parquet as pq

    pq.write_table(rows([90], "d1"), tmp_path / "d1.parquet")
    new = str(tmp_path / "new")
    for uri, more in ((tbl.uri, []), (new, ["--create", "--partition-by", "dt"])):
        argv = ["write", uri, str(tmp_path / "d1.parquet"), *more]
        assert main([*argv, "--partition-overwrite-mode", "dynamic"]) == 2
        err = capsys.readouterr().err
        assert "--partition-overwrite-mode must be static unless --mode overwrite" in err
    assert tbl.count() == 5 and not (tmp_path / "new").exists()
