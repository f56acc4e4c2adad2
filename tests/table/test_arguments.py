"""Wrong argument types and values fail at the call, naming the argument (issue 11)."""

from __future__ import annotations

import inspect
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import raylake
from raylake.errors import (
    InvalidArgumentError,
    InvalidOptionError,
    SchemaError,
    SnapshotNotFoundError,
    UnknownKeywordError,
    UnsupportedOperationError,
)
from raylake.table import table_exists
from raylake.table.table_reads import ScanArgs

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


@pytest.fixture
def tbl(warehouse: Path) -> raylake.Table:
    t = raylake.create_table(str(warehouse / "t"), SCHEMA)
    t.write(pa.table({"id": [1, 2], "v": ["a", "b"]}, schema=SCHEMA))
    return t


@pytest.mark.parametrize("bad", ["1", 0, -3, True, 1.0, [1]])
def test_snapshot_id(tbl: raylake.Table, bad: Any) -> None:
    for call in (
        lambda: tbl.to_arrow(snapshot_id=bad),
        lambda: tbl.count(snapshot_id=bad),
        lambda: tbl.scan(snapshot_id=bad),
        lambda: tbl.snapshot(bad),
    ):
        with pytest.raises(InvalidArgumentError, match=r"snapshot_id must be a snapshot id"):
            call()


def test_numpy_integers_are_snapshot_ids(tbl: raylake.Table) -> None:
    """An id read from a DataFrame or an array of ids (np.int64) was refused as not an
    int by time travel, changes(), reset_consumer and expire_snapshots."""
    tbl.write(pa.table({"id": [3], "v": ["c"]}, schema=SCHEMA))
    one, two = np.array([s.id for s in tbl.snapshots()])
    assert tbl.to_arrow(snapshot_id=one).num_rows == 2 and tbl.count(snapshot_id=two) == 3
    assert tbl.snapshot(two).id == 2 and len(tbl.schema_at(np.int32(1))) == 2
    assert tbl.scan().at(one).to_arrow().num_rows == 2
    millis = np.int64(tbl.snapshot(1).time_millis)
    assert tbl.to_arrow(as_of=millis).num_rows == 2
    assert tbl.changes(one, two).to_arrow().column("id").to_pylist() == [3]
    assert tbl.changes(np.int64(0), np.uint8(1)).to_arrow().num_rows == 2
    progress = tbl.reset_consumer("c", two)
    assert type(progress.next_snapshot_id) is int
    assert tbl.consumer("c").next_snapshot_id == 2  # written to JSON and read back
    tbl.delete_consumer("c")  # it would keep snapshot 1
    tbl.expire_snapshots(retain_last=np.int64(1))
    assert [s.id for s in tbl.snapshots()] == [2]
    for bad in (np.float64(1.0), np.bool_(True), np.int64(0)):
        with pytest.raises(InvalidArgumentError, match="snapshot_id must be"):
            tbl.to_arrow(snapshot_id=bad)


def _commit(tbl: raylake.Table, **keywords: Any) -> Any:
    writer = tbl.new_writer()
    writer.write(pa.table({"id": [3], "v": ["c"]}, schema=SCHEMA))
    snap = tbl.commit(writer.prepare_commit(), **keywords)
    return raylake.open_table(tbl.uri).snapshot(snap.id)  # written to JSON and read back


def _retry(tbl: raylake.Table) -> Any:
    retry = {"max_attempts": np.int64(3), "backoff_s": np.float32(0.5), "max_backoff_s": 1}
    policy = raylake.open_table(tbl.uri, storage_options={"raylake_retry": retry}).file_io
    return policy.retry_policy.max_attempts, policy.retry_policy.backoff_s


_LATER = np.int64(4_102_444_800_000)  # 2100-01-01 in epoch milliseconds
NUMPY_CASES: dict[str, tuple[Any, Any]] = {
    "commit base_snapshot_id": (lambda t: _commit(t, base_snapshot_id=np.int64(1)).id, 2),
    "commit commit_identifier": (
        lambda t: _commit(t, commit_identifier=np.int64(7)).commit_identifier,
        7,
    ),
    "expire_snapshots older_than": (
        lambda t: t.expire_snapshots(older_than=_LATER, dry_run=True).expired_snapshot_ids,
        (),
    ),
    "expire_snapshots consumers_older_than": (
        lambda t: t.expire_snapshots(consumers_older_than=_LATER, dry_run=True).dry_run,
        True,
    ),
    "remove_orphan_files older_than": (
        lambda t: t.remove_orphan_files(older_than=np.int64(1_700_000_000_000)).dry_run,
        False,
    ),
    "raylake_retry": (_retry, (3, 0.5)),
}


