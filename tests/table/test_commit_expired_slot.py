"""A commit that finds its snapshot id free because expiration deleted it is not
acknowledged: the slow writer's rows would be in no snapshot of the table's history. It
withdraws the snapshot it made and commits again on the latest one.

The interleaving is forced, not timed: a commit's conflict check runs between its read
of the latest snapshot and its create, and there another writer commits four times and
expiration keeps only the last three (the soak found this with a slow writer under
storage faults). Two slow writers are ordered by events, never by sleeps."""

from __future__ import annotations

import json
import re
import shutil
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

import raylake
from raylake.errors import CommitLineageUnknownError, CommitStateUnknownError
from raylake.format.snapshot import Snapshot, SnapshotManager
from raylake.table import clear_caches
from raylake.table.commit import CommitRequest, Committer, commit_or_abort
from raylake.table.writer import CommitMessage

SCHEMA = pa.schema([("id", pa.int64())])
FIXTURES = Path(__file__).parent / "fixtures"


def _rows(start: int) -> pa.Table:
    return pa.table({"id": list(range(start, start + 10))}, schema=SCHEMA)


def test_a_commit_into_an_expired_snapshot_id_commits_again_on_the_latest(
    tmp_path: Path,
) -> None:
    """Was: CommitLineageUnknownError, the slow writer's rows committed nowhere."""
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    tbl.write(_rows(0))  # snapshot 1
    writer = tbl.new_writer()
    writer.write(_rows(100))
    messages = writer.prepare_commit()
    other = raylake.open_table(str(tmp_path / "t"))

    def meanwhile(latest: Snapshot) -> None:  # the slow writer has read snapshot 1
        if latest.id == 1:
            for i in range(4):
                other.write(_rows(200 + 10 * i))  # snapshots 2..5
            other.expire_snapshots(retain_last=3)  # deletes snapshots 1 and 2

    request = CommitRequest(messages, base_snapshot_id=0, conflict_check=meanwhile)
    snap = Committer(tbl.file_io, tbl.table_schema).commit(request)
    assert (snap.id, snap.parent_id) == (6, 5)
    latest = raylake.open_table(str(tmp_path / "t"))
    assert [s.id for s in latest.snapshots()] == [3, 4, 5, 6]  # the stray 2 withdrawn
    assert sorted(latest.to_arrow().column("id").to_pylist()) == [
        *range(0, 10), *range(100, 110), *range(200, 240)
    ]  # fmt: skip
    latest.expire_snapshots(retain_last=1)
    assert latest.count() == 60


def test_a_commit_whose_parent_is_kept_is_acknowledged(tmp_path: Path) -> None:
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    tbl.write(_rows(0))
    other = raylake.open_table(str(tmp_path / "t"))
    for i in range(4):
        other.write(_rows(200 + 10 * i))
    other.expire_snapshots(retain_last=3)  # snapshots 3, 4, 5 stay
    snap = tbl.write(_rows(100))
    assert snap.id == 6 and snap.parent_id == 5
    assert tbl.count() == 60


def test_the_hint_never_names_a_snapshot_created_below_the_latest(tmp_path: Path) -> None:
    """Expiration kept only the latest snapshot: after the slow writer's create of 2 the
    snapshot after it is gone too, so a LATEST hint naming 2 made readers (and the next
    writer, which committed on top of it) take the slow writer's snapshot for the latest."""
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    tbl.write(_rows(0))  # snapshot 1
    other = raylake.open_table(str(tmp_path / "t"))
    hints: list[str] = []

    def meanwhile(latest: Snapshot) -> None:
        if latest.id == 1:
            for i in range(4):
                other.write(_rows(200 + 10 * i))  # snapshots 2..5
            other.expire_snapshots(retain_last=1)  # deletes snapshots 1..4
        else:  # the second attempt, after the stray 2 was withdrawn
            hints.append((tmp_path / "t" / "snapshot" / "LATEST").read_text().split()[0])

    request = CommitRequest(_messages(tbl, 100), base_snapshot_id=0, conflict_check=meanwhile)
    assert Committer(tbl.file_io, tbl.table_schema).commit(request).id == 6
    assert hints == ["5"]
    assert not (tmp_path / "t" / "snapshot" / "snapshot-2.json").exists()
    assert (tmp_path / "t" / "snapshot" / "LATEST").read_text().split()[0] == "6"
    reopened = raylake.open_table(str(tmp_path / "t"))
    assert reopened.latest_snapshot().id == 6 and reopened.count() == 60
    assert reopened.write(_rows(300)).id == 7


