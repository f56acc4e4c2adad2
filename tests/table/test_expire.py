"""Snapshot expiration: which snapshots go, which files go, and that retained reads never break."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from property_depth import examples

import raylake
from raylake.errors import CorruptMetadataError, InvalidOptionError, SnapshotExpiredError
from raylake.format.snapshot import snapshot_path
from raylake.table import Table
from raylake.table.references import manifest_paths

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])
PARTS = ("a", "b", "c")


def make_table(path: Path, **options: str) -> Table:
    return raylake.create_table(str(path), SCHEMA, partition_by=["p"], options=options)


def rows(ids: list[int], part: str) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "p": [part] * len(ids)})


def read_sorted(tbl: Table, snapshot_id: int) -> pa.Table:
    return tbl.to_arrow(snapshot_id=snapshot_id).sort_by("id")


def files_on_disk(tbl: Table, directory: str) -> set[str]:
    return {p for p, _ in tbl.file_io.list_files(directory)}


def live_paths(tbl: Table, snapshot_id: int) -> set[str]:
    return {p for s in tbl.scan(snapshot_id=snapshot_id).plan() for p in s.paths}


def ids_of(tbl: Table) -> list[int]:
    return [s.id for s in tbl.snapshots()]


def commit_n(tbl: Table, n: int) -> None:
    for i in range(n):
        tbl.write(rows([i], PARTS[i % 3]))


# -- which snapshots expire -------------------------------------------------------------


def test_retain_last_keeps_the_newest(tmp_path: Path) -> None:
    tbl = make_table(tmp_path / "t")
    commit_n(tbl, 5)
    result = tbl.expire_snapshots(retain_last=2)
    assert result.expired_snapshot_ids == (1, 2, 3) and result.snapshots_removed == 3
    assert ids_of(tbl) == [4, 5]
    assert tbl.expire_snapshots(retain_last=2).expired_snapshot_ids == ()


def test_retain_last_defaults_to_the_table_option(tmp_path: Path) -> None:
    tbl = make_table(tmp_path / "t", **{"snapshot.num-retained.min": "3"})
    commit_n(tbl, 5)
    tbl.expire_snapshots()
    assert ids_of(tbl) == [3, 4, 5]


def test_older_than_and_retain_last_must_both_allow_expiry(tmp_path: Path) -> None:
    tbl = make_table(tmp_path / "t")
    commit_n(tbl, 5)
    times = {s.id: s.time_millis for s in tbl.snapshots()}
    # Older than snapshot 3's time: at most 1 and 2 (fewer if they share its millisecond).
    result = tbl.expire_snapshots(retain_last=1, older_than=times[3], dry_run=True)
    assert result.expired_snapshot_ids == tuple(i for i in (1, 2) if times[i] < times[3])
    # A cutoff in the future: only retain_last limits.
    future = datetime.now(timezone.utc) + timedelta(days=1)
    assert tbl.expire_snapshots(retain_last=4, older_than=future).expired_snapshot_ids == (1,)
    # An age that nothing is old enough for.
    assert tbl.expire_snapshots(retain_last=1, older_than=timedelta(days=1)).snapshots_removed == 0
    assert ids_of(tbl) == [2, 3, 4, 5]


def test_naive_datetimes_are_local_time(tmp_path: Path) -> None:
    tbl = make_table(tmp_path / "t")
    commit_n(tbl, 3)
    naive_future = datetime.now() + timedelta(minutes=5)
    assert tbl.expire_snapshots(retain_last=1, older_than=naive_future).snapshots_removed == 2


def test_the_latest_snapshot_is_never_expired(tmp_path: Path) -> None:
    tbl = make_table(tmp_path / "t")
    commit_n(tbl, 1)
    far_future = datetime(2999, 1, 1, tzinfo=timezone.utc)
    assert tbl.expire_snapshots(retain_last=1, older_than=far_future).snapshots_removed == 0
    assert ids_of(tbl) == [1]
    assert read_sorted(tbl, 1).num_rows == 1


def test_time_travel_to_an_expired_time_says_it_expired(tmp_path: Path) -> None:
    """(was: "has no snapshot at or before", as if the table had been empty then)"""
    tbl = make_table(tmp_path / "t")
    commit_n(tbl, 3)
    first = tbl.snapshot(1).time_millis
    tbl.expire_snapshots(retain_last=1)
    with pytest.raises(SnapshotExpiredError, match="earliest snapshot is 3") as info:
        tbl.to_arrow(as_of=first)
    assert info.value.earliest == 3


def test_empty_table_has_nothing_to_expire(tmp_path: Path) -> None:
    tbl = make_table(tmp_path / "t")
    assert tbl.expire_snapshots(retain_last=1).expired_snapshot_ids == ()


def test_a_consumer_protects_its_next_snapshot_the_one_before_and_all_after(
    tmp_path: Path,
) -> None:
    tbl = make_table(tmp_path / "t")
    commit_n(tbl, 6)
    tbl.reset_consumer("slow", 3)
    tbl.reset_consumer("fast", 6)
    assert tbl.expire_snapshots(retain_last=1).expired_snapshot_ids == (1,)
    assert read_sorted(tbl, 2).column("id").to_pylist() == [0, 1]
    tbl.delete_consumer("slow")
    assert tbl.expire_snapshots(retain_last=1).expired_snapshot_ids == (2, 3, 4)
    tbl.delete_consumer("fast")
    tbl.reset_consumer("tail", 7)  # waiting for the next commit protects only the latest
    commit_n(tbl, 1)
    assert ids_of(tbl) == [5, 6, 7]
    assert tbl.expire_snapshots(retain_last=1).expired_snapshot_ids == (5,)


def test_dry_run_reports_and_deletes_nothing(tmp_path: Path) -> None:
    tbl = make_table(tmp_path / "t", **{"manifest.merge-min-count": "2"})
    commit_n(tbl, 3)
    tbl.write(rows([100], "a"), mode="overwrite")
    before = {d: files_on_disk(tbl, d) for d in ("data", "manifest", "snapshot")}
    planned = tbl.expire_snapshots(retain_last=1, dry_run=True)
    assert planned.dry_run and planned.snapshots_removed == 3 and planned.files_removed > 0
    assert {d: files_on_disk(tbl, d) for d in before} == before
    done = tbl.expire_snapshots(retain_last=1)
    assert done.expired_snapshot_ids == planned.expired_snapshot_ids
    assert set(done.deleted_data_files) == set(planned.deleted_data_files)
    assert set(done.deleted_manifests) == set(planned.deleted_manifests)


# -- which files go ---------------------------------------------------------------------


def test_files_go_only_when_no_retained_snapshot_needs_them(tmp_path: Path) -> None:
    tbl = make_table(tmp_path / "t", **{"manifest.merge-min-count": "2"})
    tbl.write(rows([1], "a"))  # 1
    tbl.write(rows([2], "b"))  # 2
    old_a = live_paths(tbl, 2)
    tbl.write(rows([3], "a"), mode="overwrite", overwrite_filter="p = 'a'")  # 3
    tbl.write(rows([4], "c"))  # 4
    a_file_1 = {p for p in old_a if "p=a" in p}

    # Expiring 1..2 keeps the file snapshot 3's delta removed: a reader of 3's delta needs it.
    result = tbl.expire_snapshots(retain_last=2)
    assert result.expired_snapshot_ids == (1, 2)
    assert a_file_1 <= files_on_disk(tbl, "data")

    # Once 3 goes too, nothing references it any more.
    result = tbl.expire_snapshots(retain_last=1)
    assert set(result.deleted_data_files) == a_file_1
    assert files_on_disk(tbl, "data") == live_paths(tbl, 4)
    named = set(manifest_paths([tbl.snapshot(4)]))
    assert files_on_disk(tbl, "manifest") == named
    assert result.deleted_manifests and not set(result.deleted_manifests) & named
    assert read_sorted(tbl, 4).column("id").to_pylist() == [2, 3, 4]


def test_full_overwrite_then_expire_leaves_only_the_new_files(tmp_path: Path) -> None:
    tbl = make_table(tmp_path / "t")
    commit_n(tbl, 4)
    tbl.write(rows([10, 11], "b"), mode="overwrite")
    tbl.write(rows([12], "b"))
    tbl.expire_snapshots(retain_last=1)
    assert files_on_disk(tbl, "data") == live_paths(tbl, 6)
    assert read_sorted(tbl, 6).column("id").to_pylist() == [10, 11, 12]


def test_primary_key_changelog_and_compaction(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.string())])
    options = {"changelog-producer": "input"}
    tbl = raylake.create_table(
        str(tmp_path / "pk"), schema, primary_key=["k"], buckets=2, options=options
    )
    for i in range(4):
        tbl.write(pa.table({"k": pa.array([1, 2, 3, i + 10], pa.int64()), "v": [f"v{i}"] * 4}))
    changelog_4 = tbl.changelog(4)
    assert tbl.compact(full=True) is not None  # snapshot 5
    reads = {i: tbl.to_arrow(snapshot_id=i).sort_by("k") for i in (4, 5)}

    result = tbl.expire_snapshots(retain_last=2)
    assert result.expired_snapshot_ids == (1, 2, 3)
    assert any("changelog" in p for p in result.deleted_data_files)
    assert tbl.changelog(4).equals(changelog_4)
    assert all(tbl.to_arrow(snapshot_id=i).sort_by("k").equals(t) for i, t in reads.items())

    # The compaction's own delta removed files whose rows live on in its output: they go.
    tbl.expire_snapshots(retain_last=1)
    assert files_on_disk(tbl, "data") == live_paths(tbl, 5)
    assert tbl.to_arrow().sort_by("k").equals(reads[5])


def test_a_reader_that_planned_a_retained_snapshot_reads_it_after_expiry(tmp_path: Path) -> None:
    tbl = make_table(tmp_path / "t", **{"manifest.merge-min-count": "2"})
    commit_n(tbl, 4)
    tbl.write(rows([7], "a"), mode="overwrite", overwrite_filter="p = 'a'")
    scan = tbl.scan(snapshot_id=4)
    splits = scan.plan()
    expected = scan.to_arrow().sort_by("id")
    tbl.expire_snapshots(retain_last=2)
    got = pa.Table.from_batches(list(scan.read_context().read_all(splits))).sort_by("id")
    assert got.equals(expected)


def test_commits_after_expiry_work(tmp_path: Path) -> None:
    tbl = make_table(tmp_path / "t", **{"manifest.merge-min-count": "2"})
    commit_n(tbl, 4)
    tbl.expire_snapshots(retain_last=1)
    tbl.write(rows([50], "a"))
    tbl.write(rows([51], "a"), mode="overwrite", overwrite_filter="p = 'a'")
    assert ids_of(tbl) == [4, 5, 6]
    assert sorted(tbl.to_arrow().column("id").to_pylist()) == [1, 2, 51]


def test_expiring_while_another_thread_commits(tmp_path: Path) -> None:
    """Commits never build on an expired snapshot: every commit lands and every survivor reads."""
    import threading

    tbl = make_table(tmp_path / "t", **{"manifest.merge-min-count": "2"})
    commit_n(tbl, 2)
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for i in range(2, 14):
                tbl.write(rows([i], PARTS[i % 3]))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    while thread.is_alive():
        tbl.expire_snapshots(retain_last=2)
    thread.join()
    assert not errors
    for snap in tbl.snapshots():  # snapshot i holds rows 0..i-1
        assert read_sorted(tbl, snap.id).column("id").to_pylist() == list(range(snap.id))
    tbl.expire_snapshots(retain_last=1)
    assert tbl.to_arrow().num_rows == 14
    assert tbl.remove_orphan_files(older_than=timedelta(0)).paths == ()


def test_two_expirations_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One keeps three snapshots; the other, run while the first reads what those need,
    keeps one and deletes the manifests of the other two (was: CorruptMetadataError,
    'manifest file is missing', from the first)."""
    from raylake.table import maintenance

    tbl = make_table(tmp_path / "t", **{"manifest.merge-min-count": "2"})
    commit_n(tbl, 6)
    other = raylake.open_table(tbl.uri)
    choose = maintenance._exclusive_files
    others: list[tuple[int, ...]] = []

    def meanwhile(*args: Any) -> Any:
        if not others:
            others.append(())
            others[0] = other.expire_snapshots(retain_last=1).expired_snapshot_ids
        return choose(*args)

    monkeypatch.setattr(maintenance, "_exclusive_files", meanwhile)
    result = tbl.expire_snapshots(retain_last=3)
    assert result.expired_snapshot_ids == (1, 2, 3) and others == [(1, 2, 3, 4, 5)]
    assert ids_of(tbl) == [6] and read_sorted(tbl, 6).column("id").to_pylist() == list(range(6))
    assert files_on_disk(tbl, "data") == live_paths(tbl, 6)
    assert files_on_disk(tbl, "manifest") == set(manifest_paths(tbl.snapshots()))


