"""Stream options are one typed, frozen value (raylake/streaming/options.py), the same for
both table formats: a raylake table and a Paimon fixture take the same options, with the
same defaults, and refuse the same mistakes with the same error."""

from __future__ import annotations

import dataclasses
import re
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import raylake
from raylake.errors import InvalidArgumentError, StreamError, UnknownKeywordError
from raylake.streaming import StreamOptions, StreamPosition
from raylake.streaming.job import JobSpec
from raylake.streaming.options import DEFAULT_CATCH_UP_AFTER, JOB_DEFAULTS
from raylake.table import Table

FIXTURES = Path(__file__).resolve().parent.parent / "paimon" / "fixtures"


@pytest.fixture(params=["raylake", "paimon"])
def tbl(request: pytest.FixtureRequest, tmp_path: Path) -> Table:
    """An unbucketed append table of two snapshots: the Paimon fixture, or a raylake
    table with the same rows."""
    paimon_dir = tmp_path / "paimon"
    shutil.copytree(FIXTURES / "append_unaware" / "table", paimon_dir)
    paimon = raylake.open_table(str(paimon_dir))
    if request.param == "paimon":
        return paimon
    rows = paimon.to_arrow().sort_by("id")
    own = raylake.create_table(str(tmp_path / "raylake"), paimon.schema)
    half = rows.num_rows // 2
    own.write(rows.slice(0, half))
    own.write(rows.slice(half))
    return own


def _ids(plans: Any) -> list[int]:
    return sorted(i for plan in plans for i in plan.to_arrow().column("id").to_pylist())


def test_the_defaults_are_the_same_for_both_formats(tbl: Table) -> None:
    reader = tbl.stream()
    assert reader.options == StreamOptions()
    assert (reader.options.start, reader.options.on_overwrite) == ("latest", "refresh")
    assert reader.options.catch_up_after == DEFAULT_CATCH_UP_AFTER and reader.options.prefetch
    assert reader.poll_interval == 1.0 and reader.planner.on_overwrite == "refresh"
    reader.close()


def test_a_value_and_keywords_make_the_same_reader(tbl: Table) -> None:
    value = StreamOptions(start="earliest", columns=("id",), catch_up_after=None, prefetch=False)
    by_value = tbl.stream(options=value)
    by_keywords = tbl.stream(start="earliest", columns=["id"], catch_up_after=None, prefetch=False)
    assert by_value.options == by_keywords.options == value
    assert _ids(by_value.plans(timeout=0)) == _ids(by_keywords.plans(timeout=0))
    assert _ids(tbl.stream(options=value).plans(timeout=0)) == sorted(
        tbl.to_arrow().column("id").to_pylist()
    )
    # Keywords replace the value's fields; the value itself never changes.
    narrowed = tbl.stream(options=value, filter=raylake.col("id") < 0)
    assert narrowed.options.columns == ("id",) and value.filter is None
    assert _ids(narrowed.plans(timeout=0)) == []


def test_every_option_is_honoured(tbl: Table) -> None:
    """No option is dropped: what the reader does is what its options say."""
    reader = tbl.stream(start=1, on_overwrite="skip", catch_up_after=1, prefetch=False)
    assert reader.options.on_overwrite == reader.planner.on_overwrite == "skip"
    assert reader.catch_up_after == 1 and reader._prefetch is False
    assert reader.position == StreamPosition(1, tbl.source.start_id_reads_whole)
    shard = [_ids(tbl.stream(start="earliest", shard=(i, 2)).plans(timeout=0)) for i in (0, 1)]
    assert sorted(shard[0] + shard[1]) == sorted(tbl.to_arrow().column("id").to_pylist())


BAD: list[tuple[dict[str, Any], str]] = [
    ({"start": "newest"}, "start must be one of ['latest', 'earliest', 'latest-new']"),
    ({"start": 0}, "start must be one of"),
    ({"start": True}, "start must be one of"),
    ({"poll_interval": -1}, "poll_interval must be a number of seconds >= 0, got int -1"),
    ({"poll_interval": "1"}, "poll_interval must be a number of seconds >= 0"),
    # Taken, then time.sleep's bare OverflowError at the first empty poll.
    ({"poll_interval": float("inf")}, "poll_interval must be a number of seconds >= 0, below"),
    ({"poll_interval": 1e12}, "poll_interval must be a number of seconds >= 0, below a week"),
    ({"shard": (2, 2)}, "shard must be a pair (index, count) of ints with 0 <= index < count"),
    ({"shard": (0,)}, "shard must be a pair"),
    ({"shard": (0, 2), "buckets": [1]}, "shard and buckets must be one of"),
    ({"buckets": []}, "buckets must be a non-empty list of ints >= 0"),
    ({"bucket_filter": 3}, "bucket_filter must be a callable or None"),
    ({"include_row_kind": "yes"}, "include_row_kind must be True or False"),
    ({"on_overwrite": "ignore"}, "on_overwrite must be one of ['refresh', 'skip', 'fail']"),
    ({"columns": "id"}, "columns must be a list of column names (for one column: ['id'])"),
    ({"filter": 5}, "filter must be a filter string, a raylake expression or None"),
    ({"catch_up_after": 0}, "catch_up_after must be an int >= 1 or None (never), got int 0"),
    ({"prefetch": 1}, "prefetch must be True or False, got int 1"),
]


