"""Commits of append tables: overwrites, conflicts, idempotent retries, manifest merging."""

from __future__ import annotations

import pickle
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import raylake
from raylake import col
from raylake.errors import (
    CommitConflictError,
    CommitFailedError,
    FilterError,
    RaylakeError,
    UnknownColumnError,
    UnsupportedOperationError,
)
from raylake.table import CommitMessage, Table

SCHEMA = pa.schema([("id", pa.int64()), ("dt", pa.string()), ("x", pa.float64())])
DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]


def rows(start: int, count: int, dt: str | None = "2024-01-01") -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table({"id": ids, "dt": [dt] * count, "x": [i / 2 for i in ids]}, schema=SCHEMA)


def ids(tbl: Table, **kwargs: object) -> list[int]:
    return sorted(tbl.to_arrow(**kwargs).column("id").to_pylist())  # type: ignore[arg-type]


def per_day(tbl: Table) -> dict[str | None, int]:
    counts = tbl.to_arrow(columns=["dt"]).group_by("dt").aggregate([([], "count_all")])
    return {r["dt"]: r["count_all"] for r in counts.to_pylist()}


def data_files_on_disk(tbl: Table) -> set[str]:
    return {rel for rel, _ in tbl.file_io.list_files("data") if rel.endswith(".parquet")}


def live_data_files(tbl: Table) -> set[str]:
    return {p for split in tbl.scan().plan() for p in split.paths}


def prepare(tbl: Table, data: pa.Table) -> list[CommitMessage]:
    writer = tbl.new_writer()
    writer.write(data)
    return writer.prepare_commit()


@pytest.fixture
def tbl(tmp_path: Path) -> Table:
    t = raylake.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["dt"])
    for i, day in enumerate(DAYS):
        t.write(rows(i * 100, 10, day))
    return t


# -- overwrite ----------------------------------------------------------------------------


def test_overwrite_the_whole_table(tbl: Table) -> None:
    snap = tbl.write(rows(900, 3, "2024-02-01"), mode="overwrite")
    assert snap.commit_kind == "OVERWRITE"
    assert ids(tbl) == [900, 901, 902]
    assert snap.total_record_count == 3 and snap.delta_record_count == 3 - 30
    assert tbl.count(snapshot_id=3) == 30


def test_overwrite_with_nothing_truncates(tbl: Table) -> None:
    tbl.write(rows(0, 0), mode="overwrite")
    assert tbl.count() == 0
    assert tbl.latest_snapshot().total_record_count == 0  # type: ignore[union-attr]


def test_overwrite_one_partition(tbl: Table) -> None:
    tbl.write(rows(500, 4, "2024-01-02"), mode="overwrite", overwrite_filter="dt = '2024-01-02'")
    assert per_day(tbl) == {"2024-01-01": 10, "2024-01-02": 4, "2024-01-03": 10}
    assert ids(tbl, filter="dt = '2024-01-02'") == [500, 501, 502, 503]


def test_overwrite_several_partitions_with_an_expression(tbl: Table) -> None:
    data = pa.concat_tables([rows(500, 2, "2024-01-01"), rows(600, 1, "2024-01-09")])
    condition = col("dt").isin(["2024-01-01", "2024-01-09"]) | (col("dt") == "2024-01-03")
    tbl.write(data, mode="overwrite", overwrite_filter=condition)
    assert per_day(tbl) == {"2024-01-01": 2, "2024-01-02": 10, "2024-01-09": 1}


def test_overwrite_the_null_partition(tbl: Table) -> None:
    tbl.write(rows(700, 3, None))
    tbl.write(rows(800, 1, None), mode="overwrite", overwrite_filter="dt is null")
    assert per_day(tbl) == {"2024-01-01": 10, "2024-01-02": 10, "2024-01-03": 10, None: 1}


def test_overwrite_rejects_rows_outside_the_filter(tbl: Table) -> None:
    data = pa.concat_tables([rows(500, 2, "2024-01-02"), rows(600, 1, "2024-01-03")])
    with pytest.raises(UnsupportedOperationError, match="2024-01-03") as info:
        tbl.write(data, mode="overwrite", overwrite_filter="dt = '2024-01-02'")
    assert "nothing was committed" in str(info.value)
    assert tbl.latest_snapshot().id == 3  # type: ignore[union-attr]
    assert data_files_on_disk(tbl) == live_data_files(tbl)