def test_a_crash_after_deleting_snapshot_files_breaks_no_retained_read(tmp_path: Path) -> None:
    """Expiration deletes snapshot files first; stopping right there must be harmless."""
    tbl = make_table(tmp_path / "t", **{"manifest.merge-min-count": "2"})
    commit_n(tbl, 3)
    tbl.write(rows([9], "a"), mode="overwrite")
    tbl.write(rows([10], "b"))
    expected = read_sorted(tbl, 5)
    plan = tbl.expire_snapshots(retain_last=1, dry_run=True)
    for snapshot_id in plan.expired_snapshot_ids:  # what expiration does before it "crashes"
        tbl.file_io.delete(snapshot_path(snapshot_id))
    assert read_sorted(tbl, 5).equals(expected)
    # What the crash left behind is unreferenced, so orphan removal takes exactly it.
    orphans = tbl.remove_orphan_files(older_than=timedelta(0))
    assert set(orphans.paths) == set(plan.deleted_data_files) | set(plan.deleted_manifests)
    assert read_sorted(tbl, 5).equals(expected)


def test_memory_filesystem(tmp_path: Path) -> None:
    uri = f"memory://raylake-expire-{uuid.uuid4().hex}/t"
    tbl = raylake.create_table(uri, SCHEMA, partition_by=["p"])
    try:
        commit_n(tbl, 3)
        tbl.write(rows([5], "a"), mode="overwrite")
        assert tbl.expire_snapshots(retain_last=1).expired_snapshot_ids == (1, 2, 3)
        assert tbl.to_arrow().column("id").to_pylist() == [5]
    finally:
        tbl.file_io.fs.rm(tbl.file_io.root, recursive=True)


