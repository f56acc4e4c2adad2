"""Orphan-file removal: files no snapshot references, older than an age guard."""

from __future__ import annotations

import os
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from property_depth import examples

import raylake
from raylake.errors import CorruptMetadataError, InvalidOptionError
from raylake.format.manifest import ADD, entries_table, write_manifest
from raylake.table import Table

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])
NOW = timedelta(0)


def make_table(path: Path) -> Table:
    return raylake.create_table(str(path), SCHEMA, partition_by=["p"])


def rows(ids: list[int], part: str = "a") -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "p": [part] * len(ids)})


def all_files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def crashed_write(tbl: Table, data: pa.Table) -> list[str]:
    """A writer that wrote its files and died before committing."""
    writer = tbl.new_writer()
    writer.write(data)
    return [f.path for m in writer.prepare_commit() for f in m.new_files]


def age(root: Path, rel: str, days: float) -> None:
    when = time.time() - days * 86400
    os.utime(root / rel, (when, when))


def test_uncommitted_files_are_removed_and_committed_ones_kept(tmp_path: Path) -> None:
    root = tmp_path / "t"
    tbl = make_table(root)
    tbl.write(rows([1, 2]))
    tbl.write(rows([3], "b"))
    expected = tbl.to_arrow().sort_by("id")
    committed = all_files(root)
    orphans = crashed_write(tbl, rows([9, 9, 9], "c"))
    result = tbl.remove_orphan_files(older_than=NOW)
    assert set(result.paths) == set(orphans) and result.files_removed == len(orphans)
    assert all_files(root) == committed
    assert tbl.to_arrow().sort_by("id").equals(expected)


def test_the_age_guard_protects_files_of_writers_still_running(tmp_path: Path) -> None:
    root = tmp_path / "t"
    tbl = make_table(root)
    tbl.write(rows([1]))
    young = crashed_write(tbl, rows([5]))
    old = crashed_write(tbl, rows([6]))
    for rel in old:
        age(root, rel, days=2)
    assert set(tbl.remove_orphan_files().paths) == set(old)  # default: older than 1 day
    assert all((root / rel).exists() for rel in young)
    cutoff = datetime.now(timezone.utc) - timedelta(hours=1)
    assert tbl.remove_orphan_files(older_than=cutoff).paths == ()
    assert set(tbl.remove_orphan_files(older_than=NOW).paths) == set(young)


def test_dry_run_lists_and_deletes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "t"
    tbl = make_table(root)
    tbl.write(rows([1]))
    orphans = crashed_write(tbl, rows([2]))
    before = all_files(root)
    result = tbl.remove_orphan_files(older_than=NOW, dry_run=True)
    assert result.dry_run and set(result.paths) == set(orphans)
    assert all_files(root) == before


def test_unreferenced_manifests_and_changelog_files_are_orphans(tmp_path: Path) -> None:
    root = tmp_path / "t"
    tbl = make_table(root)
    tbl.write(rows([1]))
    files = crashed_write(tbl, rows([2]))
    datafile = tbl.new_writer()
    datafile.write(rows([3]))
    messages = datafile.prepare_commit()
    entries = entries_table([(ADD, f) for m in messages for f in m.new_files], tbl.table_schema)
    stray_manifest = write_manifest(tbl.file_io, entries).path  # a committer that died
    # Changelog files live beside the data files of their bucket (docs/format.md).
    stray_changelog = f"data/p=a/bucket-0/data-changelog-{uuid.uuid4().hex}.parquet"
    (root / stray_changelog).parent.mkdir(parents=True, exist_ok=True)
    (root / stray_changelog).write_bytes(b"PAR1")
    expected = {*files, *(f.path for m in messages for f in m.new_files), stray_manifest}
    expected.add(stray_changelog)
    assert set(tbl.remove_orphan_files(older_than=NOW).paths) == expected
    assert tbl.to_arrow().column("id").to_pylist() == [1]


def test_stray_temp_files_go_but_metadata_stays(tmp_path: Path) -> None:
    root = tmp_path / "t"
    tbl = make_table(root)
    tbl.write(rows([1]))
    tbl.reset_consumer("job", 1)
    temps = [
        f"snapshot/snapshot-2.json.{uuid.uuid4().hex}.tmp",
        f"consumer/consumer-job.{uuid.uuid4().hex}.tmp",
        f"schema/schema-1.json.{uuid.uuid4().hex}.tmp",
        f"manifest/manifest-x.parquet.{uuid.uuid4().hex}.tmp",
    ]
    for rel in temps:
        (root / rel).write_bytes(b"half a file")
    (root / "snapshot" / "NOTES").write_text("not ours to judge")
    keep = all_files(root) - set(temps)
    assert set(tbl.remove_orphan_files(older_than=NOW).paths) == set(temps)
    assert all_files(root) == keep
    assert [c.consumer_id for c in tbl.consumers()] == ["job"]