@pytest.mark.parametrize(
    ("condition", "error", "message"),
    [
        ("x > 1", FilterError, r"may only name partition columns \['dt'\]; it names \['x'\]"),
        ("dt = '2024-01-01' and id = 3", FilterError, r"it names \['id'\]"),
        ("nope = 1", FilterError, r"it names \['nope'\]"),
        ("dt = ", FilterError, "position"),
    ],
)
def test_overwrite_filter_on_non_partition_columns(
    tbl: Table, condition: str, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        tbl.write(rows(500, 1), mode="overwrite", overwrite_filter=condition)
    assert tbl.latest_snapshot().id == 3  # type: ignore[union-attr]
    assert data_files_on_disk(tbl) == live_data_files(tbl)


def test_overwrite_filter_on_an_unpartitioned_table(tmp_path: Path) -> None:
    t = raylake.create_table(str(tmp_path), SCHEMA)
    t.write(rows(0, 3))
    with pytest.raises(FilterError, match=r"partition columns \[\]"):
        t.write(rows(5, 1), mode="overwrite", overwrite_filter="dt = '2024-01-01'")
    t.write(rows(5, 1), mode="overwrite")
    assert ids(t) == [5]


def test_commit_overwrite_filter_errors_keep_the_files_for_the_corrected_commit(
    tbl: Table,
) -> None:
    """A bad overwrite filter is an argument error: nothing is committed or deleted, and
    the same messages commit once the call is corrected (docs/decisions.md)."""
    messages = prepare(tbl, rows(500, 2))
    written = data_files_on_disk(tbl) - live_data_files(tbl)
    assert written
    for kwargs, error in [
        ({"overwrite_filter": "dt = 'a'"}, UnsupportedOperationError),  # mode append
        ({"mode": "overwrite", "overwrite_filter": "id = 1"}, FilterError),
        ({"mode": "overwrite", "overwrite_filter": "dt = ("}, FilterError),
        # the rows lie in 2024-01-01: replacing another day would add them outside it
        ({"mode": "overwrite", "overwrite_filter": "dt = '2024-01-02'"}, UnsupportedOperationError),
    ]:
        with pytest.raises(error):
            tbl.commit(messages, **kwargs)  # type: ignore[arg-type]
        assert tbl.latest_snapshot().id == 3  # type: ignore[union-attr]
        assert data_files_on_disk(tbl) - live_data_files(tbl) == written
    tbl.commit(messages)
    assert data_files_on_disk(tbl) == live_data_files(tbl)
    assert tbl.latest_snapshot().id == 4  # type: ignore[union-attr]


# -- conflicts ----------------------------------------------------------------------------


def test_overwrite_racing_a_conflicting_commit_fails(tbl: Table) -> None:
    base = tbl.latest_snapshot().id  # type: ignore[union-attr]
    messages = prepare(tbl, rows(500, 5, "2024-01-02"))
    tbl.write(rows(600, 1, "2024-01-02"))  # a concurrent writer lands first, same partition
    with pytest.raises(CommitConflictError) as info:
        tbl.commit(
            messages,
            mode="overwrite",
            overwrite_filter="dt = '2024-01-02'",
            base_snapshot_id=base,
        )
    err = info.value
    assert err.expected == 3 and err.actual == 4
    assert "snapshot 4" in str(err) and "nothing was committed" in str(err)
    assert tbl.latest_snapshot().id == 4  # type: ignore[union-attr]
    assert ids(tbl, filter="dt = '2024-01-02'") == [*range(100, 110), 600]
    assert data_files_on_disk(tbl) == live_data_files(tbl)  # the loser's files are deleted


def test_overwrite_racing_a_commit_in_another_partition_succeeds(tbl: Table) -> None:
    messages = prepare(tbl, rows(500, 5, "2024-01-02"))
    tbl.write(rows(600, 2, "2024-01-03"))  # concurrent, but another partition
    snap = tbl.commit(
        messages, mode="overwrite", overwrite_filter="dt = '2024-01-02'", base_snapshot_id=3
    )
    assert snap.id == 5
    assert per_day(tbl) == {"2024-01-01": 10, "2024-01-02": 5, "2024-01-03": 12}


def test_whole_table_overwrite_conflicts_with_any_concurrent_change(tbl: Table) -> None:
    messages = prepare(tbl, rows(500, 1))
    tbl.write(rows(600, 1, "2024-01-09"))
    with pytest.raises(CommitConflictError):
        tbl.commit(messages, mode="overwrite", base_snapshot_id=3)
    assert tbl.count() == 31


def test_an_empty_concurrent_commit_does_not_conflict(tbl: Table) -> None:
    messages = prepare(tbl, rows(500, 1))
    tbl.write(rows(0, 0))
    tbl.commit(messages, mode="overwrite", base_snapshot_id=3)
    assert ids(tbl) == [500]


def test_appends_never_conflict(tbl: Table) -> None:
    messages = prepare(tbl, rows(500, 2, "2024-01-02"))
    tbl.write(rows(600, 1, "2024-01-02"), mode="overwrite", overwrite_filter="dt = '2024-01-02'")
    snap = tbl.commit(messages, base_snapshot_id=1)
    assert snap.commit_kind == "APPEND"
    assert ids(tbl, filter="dt = '2024-01-02'") == [500, 501, 600]


def test_overwrite_without_a_base_uses_the_latest_snapshot(tbl: Table) -> None:
    """tbl.commit(mode="overwrite") with no base must not conflict with old history."""
    messages = prepare(tbl, rows(500, 2, "2024-01-01"))
    snap = tbl.commit(messages, mode="overwrite", overwrite_filter="dt = '2024-01-01'")
    assert snap.commit_kind == "OVERWRITE"
    assert per_day(tbl) == {"2024-01-01": 2, "2024-01-02": 10, "2024-01-03": 10}


def test_commit_of_several_writers_is_one_snapshot(tbl: Table) -> None:
    messages = [m for i in range(3) for m in prepare(tbl, rows(1000 + i * 10, 10, DAYS[i]))]
    snap = tbl.commit(messages)
    assert snap.id == 4 and snap.delta_record_count == 30
    assert tbl.count() == 60 and tbl.count(snapshot_id=3) == 30


def test_a_writer_can_stream_many_chunks(tbl: Table) -> None:
    writer = tbl.new_writer()
    for i in range(5):
        writer.write(rows(1000 + i * 10, 10, DAYS[i % 3]).to_pandas())
    assert sorted(p[0] for p in writer.partitions()) == DAYS
    snap = tbl.commit(writer.prepare_commit())
    assert snap.delta_record_count == 50


@pytest.mark.parametrize("primary_key", [False, True])
def test_a_writer_hands_its_files_out_once(tmp_path: Path, primary_key: bool) -> None:
    """A write after prepare_commit was taken, and the next prepare_commit handed out the
    committed files again: committing its messages read every earlier row twice."""
    key = ["id", "dt"] if primary_key else []
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["dt"], primary_key=key)
    writer = tbl.new_writer()
    writer.write(rows(0, 3))
    tbl.commit(writer.prepare_commit())
    for again in (lambda: writer.write(rows(3, 1)), writer.prepare_commit):
        with pytest.raises(UnsupportedOperationError, match="gave its commit messages already"):
            again()
    assert ids(tbl) == [0, 1, 2] and [s.id for s in tbl.snapshots()] == [1]


