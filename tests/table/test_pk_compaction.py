"""Compaction: same reads before and after, fewer non-overlapping files, automatic trigger."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import raylake
from raylake.errors import CommitConflictError
from raylake.format.manifest import DataFile, data_files_from_table, live_files, read_entries
from raylake.table.pk.compaction import commit_compaction, prepare_compaction
from raylake.table.pk.read import overlap_sections
from raylake.table.pk.schema import LEVEL_TOP

SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), ("v", pa.int64()), ("ts", pa.int64())]
)


def make(tmp_path: Path, **options: Any) -> raylake.Table:
    options.setdefault("compaction.auto", "false")
    return raylake.create_table(
        str(tmp_path / "t"), SCHEMA, primary_key=["id"], buckets=2, options=options
    )


def upsert(tbl: raylake.Table, ids: Any, v: int) -> None:
    ids = np.asarray(ids, dtype=np.int64)
    tbl.write(pa.table({"id": ids, "v": np.full(len(ids), v), "ts": np.zeros(len(ids), np.int64)}))


def live(tbl: raylake.Table) -> list[DataFile]:
    snap = tbl.latest_snapshot()
    assert snap is not None
    entries = read_entries(tbl.file_io, snap.base_manifests, tbl.table_schema)
    return data_files_from_table(live_files(entries), tbl.table_schema)


def state(tbl: raylake.Table) -> list[dict[str, Any]]:
    return sorted(tbl.to_arrow().to_pylist(), key=lambda r: r["id"])


def by_bucket(files: list[DataFile]) -> dict[int, list[DataFile]]:
    out: dict[int, list[DataFile]] = {}
    for f in files:
        out.setdefault(f.bucket, []).append(f)
    return out


def test_nothing_to_compact_returns_none(tmp_path: Path) -> None:
    tbl = make(tmp_path)
    assert tbl.compact() is None
    upsert(tbl, range(10), 1)
    assert tbl.compact() is None  # one file per bucket, nothing overlaps
    assert tbl.latest_snapshot().id == 1  # type: ignore[union-attr]


def test_compaction_merges_overlapping_files_and_keeps_reads(tmp_path: Path) -> None:
    tbl = make(tmp_path)
    upsert(tbl, range(100), 1)
    upsert(tbl, range(0, 100, 3), 2)
    upsert(tbl, range(50, 60), 3)
    tbl.delete({"id": [1, 2, 51]})
    before = state(tbl)
    snap = tbl.compact()
    assert snap is not None and snap.commit_kind == "COMPACT"
    assert state(tbl) == before
    assert tbl.count() == len(before) == 97
    for files in by_bucket(live(tbl)).values():
        assert all(len(section) == 1 for section in overlap_sections(files))
        assert all(f.level == LEVEL_TOP and f.delete_row_count == 0 for f in files)
    assert tbl.to_arrow(snapshot_id=snap.id - 1).num_rows == 97  # time travel across it


def test_minor_compaction_leaves_files_that_overlap_nothing(tmp_path: Path) -> None:
    tbl = make(tmp_path)
    upsert(tbl, range(0, 10), 1)
    upsert(tbl, range(100, 110), 1)  # other key ranges: new sections
    upsert(tbl, range(5, 8), 2)
    kept = {f.path for f in live(tbl) if f.min_key is not None and f.min_key[0] >= 100}
    tbl.compact()
    assert kept <= {f.path for f in live(tbl)}
    assert [r["v"] for r in state(tbl) if 5 <= r["id"] < 8] == [2, 2, 2]


def test_full_compaction_packs_small_files(tmp_path: Path) -> None:
    tbl = make(tmp_path)
    for start in range(0, 400, 100):
        upsert(tbl, range(start, start + 100), 1)  # disjoint key ranges: nothing overlaps
    before = state(tbl)
    assert len(live(tbl)) == 8
    assert tbl.compact() is None  # a minor compaction only merges overlapping files
    snap = tbl.compact(full=True)
    assert snap is not None and state(tbl) == before
    assert len(live(tbl)) == 2  # one file per bucket
    assert tbl.compact(full=True) is None


def test_automatic_compaction_after_too_many_overlapping_files(tmp_path: Path) -> None:
    tbl = make(tmp_path, **{"compaction.auto": "true", "compaction.max-overlapping-files": 3})
    for v in range(3):
        upsert(tbl, range(20), v)
    kinds = [s.commit_kind for s in tbl.snapshots()]
    assert kinds == ["APPEND"] * 3
    upsert(tbl, range(20), 3)
    assert [s.commit_kind for s in tbl.snapshots()][-2:] == ["APPEND", "COMPACT"]
    assert {r["v"] for r in state(tbl)} == {3}
    for files in by_bucket(live(tbl)).values():
        assert max(len(s) for s in overlap_sections(files)) == 1


def test_concurrent_compactions_conflict_and_clean_up(tmp_path: Path) -> None:
    tbl = make(tmp_path)
    upsert(tbl, range(30), 1)
    upsert(tbl, range(30), 2)
    first = prepare_compaction(tbl.file_io, tbl.table_schema)
    second = prepare_compaction(tbl.file_io, tbl.table_schema)
    assert first is not None and second is not None
    commit_compaction(tbl.file_io, tbl.table_schema, first)
    with pytest.raises(CommitConflictError, match="removed by a concurrent commit"):
        commit_compaction(tbl.file_io, tbl.table_schema, second)
    on_disk = {p for p, _ in tbl.file_io.list_files("data")}
    assert not {f.path for m in second.messages for f in m.new_files} & on_disk
    assert {r["v"] for r in state(tbl)} == {2}


def test_an_overwrite_started_before_a_compaction_replaces_its_files(tmp_path: Path) -> None:
    """A compaction changes no row, so an overwrite whose writer started before it is
    not refused: it replaces the compacted files (was: CommitConflictError, the user's
    overwrite lost to background maintenance)."""
    tbl = make(tmp_path)
    for v in range(3):
        upsert(tbl, range(10), v)
    base = tbl.latest_snapshot().id
    writer = tbl.new_writer()
    writer.write(pa.table({"id": [100, 101], "v": [7, 7], "ts": [0, 0]}, schema=SCHEMA))
    messages = writer.prepare_commit()
    assert tbl.compact(full=True).commit_kind == "COMPACT"
    snap = tbl.commit(messages, mode="overwrite", base_snapshot_id=base)
    assert snap is not None and snap.commit_kind == "OVERWRITE"
    assert state(tbl) == [{"id": 100, "v": 7, "ts": 0}, {"id": 101, "v": 7, "ts": 0}]
    assert tbl.to_arrow(snapshot_id=base + 1).num_rows == 10  # the compaction kept its rows


def test_a_compaction_committed_after_an_overwrite_loses(tmp_path: Path) -> None:
    """The other order: the compaction's files were replaced, so it conflicts and the
    overwritten rows do not come back."""
    tbl = make(tmp_path)
    for v in range(3):
        upsert(tbl, range(10), v)
    job = prepare_compaction(tbl.file_io, tbl.table_schema, full=True)
    assert job is not None
    tbl.write(pa.table({"id": [100], "v": [7], "ts": [0]}, schema=SCHEMA), mode="overwrite")
    with pytest.raises(CommitConflictError):
        commit_compaction(tbl.file_io, tbl.table_schema, job)
    assert state(tbl) == [{"id": 100, "v": 7, "ts": 0}]
    assert all(not tbl.file_io.exists(f.path) for m in job.messages for f in m.new_files)


def test_files_replaced_and_expired_while_compacting_are_a_conflict(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Another process overwrites the table and expires the old files while the
    compaction reads them (was: a bare FileNotFoundError)."""
    from raylake.table.pk import compaction

    tbl = make(tmp_path)
    upsert(tbl, range(30), 1)
    upsert(tbl, range(30), 2)
    read_file = compaction.read_file
    meanwhile: list[int] = []
    once = threading.Lock()  # buckets are compacted on two threads

    def replaced_then_read(*args: Any, **kwargs: Any) -> Any:
        with once:
            if not meanwhile:
                other = raylake.open_table(tbl.uri)
                for v in (3, 4):  # the second overwrite lets expiration delete the first's
                    other.write(pa.table({"id": [v], "v": [v], "ts": [0]}), mode="overwrite")
                meanwhile.append(len(other.expire_snapshots(retain_last=1).deleted_data_files))
        return read_file(*args, **kwargs)

    monkeypatch.setattr(compaction, "read_file", replaced_then_read)
    with pytest.raises(CommitConflictError, match="replaced by a concurrent commit"):
        tbl.compact(full=True)
    assert meanwhile[0] > 0
    assert state(tbl) == [{"id": 4, "v": 4, "ts": 0}]
    # What the compaction wrote is gone: no snapshot names it, and no file is left over.
    assert tbl.remove_orphan_files(older_than=timedelta(0), dry_run=True).paths == ()