def _messages(tbl: raylake.Table, start: int) -> list[CommitMessage]:
    writer = tbl.new_writer()
    writer.write(_rows(start))
    return writer.prepare_commit()


def test_two_slow_writers_in_expired_snapshot_ids_both_commit_again(tmp_path: Path) -> None:
    """Writer B reads snapshot 1, writer A reads snapshot 2; others commit 3..6 and
    expiration keeps 4..6; then B creates 2 and A creates 3, both below the latest: each
    withdraws its snapshot and commits again (was: CommitLineageUnknownError for both,
    their rows in no snapshot of the table's history)."""
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    tbl.write(_rows(0))  # snapshot 1
    other = raylake.open_table(str(tmp_path / "t"))
    read_b, go_b = threading.Event(), threading.Event()

    def stop_b(latest: Snapshot) -> None:  # B has read snapshot 1
        read_b.set()
        assert go_b.wait(60), "the test never let writer B go on"

    request_b = CommitRequest(_messages(tbl, 100), base_snapshot_id=0, conflict_check=stop_b)
    done: list[Snapshot | BaseException] = []

    def commit_b() -> None:
        try:
            done.append(Committer(tbl.file_io, tbl.table_schema).commit(request_b))
        except BaseException as exc:
            done.append(exc)

    b = threading.Thread(target=commit_b)
    b.start()
    assert read_b.wait(60)
    other.write(_rows(200))  # snapshot 2, which A reads

    def meanwhile(latest: Snapshot) -> None:
        if latest.id != 2:
            return
        for i in range(4):
            other.write(_rows(400 + 10 * i))  # snapshots 3..6
        other.expire_snapshots(retain_last=3)  # deletes snapshots 1, 2 and 3
        go_b.set()
        b.join(60)  # B creates snapshot 2 again, on its gone parent 1, then 7
        assert not b.is_alive()

    request_a = CommitRequest(_messages(tbl, 300), base_snapshot_id=0, conflict_check=meanwhile)
    try:
        snap_a = Committer(tbl.file_io, tbl.table_schema).commit(request_a)
    finally:
        go_b.set()
        b.join(60)
    assert [s.id for s in done if isinstance(s, Snapshot)] == [7] and snap_a.id == 8
    latest = raylake.open_table(str(tmp_path / "t"))
    assert [s.id for s in latest.snapshots()] == [4, 5, 6, 7, 8]
    assert latest.count() == 80  # both slow writers' rows, once


def test_a_parent_made_again_is_told_apart(tmp_path: Path) -> None:
    """A reads snapshot 2; others commit 3..6 and expiration keeps 4..6; a stray snapshot 2
    of another commit is there (left by a slow writer); A creates 3. A's parent exists, but
    it is not the snapshot 2 A read: without the parent's commit id in A's snapshot, A
    was acknowledged and its rows were in no snapshot of the table's history."""
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    tbl.write(_rows(0))
    tbl.write(_rows(10))  # snapshot 2, which A reads
    other = raylake.open_table(str(tmp_path / "t"))
    stray = tmp_path / "t" / "snapshot" / "snapshot-2.json"

    def meanwhile(latest: Snapshot) -> None:
        if latest.id != 2:
            return
        for i in range(4):
            other.write(_rows(400 + 10 * i))  # snapshots 3..6
        other.expire_snapshots(retain_last=3)  # deletes snapshots 1, 2 and 3
        stray.write_bytes(replace(latest, commit_id="f" * 32).to_bytes())

    request = CommitRequest(_messages(tbl, 300), base_snapshot_id=0, conflict_check=meanwhile)
    assert Committer(tbl.file_io, tbl.table_schema).commit(request).id == 7
    assert sorted(tbl.file_io.numbered("snapshot", re.compile(r"snapshot-(\d+)\.json"))) == [
        2, 4, 5, 6, 7
    ]  # fmt: skip
    latest = raylake.open_table(str(tmp_path / "t"))
    assert latest.latest_snapshot().id == 7 and latest.count() == 70
    latest.expire_snapshots(retain_last=1)  # the stray too, leaving A's files
    assert latest.count() == 70