@pytest.mark.parametrize("primary_key", [False, True])
def test_abort_after_the_commit_keeps_the_committed_files(
    tmp_path: Path, primary_key: bool
) -> None:
    """An ``except`` that aborts the writer around a commit and later work deleted the
    committed files, and no read of the table worked again."""
    key = ["id", "dt"] if primary_key else []
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["dt"], primary_key=key)
    writer = tbl.new_writer()
    writer.write(rows(0, 3))
    tbl.commit(writer.prepare_commit())
    writer.abort()
    assert ids(raylake.open_table(tbl.uri)) == [0, 1, 2]


def test_an_aborted_writer_leaves_nothing(tbl: Table) -> None:
    writer = tbl.new_writer()
    writer.write(rows(1000, 10))
    messages = writer.prepare_commit()
    assert data_files_on_disk(tbl) > live_data_files(tbl)
    writer.abort()
    assert data_files_on_disk(tbl) == live_data_files(tbl)
    assert messages  # what it had produced is gone with it


def test_commit_retries_exhausted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = raylake.create_table(str(tmp_path), SCHEMA, options={"commit.max-retries": 2})
    messages = prepare(t, rows(0, 3))
    # Fault injection: every attempt loses the race for the snapshot file.
    monkeypatch.setattr(t.file_io, "create_if_absent", lambda rel, data, **kwargs: False)
    with pytest.raises(CommitFailedError, match="after 2 attempts") as info:
        t.commit(messages)
    monkeypatch.undo()
    assert isinstance(info.value, RaylakeError)
    assert t.latest_snapshot() is None
    assert data_files_on_disk(t) == set()
    assert t.file_io.list_names("manifest") == []