def test_the_marker_of_a_crashed_expiration_goes_a_running_ones_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An expiration that died while it held its marker left consumer/EXPIRING-<uuid>
    behind for good (every registration read it again); one running now keeps its own."""
    root = tmp_path / "t"
    tbl = make_table(root)
    for i in range(3):
        tbl.write(rows([i]))
    tbl.reset_consumer("job", 3)

    def crash(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    from raylake.format.consumer import ConsumerManager

    monkeypatch.setattr(ConsumerManager, "_release", crash)  # dies before it lets go
    with pytest.raises(KeyboardInterrupt):
        tbl.expire_snapshots(retain_last=1)
    monkeypatch.undo()
    crashed = [str(p.relative_to(root)) for p in (root / "consumer").glob("EXPIRING-*")]
    assert len(crashed) == 1
    age(root, crashed[0], days=2)
    running = f"consumer/EXPIRING-{uuid.uuid4().hex}"
    (root / running).write_text('{"time_millis": 0}')
    (root / "consumer" / "EXPIRING-notes").write_text("not ours")
    age(root, "consumer/EXPIRING-notes", days=2)
    assert tbl.remove_orphan_files(older_than=NOW).paths == tuple(crashed)
    assert {p.name for p in (root / "consumer").iterdir()} == {
        "consumer-job",
        running.split("/")[1],
        "EXPIRING-notes",
    }


def test_files_of_every_snapshot_are_referenced_not_only_the_latest(tmp_path: Path) -> None:
    root = tmp_path / "t"
    tbl = make_table(root)
    tbl.write(rows([1]))
    tbl.write(rows([2]), mode="overwrite")  # snapshot 1's file is dead in 2 but 1 still reads it
    assert tbl.remove_orphan_files(older_than=NOW).paths == ()
    assert tbl.to_arrow(snapshot_id=1).column("id").to_pylist() == [1]


def test_empty_or_new_table(tmp_path: Path) -> None:
    tbl = make_table(tmp_path / "t")
    assert tbl.remove_orphan_files(older_than=NOW).paths == ()
    files = crashed_write(tbl, rows([1]))
    assert set(tbl.remove_orphan_files(older_than=NOW).paths) == set(files)


def test_a_missing_manifest_of_an_existing_snapshot_is_an_error(tmp_path: Path) -> None:
    root = tmp_path / "t"
    tbl = make_table(root)
    tbl.write(rows([1]))
    crashed_write(tbl, rows([2]))
    tbl.file_io.delete(tbl.snapshot(1).delta_manifests[0].path)
    before = all_files(root)
    with pytest.raises(CorruptMetadataError, match="manifest file is missing"):
        tbl.remove_orphan_files(older_than=NOW)
    assert all_files(root) == before


def test_a_corrupt_manifest_is_an_error(tmp_path: Path) -> None:
    root = tmp_path / "t"
    tbl = make_table(root)
    tbl.write(rows([1]))
    (root / tbl.snapshot(1).delta_manifests[0].path).write_bytes(b"not parquet")
    with pytest.raises(CorruptMetadataError, match="not a readable manifest"):
        tbl.remove_orphan_files(older_than=NOW)


@pytest.mark.parametrize("bad", ["1d", 2.5, None, timedelta(hours=-1), 1, 0])
def test_bad_older_than(tmp_path: Path, bad: Any) -> None:
    tbl = make_table(tmp_path / "t")
    with pytest.raises(InvalidOptionError, match="older_than"):
        tbl.remove_orphan_files(older_than=bad)


@settings(
    max_examples=examples(30),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["commit", "crash", "overwrite", "expire"]), st.integers(1, 3)),
        min_size=1,
        max_size=8,
    )
)
def test_random_mix_of_commits_and_crashes(tmp_path: Path, steps: list[tuple[str, int]]) -> None:
    """After removal, exactly the crashed writers' files are gone and every snapshot reads."""
    root = tmp_path / uuid.uuid4().hex
    tbl = make_table(root)
    crashed: set[str] = set()
    next_id = 0
    for kind, n in steps:
        data = rows(list(range(next_id, next_id + n)), "ab"[n % 2])
        next_id += n
        if kind == "commit":
            tbl.write(data)
        elif kind == "overwrite":
            tbl.write(data, mode="overwrite")
        elif kind == "expire":
            tbl.expire_snapshots(retain_last=2)
        else:
            crashed |= set(crashed_write(tbl, data))
    reads = {s.id: tbl.to_arrow(snapshot_id=s.id).sort_by("id") for s in tbl.snapshots()}
    before = all_files(root)
    result = tbl.remove_orphan_files(older_than=NOW)
    assert set(result.paths) == crashed
    assert all_files(root) == before - crashed
    for snapshot_id, expected in reads.items():
        assert tbl.to_arrow(snapshot_id=snapshot_id).sort_by("id").equals(expected)
