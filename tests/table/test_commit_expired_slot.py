"""A commit that finds its snapshot id free because expiration deleted it is not
acknowledged: the slow writer's rows would be in no snapshot of the table's history.

The interleaving is forced, not timed: a commit's conflict check runs between its read
of the latest snapshot and its create, and there another writer commits four times and
expiration keeps only the last three (the soak found this with a slow writer under
storage faults). Two slow writers are ordered by events, never by sleeps."""

from __future__ import annotations

import contextlib
import errno
import json
import shutil
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import raylake
from raylake.errors import (
    CommitLineageUnknownError,
    CommitStateUnknownError,
    SnapshotExpiredError,
)
from raylake.format.snapshot import Snapshot, SnapshotManager
from raylake.io import FileIO
from raylake.table import clear_caches, maintenance
from raylake.table.commit import CommitRequest, Committer, commit_or_abort
from raylake.table.writer import CommitMessage

SCHEMA = pa.schema([("id", pa.int64())])
FIXTURES = Path(__file__).parent / "fixtures"


def _rows(start: int) -> pa.Table:
    return pa.table({"id": list(range(start, start + 10))}, schema=SCHEMA)


def test_a_commit_into_an_expired_snapshot_id_is_not_acknowledged(tmp_path: Path) -> None:
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    tbl.write(_rows(0))  # snapshot 1
    writer = tbl.new_writer()
    writer.write(_rows(100))
    messages = writer.prepare_commit()
    other = raylake.open_table(str(tmp_path / "t"))

    def meanwhile(latest: Snapshot) -> None:  # the slow writer has read snapshot 1
        for i in range(4):
            other.write(_rows(200 + 10 * i))  # snapshots 2..5
        other.expire_snapshots(retain_last=3)  # deletes snapshots 1 and 2

    request = CommitRequest(messages, base_snapshot_id=0, conflict_check=meanwhile)
    with pytest.raises(CommitLineageUnknownError, match="snapshot 1, was expired") as caught:
        Committer(tbl.file_io, tbl.table_schema).commit(request)
    assert isinstance(caught.value, CommitStateUnknownError)  # callers catch the family
    latest = raylake.open_table(str(tmp_path / "t"))
    assert latest.latest_snapshot().id == 5
    assert sorted(latest.to_arrow().column("id").to_pylist()) == list(range(0, 10)) + list(
        range(200, 240)
    )


def test_a_first_commit_into_an_expired_snapshot_id_is_not_acknowledged(
    tmp_path: Path,
) -> None:
    """A table's first commit, slow: another writer makes snapshots 1..4 and expiration
    keeps only the latest before its create of snapshot 1 (was: acknowledged, and the
    LATEST hint naming it made readers take it for the latest, the other rows hidden)."""
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    other = raylake.open_table(str(tmp_path / "t"))

    def meanwhile() -> None:  # the slow writer found no snapshot
        for i in range(4):
            other.write(_rows(200 + 10 * i))  # snapshots 1..4
        other.expire_snapshots(retain_last=1)  # deletes snapshots 1..3

    request = CommitRequest(_messages(tbl, 100), base_snapshot_id=0, before_create=meanwhile)
    with pytest.raises(CommitLineageUnknownError, match="the table's first commit"):
        Committer(tbl.file_io, tbl.table_schema).commit(request)
    assert SnapshotManager(tbl.file_io).read_hint() == 4
    reopened = raylake.open_table(str(tmp_path / "t"))
    assert reopened.latest_snapshot().id == 4
    assert sorted(reopened.to_arrow().column("id").to_pylist()) == list(range(200, 240))


@pytest.mark.parametrize("then_commits", [0, 1, 3])
def test_a_first_commit_is_acknowledged_where_it_is_the_history(
    tmp_path: Path, then_commits: int
) -> None:
    """Without a parent to read, a first commit with no newer snapshot, whose next one
    was made on it, or whose files are live in the latest snapshot (the others went on
    from it and expired all but the latest) is the table's."""
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    other = raylake.open_table(str(tmp_path / "t"))
    create = SnapshotManager.try_create

    def committed_on(
        self: SnapshotManager, snap: Snapshot, *, then: Callable[[], None] | None = None
    ) -> bool:
        def meanwhile() -> None:
            for i in range(then_commits):
                other.write(_rows(200 + 10 * i))
            if then_commits > 1:
                other.expire_snapshots(retain_last=1)
            assert then is not None
            then()

        return create(self, snap, then=meanwhile if snap.id == 1 else then)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SnapshotManager, "try_create", committed_on)
        assert tbl.write(_rows(100)).id == 1
    reopened = raylake.open_table(str(tmp_path / "t"))
    assert reopened.latest_snapshot().id == 1 + then_commits
    assert reopened.count() == 10 + 10 * then_commits


