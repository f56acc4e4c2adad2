"""Commits while other writers commit and an expiration keeps only the newest snapshot:
what a commit read can be gone before it reads what it names.

The interleavings are forced, not timed: at the point where a commit has read a
snapshot, another writer commits twice and expires all but the latest. CI's faulted S3
run (three writers naming their commits, and an expirer) found both: the largest id a
listing named was gone before it was read ("snapshot 1 does not exist ... (it has
snapshots 3..3)"), and a retry by name read the manifests of the oldest snapshot left
after they were deleted ("manifest file is missing")."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import raylake
from raylake.format.options import MANIFEST_MERGE_MIN_COUNT
from raylake.format.snapshot import LATEST_HINT, SnapshotManager
from raylake.table import Table, clear_caches, idempotent

SCHEMA = pa.schema([("id", pa.int64())])


def _rows(start: int) -> pa.Table:
    return pa.table({"id": list(range(start, start + 10))}, schema=SCHEMA)


def _expire_after_first_listing(monkeypatch: pytest.MonkeyPatch, other: Table) -> None:
    """The first listing of snapshots is stale by the time its newest id is read."""
    listing = SnapshotManager.snapshot_ids
    calls = []

    def stale_once(self: SnapshotManager) -> list[int]:
        ids = listing(self)
        if not calls:
            calls.append(ids)
            other.write(_rows(200))
            other.write(_rows(300))
            other.expire_snapshots(retain_last=1)  # only the newest snapshot stays
        return ids

    monkeypatch.setattr(SnapshotManager, "snapshot_ids", stale_once)


@pytest.fixture
def without_hint(tmp_path: Path) -> tuple[Table, Table]:
    """A table at snapshot 1 whose LATEST hint is gone (a writer that could not write
    it), so the latest snapshot is found by listing; and a second writer."""
    uri = str(tmp_path / "t")
    tbl = raylake.create_table(uri, SCHEMA)
    tbl.write(_rows(0))
    (tmp_path / "t" / LATEST_HINT).unlink()
    return tbl, raylake.open_table(uri)


def test_the_latest_snapshot_is_found_when_the_listed_one_expires_before_it_is_read(
    without_hint: tuple[Table, Table], monkeypatch: pytest.MonkeyPatch
) -> None:
    tbl, other = without_hint
    _expire_after_first_listing(monkeypatch, other)
    latest = SnapshotManager(tbl.file_io).latest()
    assert latest is not None and latest.id == 3


def test_a_commit_whose_listed_latest_expires_before_it_is_read_commits(
    without_hint: tuple[Table, Table], monkeypatch: pytest.MonkeyPatch
) -> None:
    """(was: SnapshotNotFoundError naming snapshot 1, and nothing committed.)"""
    tbl, other = without_hint
    _expire_after_first_listing(monkeypatch, other)
    assert tbl.write(_rows(100)).id == 4
    reopened = raylake.open_table(tbl.uri)
    assert sorted(reopened.to_arrow().column("id").to_pylist()) == [
        *range(0, 10),
        *range(100, 110),
        *range(200, 210),
        *range(300, 310),
    ]


def test_a_retry_by_name_whose_oldest_snapshot_expires_while_it_looks_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retry by name, based on snapshot 0, finds only snapshot 3 left (an expiration
    removed 1 and 2) and reads its manifests to see whether its commit is there; before
    it does, two more commits land (each merging the manifests into a new one) and an
    expiration removes snapshot 3 with them (was: CorruptMetadataError, the commit
    refused and its files deleted)."""
    uri = str(tmp_path / "t")
    tbl = raylake.create_table(uri, SCHEMA, options={MANIFEST_MERGE_MIN_COUNT: "1"})
    other = raylake.open_table(uri)
    for start in (0, 10, 20):
        other.write(_rows(start))
    other.expire_snapshots(retain_last=1)
    writer = tbl.new_writer()
    writer.write(_rows(100))
    messages = writer.prepare_commit()
    looked = idempotent.live_files_of
    calls = []

    def expired_meanwhile(*args: object, **kwargs: object) -> object:
        if not calls:
            calls.append(args)
            other.write(_rows(200))
            other.write(_rows(300))
            other.expire_snapshots(retain_last=1)
            clear_caches()  # as in another process: snapshot 3's manifests not read yet
        return looked(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(idempotent, "live_files_of", expired_meanwhile)
    snap = tbl.commit(messages, base_snapshot_id=0, commit_user="w", commit_identifier=7)
    assert calls and snap is not None and snap.id == 6
    assert sorted(raylake.open_table(uri).to_arrow().column("id").to_pylist()) == [
        *range(0, 30),
        *range(100, 110),
        *range(200, 210),
        *range(300, 310),
    ]