# -- idempotent commits -------------------------------------------------------------------


def test_idempotent_retry_returns_the_same_snapshot(tbl: Table) -> None:
    messages = prepare(tbl, rows(500, 5))
    first = tbl.commit(messages, commit_user="etl-job", commit_identifier=42)
    tbl.write(rows(600, 1))  # other commits land in between
    again = tbl.commit(messages, commit_user="etl-job", commit_identifier=42)
    assert again == first
    assert [s.id for s in tbl.snapshots()] == [1, 2, 3, 4, 5]
    assert tbl.count() == 36  # not committed twice
    assert data_files_on_disk(tbl) == live_data_files(tbl)
    stored = tbl.snapshot(first.id)
    assert (stored.commit_user, stored.commit_identifier) == ("etl-job", 42)


def test_messages_committed_already_are_refused(tbl: Table) -> None:
    """A second commit of the same messages named their files again: every row twice."""
    messages = prepare(tbl, rows(500, 5))
    first = tbl.commit(messages)
    snapshots = [s.id for s in tbl.snapshots()]
    copies = pickle.loads(pickle.dumps(messages))  # e.g. handed to another task after
    for again in (messages, copies, [*prepare(tbl, rows(700, 1)), *messages]):
        with pytest.raises(CommitFailedError, match=f"committed already, as snapshot {first.id}"):
            tbl.commit(again)
        assert [s.id for s in tbl.snapshots()] == snapshots
    assert tbl.count() == 35
    assert tbl.to_arrow(filter="id >= 500").column("id").to_pylist() == list(range(500, 505))


@pytest.mark.parametrize(
    ("first_name", "retry_name"),
    [((), ("job", 7)), (("job", 7), ("job", 8)), (("job", 7), ("other", 7)), (("job", 7), ())],
)
def test_messages_committed_already_are_refused_under_another_name(
    tbl: Table, first_name: tuple[str, int] | tuple[()], retry_name: tuple[str, int] | tuple[()]
) -> None:
    """A name given only at the retry does not make it one (was: a new commit_identifier
    committed the same files again, and every row was read twice)."""
    messages = prepare(tbl, rows(500, 5))
    name = dict(zip(("commit_user", "commit_identifier"), first_name))
    first = tbl.commit(messages, **name)
    retry = dict(zip(("commit_user", "commit_identifier"), retry_name))
    with pytest.raises(CommitFailedError, match=f"committed already, as snapshot {first.id}"):
        tbl.commit(messages, **retry)
    assert tbl.latest_snapshot() == first
    assert tbl.count() == 35


def test_a_retry_that_rewrote_its_data_deletes_the_new_files_at_once(tbl: Table) -> None:
    first = tbl.commit(prepare(tbl, rows(500, 5)), commit_user="etl-job", commit_identifier=9)
    rewritten = prepare(tbl, rows(500, 5))  # the retried task wrote its output again
    paths = {f.path for m in rewritten for f in m.new_files}
    assert paths and paths <= data_files_on_disk(tbl)
    again = tbl.commit(rewritten, commit_user="etl-job", commit_identifier=9)
    assert again == first and tbl.count() == 35
    assert not paths & data_files_on_disk(tbl)  # gone now, not at the next orphan sweep
    assert data_files_on_disk(tbl) == live_data_files(tbl)


@pytest.mark.parametrize("same_messages", [True, False])
def test_a_retry_whose_commit_was_expired_commits_nothing_again(
    tbl: Table, same_messages: bool
) -> None:
    """The commit is snapshot 4, whose answer the driver lost; later commits and an
    expiration remove it before the retry by name (was: the retry did not find it and
    committed the rows a second time). A retry that rewrote its data is not known by
    its files: it commits again, as before."""
    messages = prepare(tbl, rows(500, 5))
    first = tbl.commit(messages, base_snapshot_id=3, commit_user="etl-job", commit_identifier=1)
    assert first is not None and first.id == 4
    tbl.write(rows(600, 1))  # snapshot 5, with snapshot 4's files live
    assert tbl.expire_snapshots(retain_last=1).expired_snapshot_ids == (1, 2, 3, 4)
    retry = messages if same_messages else prepare(tbl, rows(500, 5))
    again = tbl.commit(retry, base_snapshot_id=3, commit_user="etl-job", commit_identifier=1)
    assert again is not None and again.id == (5 if same_messages else 6)
    assert tbl.count() == (36 if same_messages else 41)
    assert data_files_on_disk(tbl) == live_data_files(tbl)