def test_a_retry_of_a_commit_into_an_expired_snapshot_id_commits_it(tmp_path: Path) -> None:
    """The slow commit names its user and identifier; its retry, as docs/reliability.md
    says to retry a commit whose outcome is unknown, finds the stray snapshot 2 holding
    them (was: returned it as the commit, whose rows were in no snapshot of the table)."""
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    tbl.write(_rows(0))  # snapshot 1
    messages = _messages(tbl, 100)
    other = raylake.open_table(str(tmp_path / "t"))

    def meanwhile(latest: Snapshot) -> None:  # the slow writer has read snapshot 1
        for i in range(4):
            other.write(_rows(200 + 10 * i))  # snapshots 2..5
        other.expire_snapshots(retain_last=3)  # deletes snapshots 1 and 2

    request = CommitRequest(
        messages,
        base_snapshot_id=0,
        conflict_check=meanwhile,
        commit_user="job",
        commit_identifier=7,
    )
    with pytest.raises(CommitLineageUnknownError):
        Committer(tbl.file_io, tbl.table_schema).commit(request)
    assert tbl.snapshot(2).commit_identifier == 7  # the stray, below snapshot 3
    for _ in range(2):  # the second retry finds the first one's commit
        retried = raylake.open_table(str(tmp_path / "t")).commit(
            messages, base_snapshot_id=0, commit_user="job", commit_identifier=7
        )
        assert retried is not None and (retried.id, retried.parent_id) == (6, 5)
    ids = raylake.open_table(str(tmp_path / "t")).to_arrow().column("id").to_pylist()
    assert sorted(ids) == [*range(0, 10), *range(100, 110), *range(200, 240)]


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

    def meanwhile(latest: Snapshot) -> None:
        for i in range(4):
            other.write(_rows(200 + 10 * i))  # snapshots 2..5
        other.expire_snapshots(retain_last=1)  # deletes snapshots 1..4

    request = CommitRequest(_messages(tbl, 100), base_snapshot_id=0, conflict_check=meanwhile)
    with pytest.raises(CommitLineageUnknownError, match="snapshot 1, was expired"):
        Committer(tbl.file_io, tbl.table_schema).commit(request)
    assert (tmp_path / "t" / "snapshot" / "snapshot-2.json").exists()  # the slow writer's
    assert SnapshotManager(tbl.file_io).read_hint() == 5
    reopened = raylake.open_table(str(tmp_path / "t"))
    assert reopened.latest_snapshot().id == 5 and reopened.count() == 50
    assert reopened.write(_rows(300)).id == 6