@pytest.mark.parametrize("case", NUMPY_CASES)
def test_numpy_numbers_of_commits_maintenance_and_stores(tbl: raylake.Table, case: str) -> None:
    """A commit's base_snapshot_id and commit_identifier, an age's epoch milliseconds and
    a store's retry settings were refused as numpy numbers; kept as Python ones."""
    call, expected = NUMPY_CASES[case]
    got = call(tbl)
    assert got == expected
    assert all(type(v) in (int, float, bool) for v in (got if isinstance(got, tuple) else [got]))


def test_a_numpy_integer_bucket_count(warehouse: Path) -> None:
    """buckets=np.int64(4) (a config read with numpy) was refused as not an int."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    tbl = raylake.create_table(
        str(warehouse / "b"), schema, primary_key=["id"], buckets=np.int64(4)
    )
    assert tbl.table_schema.buckets == 4 and type(tbl.table_schema.buckets) is int
    assert raylake.open_table(str(warehouse / "b")).table_schema.buckets == 4
    with pytest.raises(SchemaError, match="buckets must be"):
        raylake.create_table(str(warehouse / "c"), schema, primary_key=["id"], buckets=np.int8(0))


def test_a_string_snapshot_id_never_blames_the_metadata(tbl: raylake.Table) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        tbl.to_arrow(snapshot_id="1")  # type: ignore[arg-type]
    assert "corrupt" not in str(info.value) and "got str '1'" in str(info.value)
    assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize("bad", ["2024-01-01", True, -1, date(2024, 1, 1), 1.5])
def test_as_of(tbl: raylake.Table, bad: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="as_of must be a datetime, epoch milliseconds"):
        tbl.to_arrow(as_of=bad)


def test_a_naive_time_python_cannot_read_as_local_is_refused_naming_it(
    tbl: raylake.Table,
) -> None:
    """Python's astimezone() of a naive time in datetime's first day fails in any zone
    (its last day's in zones east of UTC): it was a ValueError, "year 0 is out of
    range", naming nothing."""
    naive = datetime(1, 1, 1)
    with pytest.raises(InvalidArgumentError, match="as_of must be a time Python can read"):
        tbl.to_arrow(as_of=naive)
    with pytest.raises(InvalidArgumentError, match="end must be a time Python can read"):
        tbl.changes(start=1, end=naive)
    for name in ("older_than", "consumers_older_than"):
        with pytest.raises(InvalidOptionError, match=f"invalid option {name}=.*local time zone"):
            tbl.expire_snapshots(**{name: naive}, dry_run=True)
    with pytest.raises(InvalidOptionError, match=r"invalid option older_than=.*local time zone"):
        tbl.remove_orphan_files(older_than=naive, dry_run=True)
    # A stream's start reads as time travel does, and is named as itself (was as_of).
    with pytest.raises(InvalidArgumentError, match="start must be a time Python can read"):
        tbl.stream(start=naive)
    with pytest.raises(SnapshotNotFoundError, match="no snapshot at or before 0001-01-01"):
        tbl.to_arrow(as_of=naive.replace(tzinfo=timezone.utc))  # the fix it names


def test_columns(tbl: raylake.Table) -> None:
    with pytest.raises(
        InvalidArgumentError, match=r"a list of column names \(for one column: \['id'\]\)"
    ):
        tbl.to_arrow(columns="id")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="columns must be a list of column names"):
        tbl.to_arrow(columns=[1])  # type: ignore[list-item]
    with pytest.raises(InvalidArgumentError, match="columns must be"):
        tbl.to_arrow(columns=5)  # type: ignore[arg-type]
    assert tbl.to_arrow(columns=("id",)).column_names == ["id"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"buckets": "4"}, "buckets must be an int >= 1 or None, got str '4'"),
        ({"buckets": 2.5}, "buckets must be an int"),
        ({"buckets": True}, "buckets must be an int"),
        ({"buckets": 0}, "buckets must be an int >= 1 or None, got int 0"),
        ({"options": ["a"]}, "options must be a mapping"),
        ({"options": {1: "x"}}, "options must be a mapping"),
        ({"partition_by": [1]}, "partition_by must be a list of column names"),
        ({"primary_key": "id"}, r"primary_key must be a list of column names \(for one column"),
    ],
)
def test_create_table_arguments(warehouse: Path, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(SchemaError, match=message) as info:  # what callers caught before
        raylake.create_table(str(warehouse / "bad"), SCHEMA, **kwargs)
    assert isinstance(info.value, InvalidArgumentError)
    assert not (warehouse / "bad").exists()  # nothing written


def test_uri(warehouse: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="uri must be a non-empty path or URL string"):
        raylake.open_table(123)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="uri must be"):
        raylake.create_table("", SCHEMA)
    created = raylake.create_table(warehouse / "as-path", SCHEMA)  # type: ignore[arg-type]
    assert raylake.open_table(warehouse / "as-path").uri == created.uri  # type: ignore[arg-type]


