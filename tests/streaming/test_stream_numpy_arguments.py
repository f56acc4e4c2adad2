"""Streams take numpy integers where they take a count or a snapshot id (a shard count
from ``len(np.array_split(...))``, buckets from ``np.unique``, an id read from a
DataFrame), and numpy numbers of seconds, as the table API does: they were refused with
StreamArgumentError. They are kept as Python ints (consumer files are JSON); bools
stay refused."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from committer import SCHEMA, batch

import raylake
from raylake.errors import StreamArgumentError
from raylake.streaming import StreamingJob, StreamOptions


@pytest.fixture
def tbl(warehouse: Path) -> raylake.Table:
    table = raylake.create_table(str(warehouse / "t"), SCHEMA)
    for commit in range(3):
        table.write(batch(commit, 2))
    return table


def _job(tbl: raylake.Table) -> Any:
    job = StreamingJob(
        tbl.uri, lambda t: t, consumer_id="job", num_shards=np.int64(2),
        max_plans_per_step=np.int32(4), max_restarts=np.int64(1), ready_timeout=np.int64(5),
    )  # fmt: skip
    spec = job.spec
    return spec.num_shards, spec.max_plans_per_step, job.max_restarts, job.ready_timeout


def _lake_stream(tbl: raylake.Table) -> Any:
    pytest.importorskip("ray")
    from raylake.streaming import read_lake_stream

    stream = read_lake_stream(
        tbl.uri, max_snapshots_per_dataset=np.int64(2), override_num_blocks=np.int64(3)
    )
    assert list(stream.datasets(max_datasets=np.int64(0), timeout=np.float32(0))) == []
    return stream.max_snapshots_per_dataset, stream.override_num_blocks


def _seek(tbl: raylake.Table) -> Any:
    reader = tbl.stream(start="earliest", consumer_id="c")
    recorded = reader.seek(np.int64(2))
    return recorded.next_snapshot_id, reader.next_snapshot_id, tbl.consumer("c").next_snapshot_id


def _notify(tbl: raylake.Table) -> Any:
    reader = tbl.stream(start="earliest", consumer_id="c")
    next(iter(reader))
    return reader.notify_checkpoint_complete(np.int64(2)).next_snapshot_id


CASES: dict[str, tuple[Callable[[raylake.Table], Any], Any]] = {
    "start": (lambda t: t.stream(start=np.int64(2)).position.next_snapshot_id, 2),
    "shard": (lambda t: StreamOptions(shard=(np.int64(1), np.int64(2))).shard, (1, 2)),
    "buckets": (lambda t: StreamOptions(buckets=np.array([0, 1])).buckets, frozenset({0, 1})),
    "catch_up_after": (lambda t: StreamOptions(catch_up_after=np.uint8(3)).catch_up_after, 3),
    "poll_interval": (lambda t: StreamOptions(poll_interval=np.float32(0.5)).poll_interval, 0.5),
    "max_plans": (
        lambda t: len(list(t.stream(start="earliest").plans(max_plans=np.int64(2), timeout=0))),
        2,
    ),
    "timeout": (
        lambda t: len(list(t.stream(start="earliest").plans(timeout=np.int64(0)))),
        3,
    ),
    "seek": (_seek, (2, 2, 2)),
    "notify_checkpoint_complete": (_notify, 2),
    "StreamingJob": (_job, (2, 4, 1, 5)),
    "read_lake_stream": (_lake_stream, (2, 3)),
}


def _plain(value: Any) -> bool:
    """Only Python ints, floats, tuples and frozensets of them: no numpy scalar."""
    if isinstance(value, tuple | frozenset):
        return all(_plain(v) for v in value)
    return type(value) in (int, float)


@pytest.mark.parametrize("case", CASES)
def test_a_numpy_number_is_taken_as_the_python_one(tbl: raylake.Table, case: str) -> None:
    call, expected = CASES[case]
    got = call(tbl)
    assert got == expected and _plain(got)


@pytest.mark.parametrize(
    "keywords",
    [{"start": np.True_}, {"catch_up_after": True}, {"shard": (np.False_, 2)}],
    ids=str,
)
def test_a_bool_stays_refused(tbl: raylake.Table, keywords: dict[str, Any]) -> None:
    with pytest.raises(StreamArgumentError):
        tbl.stream(**keywords)
