"""Consumer expiry: consumers that recorded no progress for a while stop holding snapshots
(``expire_snapshots(consumers_older_than=...)`` and the option ``consumer.expiration-time``)."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

import raylake
from raylake.cli import main
from raylake.errors import InvalidOptionError, StreamPositionExpiredError
from raylake.format.consumer import ConsumerProgress, consumer_path
from raylake.table import Table

SCHEMA = pa.schema([("id", pa.int64())])
DAY_MS = 86_400_000


def table_of(path: Path, commits: int = 5, **options: str) -> Table:
    tbl = raylake.create_table(str(path), SCHEMA, options=options)
    for i in range(commits):
        tbl.write(pa.table({"id": [i]}))
    return tbl


def idle_consumer(tbl: Table, consumer_id: str, next_snapshot_id: int, days: float) -> None:
    """A consumer whose progress was last recorded ``days`` ago (a reader that stopped)."""
    updated = int(time.time() * 1000 - days * DAY_MS)
    progress = ConsumerProgress(consumer_id, next_snapshot_id, updated)
    tbl.file_io.write_bytes(consumer_path(consumer_id), progress.to_bytes())


def test_an_idle_consumer_is_removed_and_stops_holding_snapshots(tmp_path: Path) -> None:
    tbl = table_of(tmp_path / "t")
    idle_consumer(tbl, "stopped-job", 2, days=3)
    tbl.reset_consumer("live-job", 4)

    kept = tbl.expire_snapshots(retain_last=1)
    assert kept.expired_snapshot_ids == () and kept.expired_consumer_ids == ()

    result = tbl.expire_snapshots(retain_last=1, consumers_older_than=timedelta(days=1))
    assert result.expired_consumer_ids == ("stopped-job",)
    assert [c.consumer_id for c in tbl.consumers()] == ["live-job"]
    # The live consumer reads 4 next, as a change against 3: both stay.
    assert result.expired_snapshot_ids == (1, 2)
    assert [s.id for s in tbl.snapshots()] == [3, 4, 5]


def test_a_dry_run_reports_what_a_run_removes_and_removes_nothing(tmp_path: Path) -> None:
    tbl = table_of(tmp_path / "t")
    idle_consumer(tbl, "stopped-job", 1, days=3)
    dry = tbl.expire_snapshots(retain_last=2, consumers_older_than=timedelta(days=1), dry_run=True)
    assert dry.expired_consumer_ids == ("stopped-job",)
    assert dry.expired_snapshot_ids == (1, 2, 3)
    assert [c.consumer_id for c in tbl.consumers()] == ["stopped-job"]
    assert len(tbl.snapshots()) == 5
    done = tbl.expire_snapshots(retain_last=2, consumers_older_than=timedelta(days=1))
    assert (done.expired_consumer_ids, done.expired_snapshot_ids) == (
        dry.expired_consumer_ids,
        dry.expired_snapshot_ids,
    )


def test_the_table_option_is_the_default_and_takes_paimon_durations(tmp_path: Path) -> None:
    tbl = table_of(tmp_path / "t", **{"consumer.expiration-time": "2 d"})
    idle_consumer(tbl, "three-days", 1, days=3)
    idle_consumer(tbl, "one-day", 4, days=1)
    result = tbl.expire_snapshots(retain_last=1)
    assert result.expired_consumer_ids == ("three-days",)
    assert result.expired_snapshot_ids == (1, 2)
    # An argument overrides the option.
    again = tbl.expire_snapshots(retain_last=1, consumers_older_than=timedelta(hours=12))
    assert again.expired_consumer_ids == ("one-day",)
    assert [s.id for s in tbl.snapshots()] == [5]


@pytest.mark.parametrize("value", ["0 d", "soon", "7 weeks", "-1 h"])
def test_a_bad_expiration_time_is_refused_at_creation(tmp_path: Path, value: str) -> None:
    with pytest.raises(InvalidOptionError, match=r"consumer\.expiration-time"):
        table_of(tmp_path / "t", **{"consumer.expiration-time": value})
    assert not (tmp_path / "t").exists()


def test_a_bad_age_names_the_argument(tmp_path: Path) -> None:
    tbl = table_of(tmp_path / "t", commits=1)
    with pytest.raises(InvalidOptionError, match="consumers_older_than"):
        tbl.expire_snapshots(consumers_older_than=timedelta(days=-1))
    with pytest.raises(InvalidOptionError, match="consumers_older_than"):
        tbl.expire_snapshots(consumers_older_than=7)


def test_a_consumer_that_recorded_progress_stays(tmp_path: Path) -> None:
    tbl = table_of(tmp_path / "t")
    idle_consumer(tbl, "job", 2, days=3)
    tbl.reset_consumer("job", 3)  # the job came back and recorded its progress
    result = tbl.expire_snapshots(retain_last=1, consumers_older_than=timedelta(days=1))
    assert result.expired_consumer_ids == () and result.expired_snapshot_ids == (1,)


def test_the_cli_removes_idle_consumers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tbl = table_of(tmp_path / "t")
    idle_consumer(tbl, "stopped-job", 1, days=3)
    assert main(["expire", tbl.uri, "--consumers-older-than", "1d", "--dry-run"]) == 0
    assert "would expire 4 snapshot(s) (1..4)" in capsys.readouterr().out
    assert main(["expire", tbl.uri, "--consumers-older-than", "1d"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("expired 4 snapshot(s) (1..4)")
    assert out.rstrip().endswith("1 consumer(s) (stopped-job)")
    assert tbl.consumers() == []


def test_a_reader_whose_consumer_expired_is_told_what_it_lost(tmp_path: Path) -> None:
    tbl = table_of(tmp_path / "t", commits=1)
    reader = tbl.stream(consumer_id="job", start="earliest")
    assert reader.poll() is not None
    reader.checkpoint()
    saved = tbl.consumer("job")
    assert saved is not None
    idle_consumer(tbl, "job", saved.next_snapshot_id, days=3)  # then it paused for 3 days
    for i in range(3):
        tbl.write(pa.table({"id": [i + 1]}))
    result = tbl.expire_snapshots(retain_last=1, consumers_older_than=timedelta(days=1))
    assert result.expired_consumer_ids == ("job",) and result.expired_snapshot_ids == (1, 2, 3)
    with pytest.raises(StreamPositionExpiredError, match="the earliest snapshot is 4"):
        reader.poll()