def test_snapshots_name_their_parents_commit(tmp_path: Path) -> None:
    """``parent_commit_id`` is absent from snapshots written before it (it reads as ""),
    and a commit on such a parent is checked by the parent's existence only."""
    root = tmp_path / "t"
    shutil.copytree(FIXTURES / "v1_append", root)
    old = json.loads((root / "snapshot" / "snapshot-2.json").read_text())
    assert "parent_commit_id" not in old and "commit_id" not in old
    tbl = raylake.open_table(str(root))
    assert tbl.snapshot(2).parent_commit_id == ""
    row = pa.table({"id": [5], "dt": ["c"], "x": [50], "label": [4.5]}, schema=tbl.schema)
    first, second = tbl.write(row), tbl.write(row)
    assert first is not None and second is not None
    assert (first.parent_id, first.parent_commit_id) == (2, "")
    assert (second.parent_id, second.parent_commit_id) == (first.id, first.commit_id)
    assert first.commit_id and tbl.snapshot(second.id).parent_commit_id == first.commit_id


def test_a_commit_whose_latest_snapshot_expires_while_it_prepares_commits_on_the_newer_one(
    tmp_path: Path,
) -> None:
    """The snapshot the commit read as the latest was superseded and expired with its
    manifests before the commit merged them into its own (was: CorruptMetadataError,
    'manifest file is missing', and nothing committed)."""
    tbl = raylake.create_table(
        str(tmp_path / "t"), SCHEMA, options={"manifest.merge-min-count": "2"}
    )
    tbl.write(_rows(0))  # snapshot 1
    tbl.write(_rows(10))  # snapshot 2, which the commit reads as the latest
    other = raylake.open_table(str(tmp_path / "t"))
    expired: list[int] = []

    def meanwhile(latest: Snapshot) -> None:
        if not expired:
            other.write(_rows(200))  # snapshot 3
            expired.extend(other.expire_snapshots(retain_last=1).expired_snapshot_ids)
            clear_caches()  # as in a writer process that has not read the manifests yet

    request = CommitRequest(_messages(tbl, 100), base_snapshot_id=1, conflict_check=meanwhile)
    snap = Committer(tbl.file_io, tbl.table_schema).commit(request)
    assert expired == [1, 2] and (snap.id, snap.parent_id) == (4, 3)
    assert sorted(tbl.to_arrow().column("id").to_pylist()) == [
        *range(0, 20),
        *range(100, 110),
        *range(200, 210),
    ]


def _expire_after_creating_3(
    tbl: raylake.Table, monkeypatch: pytest.MonkeyPatch, then_commits: int
) -> None:
    """Between the create of snapshot 3 and the committer's look at its lineage, another
    process commits ``then_commits`` times and expires all but the latest."""
    other = raylake.open_table(tbl.uri)
    create = SnapshotManager.try_create

    def expired_after_create(
        self: SnapshotManager, snap: Snapshot, *, then: Callable[[], bool | None] | None = None
    ) -> bool:
        if snap.id != 3:  # the other process's commits
            return create(self, snap, then=then)

        def meanwhile() -> bool | None:
            for i in range(then_commits):
                other.write(_rows(200 + 10 * i))
            other.expire_snapshots(retain_last=1)
            assert then is not None
            return then()

        return create(self, snap, then=meanwhile)

    monkeypatch.setattr(SnapshotManager, "try_create", expired_after_create)


@pytest.mark.parametrize("then_commits", [0, 1, 2])
def test_a_commit_whose_parent_expires_just_after_its_create_is_acknowledged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, then_commits: int
) -> None:
    """The parent is gone because of the new snapshot, not before it (was:
    CommitLineageUnknownError for a commit that was the table's). With two commits on
    it, snapshot 3 is gone too: the latest snapshot's base manifests name its delta."""
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    tbl.write(_rows(0))
    tbl.write(_rows(10))
    _expire_after_creating_3(tbl, monkeypatch, then_commits)
    snap = tbl.write(_rows(100))
    monkeypatch.undo()
    assert snap.id == 3
    reopened = raylake.open_table(str(tmp_path / "t"))
    assert reopened.latest_snapshot().id == 3 + then_commits
    assert reopened.count() == 30 + 10 * then_commits