@pytest.mark.parametrize("uri", ["s3://", "s3:///x", "gs://", "S3A://", "abfs:///c"])
def test_a_url_naming_no_bucket_is_refused_before_any_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, uri: str
) -> None:
    """ "s3://" was the local path "s3:" ("no raylake table at '/cwd/s3:'"), and
    create_table made a table there."""
    monkeypatch.chdir(tmp_path)
    for call in (
        lambda: raylake.open_table(uri),
        lambda: table_exists(uri),
        lambda: raylake.create_table(uri, SCHEMA),
    ):
        with pytest.raises(InvalidArgumentError, match=r"uri must be a URL naming its bucket"):
            call()
    assert list(tmp_path.iterdir()) == []


def test_bad_write_mode_commits_nothing(tbl: raylake.Table) -> None:
    def files() -> list[Path]:
        return sorted((Path(tbl.uri) / "data").rglob("*.parquet"))

    before, snapshots = files(), len(tbl.snapshots())
    with pytest.raises(UnsupportedOperationError, match="mode 'upsert' is not supported"):
        tbl.write(pa.table({"id": [3], "v": ["c"]}, schema=SCHEMA), mode="upsert")
    assert len(tbl.snapshots()) == snapshots and files() == before


READS = ["scan", "to_arrow", "to_pandas", "to_batches", "to_arrow_reader", "to_polars"]
SCAN_KEYWORDS = ["columns", "filter", "snapshot_id", "as_of"]


def _keywords(method: Any) -> dict[str, Any]:
    params = inspect.signature(method).parameters.values()
    return {p.name: p.default for p in params if p.kind is p.KEYWORD_ONLY}


@pytest.mark.parametrize("name", [*READS, "to_duckdb"])
def test_read_methods_show_the_scan_keywords(tbl: raylake.Table, name: str) -> None:
    # help() and editors that read signatures at run time list them, not a bare **scan.
    method = getattr(tbl, name)
    pandas = {"types_mapper": None} if name == "to_pandas" else {}
    assert _keywords(method) == {**pandas, **dict.fromkeys(SCAN_KEYWORDS)}
    assert list(ScanArgs.__annotations__) == SCAN_KEYWORDS
    params = inspect.signature(method).parameters.values()
    positional = [p.name for p in params if p.kind is not p.KEYWORD_ONLY]
    assert positional == (["name", "connection"] if name == "to_duckdb" else [])


@pytest.mark.parametrize("name", [*READS, "to_duckdb"])
def test_a_misspelled_read_keyword_is_a_type_error(tbl: raylake.Table, name: str) -> None:
    args = ("view",) if name == "to_duckdb" else ()
    with pytest.raises(UnknownKeywordError, match="'colums'; did you mean 'columns'") as info:
        getattr(tbl, name)(*args, colums=["id"])
    assert isinstance(info.value, TypeError) and info.value.closest == "columns"
    with pytest.raises(TypeError, match="positional argument"):
        getattr(tbl, name)(*args, None, ["id"])