def test_a_late_hint_never_leads_to_a_stray_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer's LATEST write for snapshot 2 lands after snapshots 3..5 were made
    and 1..4 expired; then the slow writer, which read snapshot 1, makes a stray 2 (was:
    readers followed the hint to the stray and took it for the latest, rows 2..5 hidden,
    and the next writer was acknowledged on top of it, its rows outside the history)."""
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    tbl.write(_rows(0))  # snapshot 1
    other = raylake.open_table(str(tmp_path / "t"))
    write_hint = SnapshotManager._write_hint
    held: list[tuple[SnapshotManager, Snapshot]] = []

    def late(self: SnapshotManager, snap: Snapshot) -> None:
        if snap.id == 2 and not held:
            held.append((self, snap))
        else:
            write_hint(self, snap)

    def meanwhile(latest: Snapshot) -> None:  # the slow writer has read snapshot 1
        for i in range(4):
            other.write(_rows(200 + 10 * i))  # snapshots 2..5, the hint for 2 held
        other.expire_snapshots(retain_last=1)  # deletes snapshots 1..4
        write_hint(*held[0])  # lands late

    monkeypatch.setattr(SnapshotManager, "_write_hint", late)
    request = CommitRequest(_messages(tbl, 100), base_snapshot_id=0, conflict_check=meanwhile)
    with pytest.raises(CommitLineageUnknownError):
        Committer(tbl.file_io, tbl.table_schema).commit(request)
    monkeypatch.undo()
    assert SnapshotManager(tbl.file_io).read_hint() == 2  # the late hint, naming the stray's id
    reopened = raylake.open_table(str(tmp_path / "t"))
    assert reopened.latest_snapshot().id == 5 and reopened.count() == 50
    assert reopened.write(_rows(300)).id == 6
    ids = raylake.open_table(str(tmp_path / "t")).to_arrow().column("id").to_pylist()
    assert sorted(ids) == [*range(0, 10), *range(200, 240), *range(300, 310)]


@pytest.mark.parametrize("hint", [b"3", b"3 ", b"3 \n"])
def test_a_hint_naming_no_commit_is_followed(tmp_path: Path, hint: bytes) -> None:
    """A hint an older version wrote names an id only."""
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    for i in range(3):
        tbl.write(_rows(10 * i))
    (tmp_path / "t" / "snapshot" / "LATEST").write_bytes(hint)
    assert SnapshotManager(tbl.file_io).hint() == (3, "")
    assert raylake.open_table(str(tmp_path / "t")).latest_snapshot().id == 3


def test_orphan_removal_beside_a_stray_snapshot_keeps_the_latest_files(tmp_path: Path) -> None:
    """The slow writer's stray snapshot 2 lies below snapshot 5 with a gap between (was:
    orphan removal took the files live in 5 as those of the stray's base plus the later
    deltas, deleted the files of snapshots 2..4 that 5 holds, and no read worked)."""
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    tbl.write(_rows(0))  # snapshot 1
    other = raylake.open_table(str(tmp_path / "t"))

    def meanwhile(latest: Snapshot) -> None:  # the slow writer has read snapshot 1
        for i in range(4):
            other.write(_rows(200 + 10 * i))  # snapshots 2..5
        other.expire_snapshots(retain_last=1)  # deletes snapshots 1..4

    request = CommitRequest(_messages(tbl, 100), base_snapshot_id=0, conflict_check=meanwhile)
    with pytest.raises(CommitLineageUnknownError):
        Committer(tbl.file_io, tbl.table_schema).commit(request)
    assert [s.id for s in tbl.snapshots()] == [2, 5]
    assert tbl.remove_orphan_files(older_than=timedelta(0)).paths == ()
    ids = raylake.open_table(str(tmp_path / "t")).to_arrow().column("id").to_pylist()
    assert sorted(ids) == [*range(0, 10), *range(200, 240)]


@pytest.mark.parametrize("retain_last", [1, 3])
def test_the_earliest_snapshot_is_never_a_stray(tmp_path: Path, retain_last: int) -> None:
    """The slow writer's stray snapshot 2 lies below a gap (expiration kept snapshot 5)
    or just below snapshot 3 (kept 3..5), not its parent (was: a stream from "earliest"
    read the stray whole, a row the table never had and none of 200..239, and time
    travel to before snapshot 3 read the stray's state)."""
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    tbl.write(_rows(0))  # snapshot 1
    other = raylake.open_table(str(tmp_path / "t"))

    def meanwhile() -> None:  # the slow writer has made its snapshot 2, on snapshot 1
        for i in range(4):
            other.write(_rows(200 + 10 * i))  # snapshots 2..5
        other.expire_snapshots(retain_last=retain_last)

    request = CommitRequest(_messages(tbl, 100), base_snapshot_id=0, before_create=meanwhile)
    with pytest.raises(CommitLineageUnknownError):
        Committer(tbl.file_io, tbl.table_schema).commit(request)
    earliest = 6 - retain_last
    assert tbl.snapshot(2).parent_id == 1  # the stray
    assert SnapshotManager(tbl.file_io).earliest_id() == earliest
    reader = tbl.stream(start="earliest")
    plan = reader.poll()
    reader.close()
    assert plan is not None and plan.snapshot_id == earliest
    assert 100 not in plan.to_arrow().column("id").to_pylist()
    at_the_stray = tbl.snapshot(2).time_millis  # no later than the snapshots after it
    with contextlib.suppress(SnapshotExpiredError):  # all made later than that
        assert tbl.scan(as_of=at_the_stray).snapshot().id >= earliest  # type: ignore[union-attr]


def test_an_expiration_of_a_stray_keeps_its_files_for_the_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An expiration chooses to remove the stray snapshot 2 and the files only it names;
    before it deletes them, the slow writer's retry commits the same files as snapshot 6
    (was: the expiration deleted them under snapshot 6, and no read of the table worked)."""
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    tbl.write(_rows(0))  # snapshot 1
    messages = _messages(tbl, 100)
    other = raylake.open_table(str(tmp_path / "t"))

    def meanwhile(latest: Snapshot) -> None:  # the slow writer has read snapshot 1
        for i in range(4):
            other.write(_rows(200 + 10 * i))  # snapshots 2..5
        other.expire_snapshots(retain_last=1)  # deletes snapshots 1..4

    request = CommitRequest(messages, base_snapshot_id=0, conflict_check=meanwhile)
    with pytest.raises(CommitLineageUnknownError):
        Committer(tbl.file_io, tbl.table_schema).commit(request)
    choose = maintenance._choose
    retried: list[int] = []

    def retry_meanwhile(*args: Any) -> tuple[list[str], list[str]]:
        chosen = choose(*args)  # the stray's files among them
        retried.append(tbl.commit(messages).id)  # type: ignore[union-attr]
        return chosen

    monkeypatch.setattr(maintenance, "_choose", retry_meanwhile)
    assert other.expire_snapshots(retain_last=1).expired_snapshot_ids == (2,)
    assert retried == [6]
    ids = raylake.open_table(str(tmp_path / "t")).to_arrow().column("id").to_pylist()
    assert sorted(ids) == [*range(0, 10), *range(100, 110), *range(200, 240)]


def test_a_create_answered_with_an_error_never_brings_back_an_expired_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first commit's create of snapshot 1 is carried out and answered with an error;
    meanwhile the slow writer reads snapshot 1, others commit 2 and 3 on it and an
    expiration keeps 3 only. The read-back finds 1 absent (was: it created 1 again, and
    the slow writer's snapshot 2 made on it passed the parent check: acknowledged, its
    rows in no snapshot of the table). The first commit, whose files 3 holds, is
    acknowledged; the slow one's outcome is unknown."""
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    other = raylake.open_table(str(tmp_path / "t"))
    slow_read, first_done = threading.Event(), threading.Event()
    slow: list[object] = []

    def slow_writer() -> None:
        def stop(latest: Snapshot) -> None:  # it has read snapshot 1
            slow_read.set()
            assert first_done.wait(60), "the test never let the slow writer go on"

        request = CommitRequest(_messages(tbl, 100), base_snapshot_id=0, conflict_check=stop)
        try:
            slow.append(Committer(tbl.file_io, tbl.table_schema).commit(request))
        except CommitLineageUnknownError as exc:
            slow.append(exc)

    create_once = FileIO._create_once
    thread = threading.Thread(target=slow_writer)

    def answer_lost(self: FileIO, path: str, data: bytes) -> bool:
        made = create_once(self, path, data)
        if path.endswith("snapshot-1.json") and not thread.is_alive() and not slow:
            thread.start()
            assert slow_read.wait(60)
            other.write(_rows(200))  # snapshot 2
            other.write(_rows(300))  # snapshot 3
            other.expire_snapshots(retain_last=1)  # deletes 1 and 2
            raise OSError(errno.EIO, "the answer was lost")
        return made

    monkeypatch.setattr(FileIO, "_create_once", answer_lost)
    try:
        first = Committer(tbl.file_io, tbl.table_schema).commit(
            CommitRequest(_messages(tbl, 0), base_snapshot_id=0)
        )
    finally:
        first_done.set()
        thread.join(60)
    monkeypatch.undo()
    assert first.id == 1 and not (tmp_path / "t" / "snapshot" / "snapshot-1.json").exists()
    assert [type(x) for x in slow] == [CommitLineageUnknownError]
    reopened = raylake.open_table(str(tmp_path / "t"))
    assert reopened.latest_snapshot().id == 3
    assert sorted(reopened.to_arrow().column("id").to_pylist()) == [
        *range(0, 10), *range(200, 210), *range(300, 310)
    ]  # fmt: skip


def _messages(tbl: raylake.Table, start: int) -> list[CommitMessage]:
    writer = tbl.new_writer()
    writer.write(_rows(start))
    return writer.prepare_commit()


def test_a_parent_made_again_by_another_slow_writer_is_told_apart(tmp_path: Path) -> None:
    """Writer B reads snapshot 1, writer A reads snapshot 2; others commit 3..6 and
    expiration keeps 4..6; then B creates 2 (a stranger's snapshot 2: B is told its
    outcome is unknown) and A creates 3. A's parent exists, but it is not the snapshot 2
    A read: without the parent's commit id in A's snapshot, A was acknowledged and its
    rows were in no snapshot of the table's history."""
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    tbl.write(_rows(0))  # snapshot 1
    other = raylake.open_table(str(tmp_path / "t"))
    read_b, go_b = threading.Event(), threading.Event()

    def stop_b(latest: Snapshot) -> None:  # B has read snapshot 1
        read_b.set()
        assert go_b.wait(60), "the test never let writer B go on"

    request_b = CommitRequest(_messages(tbl, 100), base_snapshot_id=0, conflict_check=stop_b)
    errors: list[BaseException] = []

    def commit_b() -> None:
        try:
            Committer(tbl.file_io, tbl.table_schema).commit(request_b)
        except BaseException as exc:
            errors.append(exc)

    b = threading.Thread(target=commit_b)
    b.start()
    assert read_b.wait(60)
    other.write(_rows(200))  # snapshot 2, which A reads

    def meanwhile(latest: Snapshot) -> None:
        assert latest.id == 2
        for i in range(4):
            other.write(_rows(400 + 10 * i))  # snapshots 3..6
        other.expire_snapshots(retain_last=3)  # deletes snapshots 1, 2 and 3
        go_b.set()
        b.join(60)  # B creates snapshot 2 again, on its gone parent 1
        assert not b.is_alive()

    request_a = CommitRequest(_messages(tbl, 300), base_snapshot_id=0, conflict_check=meanwhile)
    try:
        with pytest.raises(CommitLineageUnknownError, match="snapshot 2, holds another commit"):
            Committer(tbl.file_io, tbl.table_schema).commit(request_a)
    finally:
        go_b.set()
        b.join(60)
    assert [type(e) for e in errors] == [CommitLineageUnknownError]
    assert "snapshot 1, was expired" in str(errors[0])
    latest = raylake.open_table(str(tmp_path / "t"))
    assert latest.latest_snapshot().id == 6
    assert latest.count() == 60  # neither slow writer's rows


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


@pytest.mark.parametrize("then_commits", [0, 1, 2])
def test_a_commit_whose_parent_expires_just_after_its_create_is_acknowledged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, then_commits: int
) -> None:
    """Between the create of snapshot 3 and the committer's read of its parent, another
    process commits on it (or not) and expires all but the latest: the parent is gone
    because of the new snapshot, not before it (was: CommitLineageUnknownError for a
    commit that was the table's; with two commits on it, its child is gone too, and its
    files live in the latest snapshot tell)."""
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    tbl.write(_rows(0))
    tbl.write(_rows(10))
    other = raylake.open_table(str(tmp_path / "t"))
    create = SnapshotManager.try_create

    def expired_after_create(
        self: SnapshotManager, snap: Snapshot, *, then: Callable[[], None] | None = None
    ) -> bool:
        if snap.id != 3:  # the other process's commits
            return create(self, snap, then=then)

        def meanwhile() -> None:
            for i in range(then_commits):
                other.write(_rows(200 + 10 * i))
            other.expire_snapshots(retain_last=1)
            assert then is not None
            then()

        return create(self, snap, then=meanwhile)

    monkeypatch.setattr(SnapshotManager, "try_create", expired_after_create)
    snap = tbl.write(_rows(100))
    monkeypatch.undo()
    assert snap.id == 3
    reopened = raylake.open_table(str(tmp_path / "t"))
    assert reopened.latest_snapshot().id == 3 + then_commits
    assert reopened.count() == 30 + 10 * then_commits


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