def test_a_commit_whose_lineage_cannot_be_told_is_reported_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Snapshot 3, the one after it and their parent are gone, and a merge of the base
    manifests folded 3's delta into one: whether 3 was made before or after another 3
    cannot be told, so nothing is deleted and the hint is not written."""
    tbl = raylake.create_table(
        str(tmp_path / "t"), SCHEMA, options={"manifest.merge-min-count": "2"}
    )
    tbl.write(_rows(0))
    tbl.write(_rows(10))
    _expire_after_creating_3(tbl, monkeypatch, 2)
    writer = tbl.new_writer()
    writer.write(_rows(100))
    messages = writer.prepare_commit()
    with pytest.raises(CommitLineageUnknownError, match="snapshot 2, was expired") as caught:
        tbl.commit(messages)
    monkeypatch.undo()
    assert isinstance(caught.value, CommitStateUnknownError)  # callers catch the family
    assert all(tbl.file_io.exists(f.path) for m in messages for f in m.new_files)
    assert (tmp_path / "t" / "snapshot" / "LATEST").read_text().split()[0] == "5"
    assert raylake.open_table(str(tmp_path / "t")).count() == 50  # 3's rows, by 4 and 5


def test_a_retry_that_finds_its_commit_expiring_keeps_its_files(tmp_path: Path) -> None:
    """A retried commit finds its commit done as snapshot 2; later commits and an
    expiration remove snapshot 2 with its manifests before the retry reads which files
    it named (was: CorruptMetadataError, and the retry deleted the committed files that
    the later snapshots still held, so no read of the table worked)."""
    tbl = raylake.create_table(
        str(tmp_path / "t"), SCHEMA, options={"manifest.merge-min-count": "2"}
    )
    tbl.write(_rows(0))  # snapshot 1
    request = CommitRequest(
        _messages(tbl, 100), base_snapshot_id=1, commit_user="job", commit_identifier=7
    )
    assert commit_or_abort(tbl.file_io, tbl.table_schema, request).id == 2
    other = raylake.open_table(str(tmp_path / "t"))

    def meanwhile() -> None:  # after the retry found snapshot 2
        other.write(_rows(200))
        other.write(_rows(300))
        other.expire_snapshots(retain_last=1)
        clear_caches()  # as in a process that has not read the manifests yet

    retry = replace(request, before_create=meanwhile)
    assert commit_or_abort(tbl.file_io, tbl.table_schema, retry).id == 2
    clear_caches()
    ids = raylake.open_table(str(tmp_path / "t")).to_arrow().column("id").to_pylist()
    assert sorted(ids) == [*range(0, 10), *range(100, 110), *range(200, 210), *range(300, 310)]


def test_a_first_commit_into_an_expired_snapshot_1_commits_again(tmp_path: Path) -> None:
    """The table's first commit, slow: others make snapshots 1 and 2 and expire 1 before
    its create of 1 (was: acknowledged as snapshot 1, its rows in no later snapshot)."""
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    other = raylake.open_table(str(tmp_path / "t"))
    creates: list[int] = []

    def meanwhile() -> None:  # before each create
        creates.append(len(creates))
        if len(creates) == 1:
            other.write(_rows(200))
            other.write(_rows(300))
            other.expire_snapshots(retain_last=1)

    request = CommitRequest(_messages(tbl, 100), before_create=meanwhile)
    snap = Committer(tbl.file_io, tbl.table_schema).commit(request)
    assert (snap.id, len(creates)) == (3, 2)
    reopened = raylake.open_table(str(tmp_path / "t"))
    assert [s.id for s in reopened.snapshots()] == [2, 3]
    assert sorted(reopened.to_arrow().column("id").to_pylist()) == [
        *range(100, 110), *range(200, 210), *range(300, 310)
    ]  # fmt: skip


@pytest.mark.parametrize("dry_run", [True, False])
def test_an_expiration_of_a_stray_snapshot_keeps_its_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dry_run: bool
) -> None:
    """An expiration that chooses what to delete while the slow writer's stray snapshot
    is there (it may delete only after the writer committed again), or removes it before
    the writer looks, leaves the stray's data files, which the writer commits again: were
    they deleted, the retry's snapshot would name files that are gone."""
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    tbl.write(_rows(0))  # snapshot 1
    other = raylake.open_table(str(tmp_path / "t"))
    create = SnapshotManager.try_create

    def expired_after_create(
        self: SnapshotManager, snap: Snapshot, *, then: Callable[[], bool | None] | None = None
    ) -> bool:
        if snap.id != 2 or then is None:
            return create(self, snap, then=then)

        def meanwhile() -> bool | None:
            assert [s.id for s in other.snapshots()] == [2, 4, 5]  # 2: the stray
            chosen = other.expire_snapshots(retain_last=1, dry_run=dry_run)
            assert chosen.expired_snapshot_ids == (2, 4)
            files.extend(f.path for m in messages for f in m.new_files)
            assert files and not set(files) & set(chosen.deleted_data_files)
            return then()

        return create(self, snap, then=meanwhile)

    def prepared(latest: Snapshot) -> None:  # the slow writer has read snapshot 1
        if latest.id == 1:
            for i in range(3):
                other.write(_rows(200 + 10 * i))  # snapshots 2..4
            other.expire_snapshots(retain_last=1)
            monkeypatch.setattr(SnapshotManager, "try_create", expired_after_create)
            other.write(_rows(230))  # snapshot 5

    files: list[str] = []
    messages = _messages(tbl, 100)
    request = CommitRequest(messages, base_snapshot_id=0, conflict_check=prepared)
    assert Committer(tbl.file_io, tbl.table_schema).commit(request).id == 6
    monkeypatch.undo()
    assert other.expire_snapshots(retain_last=1).expired_snapshot_ids == (
        (4, 5) if dry_run else (5,)
    )
    reopened = raylake.open_table(str(tmp_path / "t"))
    assert sorted(reopened.to_arrow().column("id").to_pylist()) == [
        *range(0, 10), *range(100, 110), *range(200, 240)
    ]  # fmt: skip


