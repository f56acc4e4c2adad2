"""Operations that plan from a snapshot whose manifests an expiration deletes meanwhile
(later commits made the snapshot old): the manifest is missing because the snapshot
expired, not because the table is damaged. Was: CorruptMetadataError, 'manifest file is
missing', from a compaction, a delete, a merge and a read alike."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import raylake
from raylake.errors import CommitConflictError, CorruptMetadataError, SnapshotExpiredError
from raylake.format import manifest
from raylake.table import Table, clear_caches

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64())])


def make_table(path: Path, **layout: Any) -> Table:
    options = {"manifest.merge-min-count": "2"}
    if layout:
        options["compaction.auto"] = "false"
    tbl = raylake.create_table(str(path), SCHEMA, options=options, **layout)
    for i in range(3):
        tbl.write(pa.table({"id": [1, 2, 5 + i], "v": [i, i, i]}))
    return tbl


def expire_at_first_manifest_read(tbl: Table, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before the operation reads its first manifest, another process commits twice and
    keeps only the latest snapshot."""
    read: Callable[..., pa.Table] = manifest.read_manifest
    other = raylake.open_table(tbl.uri)
    done: list[bool] = []

    def meanwhile(*args: Any) -> pa.Table:
        if not done:
            done.append(True)
            other.write(pa.table({"id": [9], "v": [9]}))
            other.write(pa.table({"id": [10], "v": [10]}))
            other.expire_snapshots(retain_last=1)
            clear_caches()  # as in a process that has not read the manifests yet
        return read(*args)

    clear_caches()
    monkeypatch.setattr(manifest, "read_manifest", meanwhile)


def ids(tbl: Table) -> list[int]:
    return sorted(raylake.open_table(tbl.uri).to_arrow().column("id").to_pylist())


def test_a_compaction_loses_as_to_a_concurrent_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tbl = make_table(tmp_path / "t", primary_key=["id"])
    expire_at_first_manifest_read(tbl, monkeypatch)
    with pytest.raises(CommitConflictError, match="snapshot 3, which this compaction read"):
        tbl.compact(full=True)
    monkeypatch.undo()
    assert ids(tbl) == [1, 2, 5, 6, 7, 9, 10]
    assert tbl.compact(full=True) is not None  # run again, it compacts


def test_a_delete_reads_the_new_latest_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tbl = make_table(tmp_path / "t", primary_key=["id"])
    expire_at_first_manifest_read(tbl, monkeypatch)
    tbl.delete({"id": [1]})
    assert ids(tbl) == [2, 5, 6, 7, 9, 10]


@pytest.mark.parametrize("layout", [{}, {"primary_key": ["id"]}])
def test_a_merge_reads_the_new_latest_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: dict[str, Any]
) -> None:
    tbl = make_table(tmp_path / "t", **layout)
    expire_at_first_manifest_read(tbl, monkeypatch)
    source = pa.table({"id": [2], "v": [20]})
    tbl.merge(source, on="id").when_matched_update({"v": "s.v"}).execute()
    rows = raylake.open_table(tbl.uri).to_arrow().to_pylist()
    assert sorted(r["v"] for r in rows if r["id"] == 2) == [20] * (1 if layout else 3)


def test_a_read_of_an_expired_snapshot_says_it_expired(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tbl = make_table(tmp_path / "t")
    expire_at_first_manifest_read(tbl, monkeypatch)
    with pytest.raises(SnapshotExpiredError, match=r"snapshot 3 of .* the earliest snapshot is 5"):
        tbl.to_arrow(snapshot_id=3)
    monkeypatch.undo()
    tbl = make_table(tmp_path / "c")
    expire_at_first_manifest_read(tbl, monkeypatch)
    with pytest.raises(SnapshotExpiredError, match=r"snapshot \d of .* the earliest snapshot is 5"):
        tbl.changes(2, 3).to_arrow()


def test_a_manifest_missing_from_a_snapshot_that_exists_is_still_damage(tmp_path: Path) -> None:
    tbl = make_table(tmp_path / "t")
    (tmp_path / "t" / tbl.latest_snapshot().base_manifests[0].path).unlink()
    clear_caches()
    with pytest.raises(CorruptMetadataError, match="manifest file is missing"):
        tbl.to_arrow()