def test_a_compaction_prepared_with_an_older_schema_keeps_newer_columns(tmp_path: Path) -> None:
    """The schema changes between the caller loading it and the compaction reading the
    latest snapshot (was: files rewritten under the older schema, the new column lost)."""
    tbl = make(tmp_path)
    upsert(tbl, range(10), 1)
    other = raylake.open_table(tbl.uri)
    with other.update_schema() as u:
        u.add_column("z", pa.string())
    other.write(pa.table({"id": [1, 2], "v": [2, 2], "ts": [0, 0], "z": ["a", "b"]}))
    job = prepare_compaction(tbl.file_io, tbl.table_schema, full=True)
    assert job is not None
    snap = commit_compaction(tbl.file_io, tbl.table_schema, job)
    assert snap.commit_kind == "COMPACT" and snap.schema_id == 1
    got = {r["id"]: r["z"] for r in other.to_arrow().to_pylist()}
    assert got == {i: {1: "a", 2: "b"}.get(i) for i in range(10)}


def test_write_committed_during_compaction_still_wins(tmp_path: Path) -> None:
    tbl = make(tmp_path)
    upsert(tbl, range(30), 1)
    upsert(tbl, range(30), 2)
    job = prepare_compaction(tbl.file_io, tbl.table_schema)
    assert job is not None
    upsert(tbl, range(10), 3)  # lands between the compaction's read and its commit
    tbl.delete({"id": [29]})
    commit_compaction(tbl.file_io, tbl.table_schema, job)
    values = {r["id"]: r["v"] for r in state(tbl)}
    assert values == {i: 3 if i < 10 else 2 for i in range(29)}