def test_a_late_hint_naming_a_stray_is_not_followed(tmp_path: Path) -> None:
    """The hint's write for snapshot 2 lands late, after 2 was expired and a slow writer
    made a stray 2 below the latest: readers and the next writer took the stray for the
    latest (its rows, and a commit on it, outside the history)."""
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    tbl.write(_rows(0))
    second = tbl.write(_rows(10))
    hint = tmp_path / "t" / "snapshot" / "LATEST"
    late = hint.read_bytes()  # what the committer of 2 writes
    tbl.write(_rows(20))
    tbl.write(_rows(30))
    tbl.expire_snapshots(retain_last=1)  # 4 is left
    stray = replace(second, commit_id="f" * 32, base_manifests=(), delta_manifests=())
    (tmp_path / "t" / "snapshot" / "snapshot-2.json").write_bytes(stray.to_bytes())
    hint.write_bytes(late)
    reopened = raylake.open_table(str(tmp_path / "t"))
    assert reopened.latest_snapshot().id == 4 and reopened.count() == 40
    assert reopened.write(_rows(40)).id == 5


def test_a_create_made_again_after_its_snapshot_expired_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store carried out the create of 3 and answered an error; before the read back,
    others committed 4 and 5 on it and expired 2..4, so the create was made again: the
    snapshot is there, its next one gone, yet it is in the history (5 names its delta).
    It must be acknowledged, not withdrawn with the manifests snapshot 5 names."""
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    tbl.write(_rows(0))
    tbl.write(_rows(10))
    other = raylake.open_table(tbl.uri)
    create = SnapshotManager.try_create

    def made_again(
        self: SnapshotManager, snap: Snapshot, *, then: Callable[[], bool | None] | None = None
    ) -> bool:
        if snap.id != 3 or then is None:
            return create(self, snap, then=then)

        def meanwhile() -> bool | None:
            path = tmp_path / "t" / "snapshot" / "snapshot-3.json"
            made = path.read_bytes()
            other.write(_rows(200))
            other.write(_rows(210))
            other.expire_snapshots(retain_last=1)
            path.write_bytes(made)
            return then()

        return create(self, snap, then=meanwhile)

    monkeypatch.setattr(SnapshotManager, "try_create", made_again)
    assert tbl.write(_rows(100)).id == 3
    monkeypatch.undo()
    reopened = raylake.open_table(str(tmp_path / "t"))
    assert reopened.latest_snapshot().id == 5 and reopened.count() == 50