# -- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "2"])
def test_bad_retain_last(tmp_path: Path, bad: Any) -> None:
    tbl = make_table(tmp_path / "t")
    commit_n(tbl, 2)
    with pytest.raises(InvalidOptionError, match="retain_last"):
        tbl.expire_snapshots(retain_last=bad)
    assert ids_of(tbl) == [1, 2]


# 7 and 0 would be epoch milliseconds in 1970, which nothing is older than: refused, not
# a silent no-op (an age is a timedelta).
@pytest.mark.parametrize("bad", ["7d", 1.5, True, timedelta(days=-1), 7, 0])
def test_bad_older_than(tmp_path: Path, bad: Any) -> None:
    tbl = make_table(tmp_path / "t")
    commit_n(tbl, 2)
    with pytest.raises(InvalidOptionError, match="older_than"):
        tbl.expire_snapshots(retain_last=1, older_than=bad)
    assert ids_of(tbl) == [1, 2]


def test_older_than_takes_numpy_epoch_milliseconds_as_as_of_does(tmp_path: Path) -> None:
    """A time read from a DataFrame (np.int64 milliseconds) is a time for time travel
    (as_of) but was refused as no int by expire_snapshots and remove_orphan_files."""
    import numpy as np

    tbl = make_table(tmp_path / "t")
    commit_n(tbl, 3)
    latest = np.int64(tbl.latest_snapshot().time_millis)  # type: ignore[union-attr]
    assert tbl.to_arrow(as_of=latest).num_rows == 3
    assert tbl.remove_orphan_files(older_than=latest, dry_run=True).paths == ()
    result = tbl.expire_snapshots(retain_last=1, older_than=latest, consumers_older_than=latest)
    assert result.expired_snapshot_ids == (1, 2) and ids_of(tbl) == [3]
    with pytest.raises(InvalidOptionError, match="older_than"):
        tbl.expire_snapshots(older_than=np.int64(7))  # 1970: an age meant as a time


