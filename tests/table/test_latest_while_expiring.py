"""The latest snapshot, found by listing, while commits land and expiration keeps only
the newest: the largest id listed can be gone before it is read.

The interleaving is forced, not timed: the first listing returns what the store held,
and before the reader reads the snapshot it names, another writer commits twice and
expires all but the latest (CI's faulted S3 run found this with three writers and an
expirer: a commit failed with "snapshot 1 does not exist ... (it has snapshots 3..3)")."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import raylake
from raylake.format.snapshot import LATEST_HINT, SnapshotManager
from raylake.table import Table

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