def test_sequence_field_tombstones_survive_compaction(tmp_path: Path) -> None:
    tbl = make(tmp_path, **{"sequence.field": "ts"})
    tbl.write(pa.table({"id": [1, 2], "v": [1, 1], "ts": [5, 5]}))
    tbl.delete({"id": [1]})
    tbl.compact(full=True)
    tbl.write(pa.table({"id": [1, 2], "v": [9, 9], "ts": [3, 3]}))  # late and older
    assert state(tbl) == [{"id": 2, "v": 1, "ts": 5}]
    tbl.write(pa.table({"id": [1], "v": [7], "ts": [6]}))
    assert [r["v"] for r in state(tbl)] == [7, 1]


def test_a_failing_automatic_compaction_does_not_fail_the_committed_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The write's snapshot exists before auto-compaction runs; an error there used to
    # reach the caller, who would retry the write or (Ray) delete its committed files.
    import raylake.table.pk.compaction as compaction

    schema = pa.schema([("k", pa.int64()), ("v", pa.int64())])
    tbl = raylake.create_table(
        str(tmp_path / "t"),
        schema,
        primary_key=["k"],
        buckets=1,
        options={"compaction.max-overlapping-files": "1"},
    )
    tbl.write(pa.table({"k": [1, 2], "v": [1, 1]}))

    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError("disk full while compacting")

    monkeypatch.setattr(compaction, "compact", broken)
    snap = tbl.write(pa.table({"k": [2, 3], "v": [2, 2]}))
    assert snap.id == 2 and snap.commit_kind == "APPEND"
    assert tbl.to_arrow().sort_by("k").to_pylist() == [
        {"k": 1, "v": 1},
        {"k": 2, "v": 2},
        {"k": 3, "v": 2},
    ]