def test_a_corrupt_consumer_file_stops_expiration(tmp_path: Path) -> None:
    tbl = make_table(tmp_path / "t")
    commit_n(tbl, 3)
    (tmp_path / "t" / "consumer").mkdir()
    (tmp_path / "t" / "consumer" / "consumer-job").write_text("{oops")
    with pytest.raises(CorruptMetadataError, match=r"consumer-job.*not valid JSON"):
        tbl.expire_snapshots(retain_last=1)
    assert ids_of(tbl) == [1, 2, 3]


def test_a_missing_manifest_of_a_retained_snapshot_stops_expiration(tmp_path: Path) -> None:
    tbl = make_table(tmp_path / "t")
    commit_n(tbl, 3)
    tbl.file_io.delete(tbl.snapshot(3).delta_manifests[0].path)
    before = files_on_disk(tbl, "data")
    with pytest.raises(CorruptMetadataError, match="manifest file is missing"):
        tbl.expire_snapshots(retain_last=1)
    assert ids_of(tbl) == [1, 2, 3] and files_on_disk(tbl, "data") == before


# -- random histories against a model ----------------------------------------------------

CONSUMERS = ("c1", "c2")
APPEND = st.tuples(st.just("append"), st.sampled_from(PARTS), st.integers(1, 3))
OVERWRITE = st.tuples(st.just("overwrite"), st.sampled_from((None, *PARTS)), st.integers(1, 2))
EXPIRE = st.tuples(st.just("expire"), st.integers(1, 3), st.one_of(st.none(), st.integers(0, 20)))
# Writes outnumber the rest, so that histories are long enough for expiration to matter.
OPS = st.one_of(
    APPEND,
    APPEND,
    OVERWRITE,
    OVERWRITE,
    EXPIRE,
    st.tuples(st.just("consume"), st.sampled_from(CONSUMERS), st.integers(0, 20)),
    st.tuples(st.just("drop"), st.sampled_from(CONSUMERS), st.just(0)),
)