def test_idempotence_is_per_user_and_identifier(tbl: Table) -> None:
    tbl.commit(prepare(tbl, rows(500, 1)), commit_user="a", commit_identifier=1)
    tbl.commit(prepare(tbl, rows(510, 1)), commit_user="b", commit_identifier=1)
    tbl.commit(prepare(tbl, rows(520, 1)), commit_user="a", commit_identifier=2)
    assert tbl.latest_snapshot().id == 6  # type: ignore[union-attr]
    assert tbl.count() == 33


def test_idempotent_overwrite_retry(tbl: Table) -> None:
    messages = prepare(tbl, rows(500, 1, "2024-01-01"))
    kwargs = {"mode": "overwrite", "overwrite_filter": "dt = '2024-01-01'"}
    first = tbl.commit(messages, commit_user="u", commit_identifier=7, base_snapshot_id=3, **kwargs)  # type: ignore[arg-type]
    again = tbl.commit(messages, commit_user="u", commit_identifier=7, base_snapshot_id=3, **kwargs)  # type: ignore[arg-type]
    assert again.id == first.id == 4
    assert per_day(tbl)["2024-01-01"] == 1


def test_a_named_commit_while_an_expiration_removes_what_it_looks_through(
    tbl: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit read the latest snapshot, then an expiration deletes the older ones
    before the commit reads them for its identifier (was: SnapshotNotFoundError, the
    commit refused and its files deleted)."""
    from raylake.format.snapshot import Snapshot, SnapshotManager

    read = SnapshotManager.read_if_present
    expired: list[int] = []

    def expiry_then_read(self: SnapshotManager, snapshot_id: int) -> Snapshot | None:
        if snapshot_id == 2 and not expired:  # below the latest, 3
            expired.append(0)  # the expiration reads snapshot 2 too
            again = raylake.open_table(tbl.uri)
            expired.extend(again.expire_snapshots(retain_last=1).expired_snapshot_ids)
        return read(self, snapshot_id)

    messages = prepare(tbl, rows(500, 2))
    monkeypatch.setattr(SnapshotManager, "read_if_present", expiry_then_read)
    snap = tbl.commit(messages, commit_user="sink", commit_identifier=5)
    assert expired == [0, 1, 2] and snap is not None and snap.id == 4
    assert tbl.count() == 32 and (snap.commit_user, snap.commit_identifier) == ("sink", 5)


def test_default_commit_identifiers_are_unique(tbl: Table) -> None:
    users = {s.commit_user for s in tbl.snapshots()}
    assert len(users) == 3  # one per write: a default user never matches an earlier commit
    assert [s.commit_identifier for s in tbl.snapshots()] == [1, 2, 3]


# -- empty appends and manifests ----------------------------------------------------------


def test_append_of_empty_data_commits_nothing(tbl: Table) -> None:
    before = tbl.to_arrow().sort_by("id")
    latest = tbl.latest_snapshot()
    for empty in (rows(0, 0), rows(0, 0).to_pandas(), [], pa.table({"id": [], "dt": [], "x": []})):
        assert tbl.write(empty) == latest  # a no-op that returns the current snapshot
    assert tbl.snapshots()[-1] == latest
    assert tbl.to_arrow().sort_by("id").equals(before)
    assert data_files_on_disk(tbl) == live_data_files(tbl)


def test_an_empty_commit_when_asked(tbl: Table) -> None:
    latest = tbl.latest_snapshot()
    assert latest is not None
    snap = tbl.write(rows(0, 0), allow_empty=True, properties={"marker": "1"})
    assert snap is not None and snap.id == latest.id + 1
    assert snap.commit_kind == "APPEND" and snap.delta_record_count == 0
    assert snap.total_record_count == latest.total_record_count


def test_empty_writes_to_a_new_table(tmp_path: Path) -> None:
    t = raylake.create_table(str(tmp_path / "new"), SCHEMA, partition_by=["dt"])
    assert t.write(rows(0, 0)) is None and t.snapshots() == []
    snap = t.write(rows(0, 0), mode="overwrite")  # an overwrite always commits
    assert snap is not None and snap.commit_kind == "OVERWRITE" and t.count() == 0


def test_an_empty_overwrite_empties_the_table(tbl: Table) -> None:
    snap = tbl.write(rows(0, 0), mode="overwrite")
    assert snap is not None and snap.commit_kind == "OVERWRITE" and tbl.count() == 0


def test_manifests_merge_after_many_commits(tmp_path: Path) -> None:
    t = raylake.create_table(
        str(tmp_path), SCHEMA, partition_by=["dt"], options={"manifest.merge-min-count": 4}
    )
    expected: list[pa.Table] = []
    for i in range(12):
        if i % 5 == 4:
            t.write(
                rows(i * 10, 3, DAYS[i % 3]),
                mode="overwrite",
                overwrite_filter=f"dt = '{DAYS[i % 3]}'",
            )
            expected = [e.filter(pc.field("dt") != DAYS[i % 3]) for e in expected]
        else:
            t.write(rows(i * 10, 3, DAYS[i % 3]))
        expected.append(rows(i * 10, 3, DAYS[i % 3]))
        snap = t.latest_snapshot()
        assert snap is not None and len(snap.base_manifests) < 4
        assert t.to_arrow().sort_by("id").equals(pa.concat_tables(expected).sort_by("id"))
    sizes = [len(s.base_manifests) for s in t.snapshots()]
    assert 1 in sizes[3:]  # merged at least once after the first few commits
    assert t.count(snapshot_id=2) == 6  # old snapshots keep their own manifests
    merged = t.latest_snapshot().base_manifests  # type: ignore[union-attr]
    assert sum(m.num_deleted for m in merged[:1]) == 0  # a merged manifest holds live ADDs only


def test_unknown_columns_in_a_committed_filter(tbl: Table) -> None:
    with pytest.raises(UnknownColumnError):
        tbl.scan(filter="missing > 1")


def test_each_snapshot_carries_the_last_identifier_of_each_user_naming_its_commits(
    tbl: Table,
) -> None:
    """A streaming sink's restart knows what it committed last after expiration removed
    the snapshot that did (docs/format.md 6.4)."""
    assert tbl.latest_snapshot().named_commits == {}  # type: ignore[union-attr]
    tbl.commit(prepare(tbl, rows(500, 5)), commit_user="job-a", commit_identifier=7)  # 4
    tbl.commit(prepare(tbl, rows(510, 5)), commit_user="job-b", commit_identifier=3)  # 5
    tbl.write(rows(600, 1))  # an unnamed commit carries them
    tbl.commit(prepare(tbl, rows(520, 5)), commit_user="job-a", commit_identifier=8)  # 7
    tbl.compact(full=True)
    assert tbl.expire_snapshots(retain_last=1).expired_snapshot_ids == (1, 2, 3, 4, 5, 6, 7)
    latest = raylake.open_table(tbl.uri).latest_snapshot()
    assert latest is not None
    assert latest.named_commits == {"job-a": (8, 7, 8), "job-b": (3, 5, 3)}
    tbl.commit(prepare(tbl, rows(530, 5)), commit_user="job-a", commit_identifier=2)  # 9
    assert tbl.latest_snapshot().named_commits["job-a"] == (2, 9, 8)  # type: ignore[union-attr]
    assert latest.commit_user != "job-a"


def test_every_snapshot_names_the_last_overwrite_at_or_before_it(tbl: raylake.Table) -> None:
    """So a reader far behind knows whether the table was overwritten since it last read
    without reading the snapshots in between (docs/format.md)."""
    first = tbl.latest_snapshot()
    assert first is not None and first.last_overwrite_id == 0
    tbl.write(rows(600, 1, DAYS[0]), mode="overwrite")
    overwrite = tbl.latest_snapshot()
    assert overwrite is not None and overwrite.commit_kind == "OVERWRITE"
    tbl.write(rows(700, 1))
    tbl.compact(full=True)
    latest = raylake.open_table(tbl.uri).latest_snapshot()
    assert latest is not None and latest.last_overwrite_id == overwrite.id