@pytest.mark.parametrize(("keywords", "message"), BAD, ids=[m for _, m in BAD])
def test_a_bad_option_is_refused_alike_by_both_formats(
    tbl: Table, keywords: dict[str, Any], message: str
) -> None:
    for make in (
        lambda: tbl.stream(consumer_id="c", **keywords),
        lambda: StreamOptions(**keywords),
    ):
        with pytest.raises(InvalidArgumentError, match=re.escape(message)) as info:
            make()
        assert isinstance(info.value, StreamError)  # what callers caught before
    assert tbl.consumers() == []  # refused before the consumer was registered


def test_a_timeout_shorter_than_the_poll_interval_ends_the_wait(tbl: Table) -> None:
    """plans(timeout=) ends after that long without a plan: it slept the whole
    poll_interval first (here 60 s for a timeout of 0.1 s)."""
    reader = tbl.stream(start="latest-new", poll_interval=60)
    started = time.monotonic()
    assert list(reader.plans(timeout=0.1)) == []
    assert time.monotonic() - started < 30
    reader.close()


def test_an_unknown_option_names_the_closest_one(tbl: Table) -> None:
    with pytest.raises(UnknownKeywordError, match="did you mean 'poll_interval'"):
        tbl.stream(pol_interval=2)
    with pytest.raises(InvalidArgumentError, match="options must be a StreamOptions"):
        tbl.stream(options={"start": "earliest"})  # type: ignore[arg-type]


def test_options_are_frozen_and_replaced_with_checks() -> None:
    options = StreamOptions(shard=[1, 4], buckets=None, columns=["a", "b"])  # type: ignore[arg-type]
    assert options.shard == (1, 4) and options.columns == ("a", "b")
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.start = "earliest"  # type: ignore[misc]
    assert options.replace(start=StreamPosition(3)).start == StreamPosition(3)
    with pytest.raises(InvalidArgumentError, match="catch_up_after"):
        options.replace(catch_up_after=-1)
    assert StreamOptions(buckets=[2, 0, 2]).buckets == frozenset({0, 2})  # type: ignore[arg-type]


def test_a_job_reads_with_its_own_defaults_and_one_shard_each(tbl: Table) -> None:
    spec = JobSpec(tbl.uri, lambda rows: rows, "job", 3)
    assert spec.stream == JOB_DEFAULTS
    assert (JOB_DEFAULTS.start, JOB_DEFAULTS.on_overwrite) == ("earliest", "fail")
    assert spec.reader_options(2) == JOB_DEFAULTS.replace(shard=(2, 3), prefetch=False)
    rows = [_ids(tbl.stream(options=spec.reader_options(i)).plans(timeout=0)) for i in range(3)]
    assert sorted(i for ids in rows for i in ids) == sorted(tbl.to_arrow().column("id").to_pylist())


def test_a_stream_position_that_is_not_one_is_an_argument_error() -> None:
    for bad in ({"next_snapshot_id": 0, "full": False}, {"full": True}):
        with pytest.raises(InvalidArgumentError, match="position must be a stream position"):
            StreamPosition.from_dict(bad)
    assert StreamPosition.from_dict({"next_snapshot_id": 4, "full": True}) == StreamPosition(
        4, True
    )
    # Made directly: a float or string id was waited for without end, 0 said "expired",
    # and a truthy string read a change as a whole state.
    for made in ((2.5, False), ("2", False), (True, False), (0, False), (2, "yes")):
        with pytest.raises(InvalidArgumentError, match=r"position|full"):
            StreamPosition(*made)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="full must be True or False"):
        StreamPosition.from_dict({"next_snapshot_id": 2, "full": "false"})
    assert StreamPosition(np.int64(3)).next_snapshot_id.__class__ is int


def test_numpy_integers_are_snapshot_ids_and_counts_of_a_stream(tmp_path: Path) -> None:
    """An id read from a DataFrame (np.int64) is a snapshot id for time travel and
    reset_consumer, but a stream's start, seek, notify_checkpoint_complete, until_snapshot,
    shard, buckets, catch_up_after and max_plans refused it as not an int."""
    tbl = raylake.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64())]))
    for i in range(3):
        tbl.write(pa.table({"id": [i]}))
    one, two, three = np.array([s.id for s in tbl.snapshots()])
    options = StreamOptions(start=two, shard=(np.int64(0), np.int64(1)), catch_up_after=np.int32(4))
    assert (options.start, options.shard, options.catch_up_after) == (2, (0, 1), 4)
    assert [type(v) for v in (options.start, *options.shard, options.catch_up_after)] == [int] * 4
    assert StreamOptions(buckets=[np.int64(0)]).buckets == frozenset({0})
    plans = list(tbl.stream(options=options).plans(max_plans=np.int64(5), timeout=0))
    assert [p.snapshot_id for p in plans] == [2, 3]
    reader = tbl.stream(consumer_id="c", start=one)
    list(reader.plans(max_plans=np.int64(1), timeout=0))
    assert reader.notify_checkpoint_complete(two).next_snapshot_id == 2
    assert reader.seek(three).next_snapshot_id == 3
    assert type(tbl.consumer("c").next_snapshot_id) is int  # written to JSON and read back
    for bad in (np.float64(2.0), np.bool_(True), np.int64(0)):
        with pytest.raises(InvalidArgumentError, match="start must be"):
            tbl.stream(start=bad)


def test_options_pickle(tbl: Table) -> None:
    import pickle

    options = StreamOptions(start="earliest", columns=("id",), filter="id > 1")
    assert pickle.loads(pickle.dumps(options)) == options
    assert isinstance(tbl.schema, pa.Schema)