class History:
    """The model: what each snapshot reads and which files it has, recorded at commit time."""

    def __init__(self, tbl: Table) -> None:
        self.tbl = tbl
        self.reads: dict[int, pa.Table] = {}
        self.live: dict[int, set[str]] = {}
        self.times: dict[int, int] = {}
        self.consumers: dict[str, int] = {}
        self.existing: list[int] = []
        self.next_id = 0

    def write(self, part: str | None, n: int, overwrite: bool) -> None:
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        data = rows(ids, part or "a")
        if overwrite and part is not None:
            snap = self.tbl.write(data, mode="overwrite", overwrite_filter=f"p = '{part}'")
        elif overwrite:
            snap = self.tbl.write(data, mode="overwrite")
        else:
            snap = self.tbl.write(data)
        self.reads[snap.id] = read_sorted(self.tbl, snap.id)
        self.live[snap.id] = live_paths(self.tbl, snap.id)
        self.times[snap.id] = snap.time_millis
        self.existing.append(snap.id)

    def expected_expiry(self, retain_last: int, cutoff: int | None) -> list[int]:
        ids = self.existing
        if len(ids) <= retain_last:
            return []
        # A consumer keeps its next snapshot and the one before it (a stream's diff base).
        end = min([ids[-retain_last], *(c - 1 for c in self.consumers.values())])
        out = []
        for i in ids:
            if i >= end or (cutoff is not None and self.times[i] >= cutoff):
                break
            out.append(i)
        return out

    def needed_files(self) -> set[str]:
        """Files live in a retained snapshot, plus those a retained commit removed."""
        needed: set[str] = set()
        for i in self.existing:
            needed |= self.live[i] | (self.live.get(i - 1, set()) - self.live[i])
        return needed


def apply(history: History, op: tuple[str, Any, Any]) -> None:
    kind, a, b = op
    tbl = history.tbl
    if kind in ("append", "overwrite"):
        history.write(a, b, overwrite=kind == "overwrite")
    elif kind == "consume":
        choices = [*history.existing, (history.existing[-1] if history.existing else 0) + 1]
        target = choices[b % len(choices)]
        tbl.reset_consumer(a, target)
        history.consumers[a] = target
    elif kind == "drop":
        tbl.delete_consumer(a)
        history.consumers.pop(a, None)
    else:
        cutoff = None
        if b is not None and history.existing:
            cutoff = history.times[history.existing[b % len(history.existing)]]
        expected = history.expected_expiry(a, cutoff)
        data_before = files_on_disk(tbl, "data")
        result = tbl.expire_snapshots(retain_last=a, older_than=cutoff)
        assert list(result.expired_snapshot_ids) == expected
        event(f"expired: {bool(expected)}, deleted data: {bool(result.deleted_data_files)}")
        history.existing = [i for i in history.existing if i not in expected]
        if expected:
            assert files_on_disk(tbl, "data") == history.needed_files()
        else:
            assert files_on_disk(tbl, "data") == data_before


def check_invariants(history: History) -> None:
    tbl = history.tbl
    assert ids_of(tbl) == history.existing
    for snapshot_id in history.existing:
        assert read_sorted(tbl, snapshot_id).equals(history.reads[snapshot_id])
    for target in history.consumers.values():
        if target in history.reads:  # a consumer's next snapshot stays fully readable
            assert target in history.existing
            assert read_sorted(tbl, target).equals(history.reads[target])
    assert history.needed_files() <= files_on_disk(tbl, "data")
    assert files_on_disk(tbl, "manifest") == set(manifest_paths(tbl.snapshots()))


@settings(
    max_examples=examples(50),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(OPS, min_size=4, max_size=14), last=EXPIRE)
def test_random_histories_never_break_retained_reads(
    tmp_path: Path, ops: list[tuple[str, Any, Any]], last: tuple[str, Any, Any]
) -> None:
    tbl = make_table(tmp_path / uuid.uuid4().hex, **{"manifest.merge-min-count": "3"})
    history = History(tbl)
    for op in [*ops, last]:
        apply(history, op)
        check_invariants(history)
