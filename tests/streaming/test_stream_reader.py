"""Stream readers: what each snapshot delivers, start positions, shards, progress."""

from __future__ import annotations

import json
import re
import zlib
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import raylake
from raylake.errors import (
    ConsumerError,
    CorruptMetadataError,
    SnapshotNotFoundError,
    StreamError,
    StreamPositionExpiredError,
    TableNotFoundError,
)
from raylake.streaming import ROW_KIND, ShardSpec, StreamPosition, StreamReader
from raylake.table import Table
from raylake.table.pk.bucket import bucket_ids

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def rows(ids: list[int], tag: str = "a") -> pa.Table:
    return pa.table({"id": ids, "v": [f"{tag}{i}" for i in ids]}, schema=SCHEMA)


def drain(reader: StreamReader) -> list[pa.Table]:
    return [plan.to_arrow() for plan in reader.plans(timeout=0)]


def ids_of(tables: list[pa.Table]) -> list[int]:
    return sorted(i for t in tables for i in t.column("id").to_pylist())


def pk_table(path: Path, producer: str = "none", buckets: int = 4) -> raylake.Table:
    return raylake.create_table(
        str(path), SCHEMA, primary_key=["id"], buckets=buckets,
        options={"changelog-producer": producer},
    )  # fmt: skip


# -- append tables -------------------------------------------------------------------------


def test_append_stream_full_then_deltas(warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    tbl.write(rows([1, 2]))
    reader = tbl.stream(start="latest")
    first = reader.poll()
    assert first is not None and first.kind == "full" and first.snapshot_id == 1
    assert ids_of([first.to_arrow()]) == [1, 2]
    assert reader.poll() is None
    tbl.write(rows([3]))
    tbl.write(rows([4, 5]))
    plans = list(reader.plans(timeout=0))
    assert [(p.snapshot_id, p.kind) for p in plans] == [(2, "delta"), (3, "delta")]
    assert [ids_of([p.to_arrow()]) for p in plans] == [[3], [4, 5]]


def test_start_positions(warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    empty_reader = tbl.stream(start="latest")
    tbl.write(rows([1]))
    tbl.write(rows([2]))
    tbl.write(rows([3]))
    assert ids_of(drain(empty_reader)) == [1, 2, 3]  # from the first commit on
    assert ids_of(drain(tbl.stream(start="earliest"))) == [1, 2, 3]
    assert ids_of(drain(tbl.stream(start="latest"))) == [1, 2, 3]  # full state at 3
    assert drain(tbl.stream(start="latest-new")) == []
    assert ids_of(drain(tbl.stream(start=2))) == [1, 2, 3]  # full at 2, then 3
    at_2 = tbl.snapshot(2).time + timedelta(microseconds=1)
    plans = list(tbl.stream(start=at_2).plans(timeout=0))
    assert plans[0].snapshot_id == 2 and plans[0].kind == "full"


def test_include_row_kind_on_append_tables(warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    tbl.write(rows([1, 2]))
    (plan,) = drain(tbl.stream(start="earliest", include_row_kind=True))
    assert plan.column(ROW_KIND).to_pylist() == ["+I", "+I"]


def test_columns_and_filter(warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    tbl.write(rows([1, 2, 3]))
    (out,) = drain(tbl.stream(start="earliest", columns=["id"], filter="id >= 2"))
    assert out.column_names == ["id"] and out.column("id").to_pylist() == [2, 3]


def test_overwrite_refresh_skip_fail(warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    tbl.write(rows([1]))
    readers = {
        mode: tbl.stream(start="latest", on_overwrite=mode) for mode in ("refresh", "skip", "fail")
    }
    for reader in readers.values():
        reader.poll()
    tbl.write(rows([7, 8]), mode="overwrite")
    refresh = readers["refresh"].poll()
    assert refresh is not None and refresh.is_refresh and ids_of([refresh.to_arrow()]) == [7, 8]
    skipped = readers["skip"].poll()
    assert skipped is not None and skipped.kind == "empty" and skipped.to_arrow().num_rows == 0
    with pytest.raises(StreamError, match="overwrites"):
        readers["fail"].poll()


# -- primary-key tables --------------------------------------------------------------------


@pytest.mark.parametrize("producer", ["none", "input", "lookup"])
def test_pk_changes_reach_the_consumer(warehouse: Path, producer: str) -> None:
    tbl = pk_table(warehouse / "pk", producer)
    tbl.write(rows([1, 2, 3]))
    reader = tbl.stream(start="earliest", include_row_kind=True)
    state = replay({}, drain(reader))
    tbl.write(rows([1, 4], tag="b"))
    tbl.delete(pa.table({"id": [2]}))
    tbl.compact(full=True)
    changes = drain(reader)
    state = replay(state, changes)
    assert state == dict(zip(*tbl.to_arrow().sort_by("id").to_pydict().values()))
    kinds = sorted(k for t in changes for k in t.column(ROW_KIND).to_pylist())
    if producer == "input":  # the rows as written: an upsert is +I, a delete -D
        assert kinds == ["+I", "+I", "-D"]
    else:  # exact before- and after-images
        assert kinds == ["+I", "+U", "-D", "-U"]


def replay(state: dict[int, str], changes: list[pa.Table]) -> dict[int, str]:
    """Apply changelog rows to a dict: the model of a consumer of a PK table."""
    state = dict(state)
    for t in changes:
        for key, value, kind in zip(*t.select(["id", "v", ROW_KIND]).to_pydict().values()):
            if kind in ("+I", "+U"):
                state[key] = value
            else:
                state.pop(key, None)
    return state


def test_pk_without_row_kind_delivers_upserts(warehouse: Path) -> None:
    tbl = pk_table(warehouse / "pk", "lookup")
    tbl.write(rows([1, 2]))
    reader = tbl.stream(start="latest")
    drain(reader)
    tbl.write(rows([1], tag="z"))
    tbl.delete(pa.table({"id": [2]}))
    out = drain(reader)
    assert [t.to_pydict() for t in out if t.num_rows] == [{"id": [1], "v": ["z1"]}]


def test_compaction_delivers_nothing(warehouse: Path) -> None:
    tbl = pk_table(warehouse / "pk", "lookup", buckets=1)
    for i in range(3):
        tbl.write(rows([i]))
    reader = tbl.stream(start="latest")
    drain(reader)
    assert tbl.compact(full=True) is not None
    (plan,) = list(reader.plans(timeout=0))
    assert plan.commit_kind == "COMPACT" and plan.kind == "empty" and plan.splits == ()


# -- shards --------------------------------------------------------------------------------


def test_pk_shards_partition_the_rows_by_bucket(warehouse: Path) -> None:
    tbl = pk_table(warehouse / "t", "lookup", buckets=5)
    readers = [tbl.stream(start="latest", shard=(i, 3)) for i in range(3)]
    for start in range(0, 60, 6):
        tbl.write(rows(list(range(start, start + 6))))
    seen = [ids_of(drain(r)) for r in readers]
    assert sorted(i for s in seen for i in s) == list(range(60))
    # Bucket b belongs to shard b % 3; the key hash is fixed, so this split is too.
    buckets = bucket_ids([pa.array(range(60), pa.int64())], 5).tolist()
    assert seen == [[i for i in range(60) if buckets[i] % 3 == s] for s in range(3)]
    assert all(seen), "every shard gets some of the work"


def test_append_shards_partition_the_rows_by_file(warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    readers = [tbl.stream(start="latest", shard=(i, 3)) for i in range(3)]
    writes = [list(range(start, start + 6)) for start in range(0, 60, 6)]  # a file each
    for ids in writes:
        tbl.write(rows(ids))
    seen = [ids_of(drain(r)) for r in readers]
    assert sorted(i for s in seen for i in s) == list(range(60))
    # File names are random, so how many files each shard gets is luck (a shard may
    # get none of 10 files): check only that no file is split between shards.
    for ids in writes:
        assert sum(set(ids) <= set(s) for s in seen) == 1


def test_append_shards_split_by_file_whatever_buckets_the_table_has(warehouse: Path) -> None:
    # Its files all lie in bucket 0: sharded by bucket, shard 0 would read every row. A
    # new append table refuses buckets > 1; one made before that stores them.
    raylake.create_table(str(warehouse / "t"), SCHEMA)
    schema_file = warehouse / "t" / "schema" / "schema-0.json"
    schema_file.write_text(schema_file.read_text().replace('"buckets": 1', '"buckets": 4'))
    tbl = raylake.open_table(str(warehouse / "t"))
    assert tbl.table_schema.buckets == 4
    for start in range(0, 40, 4):
        tbl.write(rows(list(range(start, start + 4))))
    seen = [ids_of(drain(tbl.stream(start="earliest", shard=(i, 4)))) for i in range(4)]
    expected: list[list[int]] = [[], [], [], []]
    for path in sorted((warehouse / "t" / "data" / "bucket-0").iterdir()):
        shard = zlib.crc32(f"data/bucket-0/{path.name}".encode()) % 4
        expected[shard] += pq.read_table(path).column("id").to_pylist()
    assert [sorted(s) for s in seen] == [sorted(e) for e in expected]


def test_file_shards_spread_files() -> None:
    paths = [f"data/bucket-0/part-{i:032x}.parquet" for i in range(30)]
    shards = [[ShardSpec.of((i, 3)).takes_file(p, 0, True) for p in paths] for i in range(3)]
    assert [sum(column) for column in zip(*shards, strict=True)] == [1] * 30  # a partition
    assert all(sum(taken) >= 5 for taken in shards), [sum(taken) for taken in shards]


def test_bucket_lists_and_filters(warehouse: Path) -> None:
    tbl = pk_table(warehouse / "pk", "lookup", buckets=4)
    tbl.write(rows(list(range(40))))
    by_list = ids_of(drain(tbl.stream(start="earliest", buckets=[0, 2])))
    by_fn = ids_of(drain(tbl.stream(start="earliest", bucket_filter=lambda b: b in (0, 2))))
    rest = ids_of(drain(tbl.stream(start="earliest", buckets=[1, 3])))
    assert by_list == by_fn and sorted(by_list + rest) == list(range(40))


def test_a_bucket_the_table_does_not_have_is_refused_before_the_consumer_registers(
    warehouse: Path,
) -> None:
    """buckets=[4] of a table of 4 buckets (0 to 3) read nothing, without a word; an
    append table's files all lie in bucket 0."""
    tbl = pk_table(warehouse / "pk", buckets=4)
    tbl.write(rows(list(range(8))))
    with pytest.raises(StreamError, match=r"below 4: .* has 4 bucket\(s\), 0 to 3, so bucket 4"):
        tbl.stream(consumer_id="c", start="earliest", buckets=[1, 4, 9])
    assert tbl.consumers() == []
    assert ids_of(drain(tbl.stream(start="earliest", buckets=[0, 1, 2, 3]))) == list(range(8))
    appended = raylake.create_table(str(warehouse / "append"), SCHEMA)
    appended.write(rows([1, 2]))
    with pytest.raises(StreamError, match=r"below 1: .* has 1 bucket\(s\), 0 to 0, so bucket 1"):
        appended.stream(start="earliest", buckets=[1])
    assert ids_of(drain(appended.stream(start="earliest", buckets=[0]))) == [1, 2]


# -- progress ------------------------------------------------------------------------------


def test_checkpoint_and_resume(warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    tbl.write(rows([1]))
    reader = tbl.stream(consumer_id="c", start="earliest")
    assert tbl.consumer("c").next_snapshot_id == 1  # registered at once
    drain(reader)
    reader.checkpoint()
    tbl.write(rows([2]))
    tbl.write(rows([3]))
    assert ids_of([reader.poll().to_arrow()]) == [2]  # delivered, not checkpointed
    again = tbl.stream(consumer_id="c", start="earliest")  # start is ignored on resume
    assert ids_of(drain(again)) == [2, 3]
    again.notify_checkpoint_complete(3)
    assert tbl.consumer("c").next_snapshot_id == 3
    with pytest.raises(ConsumerError, match="only delivered"):
        again.notify_checkpoint_complete(9)


def test_restart_before_the_first_checkpoint_rereads_the_full_state(warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    tbl.write(rows([1, 2]))
    tbl.write(rows([3]))
    drain(tbl.stream(consumer_id="c", start="latest"))  # crashed before checkpoint
    plans = list(tbl.stream(consumer_id="c").plans(timeout=0))
    assert plans[0].kind == "full" and ids_of([plans[0].to_arrow()]) == [1, 2, 3]


def test_expiration_keeps_what_a_consumer_needs(warehouse: Path) -> None:
    tbl = pk_table(warehouse / "pk", "none")
    tbl.write(rows([1]))
    reader = tbl.stream(consumer_id="c", start="earliest", include_row_kind=True)
    drain(reader)
    reader.checkpoint()
    for i in range(2, 6):
        tbl.write(rows([i]))
    tbl.expire_snapshots(retain_last=1)
    assert tbl.snapshots()[0].id == 1  # the consumer reads 2 as a diff against 1
    state = replay({}, drain(tbl.stream(consumer_id="c", include_row_kind=True)))
    assert state == {i: f"a{i}" for i in range(2, 6)}


def test_expired_position_names_the_consumer_and_the_earliest(warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    tbl.write(rows([1]))
    tbl.stream(consumer_id="late", start="earliest")
    for i in range(2, 5):
        tbl.write(rows([i]))
    tbl.delete_consumer("late")
    tbl.reset_consumer("late", 1)  # re-registered, then expired by force below
    tbl.file_io.delete("snapshot/snapshot-1.json")
    tbl.file_io.delete("snapshot/snapshot-2.json")
    with pytest.raises(
        StreamPositionExpiredError, match=r"'late' needs snapshot 1.*earliest snapshot is 3"
    ):
        tbl.stream(consumer_id="late")


def test_catch_up_append_table(warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    tbl.write(rows([0]))
    reader = tbl.stream(start="latest", catch_up_after=3)
    drain(reader)
    for i in range(1, 11):
        tbl.write(rows([i]))
    plans = list(reader.plans(timeout=0))
    assert [(p.first_snapshot_id, p.snapshot_id, p.kind) for p in plans] == [(2, 11, "diff")]
    assert ids_of([plans[0].to_arrow()]) == list(range(1, 11))


def test_catch_up_append_table_with_an_overwrite_goes_one_by_one(warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    tbl.write(rows([0]))
    reader = tbl.stream(start="latest", catch_up_after=2)
    drain(reader)
    tbl.write(rows([1]))
    tbl.write(rows([5]), mode="overwrite")
    tbl.write(rows([6]))
    plans = list(reader.plans(timeout=0))
    assert [p.kind for p in plans] == ["delta", "refresh", "delta"]


def test_a_skipping_catch_up_keeps_the_rows_of_a_file_an_overwrite_in_the_gap_dropped(
    warehouse: Path,
) -> None:
    """A delete that drops a whole file added in the gap leaves no trace at the gap's
    ends: one by one, a stream that skips overwrites keeps that file's rows."""
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    tbl.write(rows([0]))
    reader = tbl.stream(start="latest", catch_up_after=2, on_overwrite="skip")
    drain(reader)
    tbl.write(rows([1]))
    tbl.delete("id = 1")  # an OVERWRITE that drops the file written just before
    tbl.write(rows([2]))
    plans = list(reader.plans(timeout=0))
    assert [p.kind for p in plans] == ["delta", "empty", "delta"]
    assert ids_of([p.to_arrow() for p in plans]) == [1, 2]


def test_append_shards_catching_up_across_an_overwrite_lose_no_row(warehouse: Path) -> None:
    """A compaction moves the rows of one shard's files into the other's file; at the
    overwrite after it, the shard reading one by one refreshes to its own files, so the
    other must refresh too rather than catch up across the overwrite."""
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    data = warehouse / "t" / "data" / "bucket-0"
    n = 0
    while len({zlib.crc32(f"data/bucket-0/{f.name}".encode()) % 2 for f in data.glob("*")}) < 2:
        tbl.write(rows([n]))
        n += 1
    readers = [tbl.stream(start="latest", shard=(i, 2), catch_up_after=2) for i in range(2)]
    held: list[set[int]] = [set(), set()]

    def poll(i: int) -> list[str]:
        plans = list(readers[i].plans(timeout=0))
        for plan in plans:
            if plan.is_refresh or plan.kind == "full":
                held[i].clear()
            held[i] |= set(plan.to_arrow().column("id").to_pylist())
        return [plan.kind for plan in plans]

    poll(0), poll(1)
    tbl.compact(full=True)
    (compacted,) = data.glob("compact-*")
    other = zlib.crc32(f"data/bucket-0/{compacted.name}".encode()) % 2
    stepper = 1 - other  # its rows now lie in the other shard's file
    poll(stepper)
    tbl.write(rows([100]))
    poll(stepper)
    tbl.delete("id = 100")  # an OVERWRITE: the stepper refreshes to its own files
    assert poll(stepper) == ["refresh"]
    tbl.write(rows([101]))
    poll(stepper)
    assert poll(other) == ["empty", "delta", "refresh", "delta"]  # not one catch-up
    assert sorted(held[0] | held[1]) == [*range(n), 101]


def test_catch_up_primary_key_table_across_compaction(warehouse: Path) -> None:
    tbl = pk_table(warehouse / "pk", "none", buckets=2)
    tbl.write(rows([1, 2, 3]))
    reader = tbl.stream(start="latest", include_row_kind=True, catch_up_after=2)
    state = replay({}, drain(reader))
    tbl.write(rows([1, 5], tag="b"))
    tbl.compact(full=True)
    tbl.delete(pa.table({"id": [3]}))
    tbl.write(rows([5, 6], tag="c"))
    plans = list(reader.plans(timeout=0))
    assert [p.kind for p in plans] == ["diff"]
    changes = [p.to_arrow() for p in plans]
    assert replay(state, changes) == {1: "b1", 2: "a2", 5: "c5", 6: "c6"}
    ids = [i for t in changes for i in t.column("id").to_pylist()]
    assert sorted(ids) == [1, 1, 3, 5, 6]  # net changes only: no unmerged or repeated rows


def _overwritten_in_the_gap(warehouse: Path, on_overwrite: str) -> tuple[Table, StreamReader]:
    """A primary-key table overwritten while a reader was 3 snapshots behind (snapshot 3
    of 4), its catch-up threshold 2."""
    tbl = pk_table(warehouse / "pk", buckets=2)
    tbl.write(rows([1, 2, 3]))
    reader = tbl.stream(
        start="latest",
        include_row_kind=True,
        catch_up_after=2,
        on_overwrite=on_overwrite,  # type: ignore[arg-type]
    )
    drain(reader)
    tbl.write(rows([4]))
    tbl.write(rows([5]), mode="overwrite")
    tbl.write(rows([6]))
    return tbl, reader


def test_a_catch_up_over_an_overwrite_fails_where_the_stream_fails_on_overwrites(
    warehouse: Path,
) -> None:
    _, reader = _overwritten_in_the_gap(warehouse, "fail")
    with pytest.raises(StreamError, match=r"snapshot 3 .* overwrites the table"):
        drain(reader)
    assert reader.next_snapshot_id == 3  # snapshot 2 was delivered on its own


def test_a_catch_up_over_an_overwrite_skips_it_where_the_stream_skips_overwrites(
    warehouse: Path,
) -> None:
    _, reader = _overwritten_in_the_gap(warehouse, "skip")
    plans = list(reader.plans(timeout=0))
    assert [(p.snapshot_id, p.kind) for p in plans] == [(2, "delta"), (3, "empty"), (4, "delta")]
    assert ids_of([p.to_arrow() for p in plans]) == [4, 6]  # not the overwrite's 5


def test_a_stream_that_skipped_an_overwrite_reads_later_gaps_one_by_one(
    warehouse: Path,
) -> None:
    """Having skipped an overwrite that removed key 1, the stream still holds it: the
    net changes of a gap where key 1 came back and went again (none: the table had no
    key 1 at either end) would leave it there, one snapshot at a time removes it."""
    tbl = pk_table(warehouse / "pk", buckets=2)
    tbl.write(rows([1, 2]))
    reader = tbl.stream(
        start="latest", include_row_kind=True, catch_up_after=2, on_overwrite="skip"
    )
    state = replay({}, drain(reader))
    tbl.write(rows([2]), mode="overwrite")
    state = replay(state, drain(reader))
    assert state == {1: "a1", 2: "a2"}  # the overwrite skipped
    tbl.write(rows([1], tag="b"))
    tbl.delete(pa.table({"id": [1]}))
    tbl.write(rows([5]))
    plans = list(reader.plans(timeout=0))
    assert [p.kind for p in plans] == ["delta", "delta", "delta"]
    assert replay(state, [p.to_arrow() for p in plans]) == {2: "a2", 5: "a5"}


def test_a_catch_up_over_an_overwrite_refreshes_by_its_net_changes(warehouse: Path) -> None:
    _, reader = _overwritten_in_the_gap(warehouse, "refresh")
    plans = list(reader.plans(timeout=0))
    assert [p.kind for p in plans] == ["diff"]
    before = {i: f"a{i}" for i in (1, 2, 3)}
    assert replay(before, [p.to_arrow() for p in plans]) == {5: "a5", 6: "a6"}


def test_a_catch_up_reads_the_commit_kinds_between_where_the_snapshots_do_not_say(
    warehouse: Path,
) -> None:
    """Snapshots written before ``last_overwrite_id`` (as here, with it taken out) leave
    the catch-up to read the kinds of the snapshots in between."""
    tbl, reader = _overwritten_in_the_gap(warehouse, "fail")
    assert tbl.latest_snapshot().last_overwrite_id == 3  # type: ignore[union-attr]
    for path in (warehouse / "pk" / "snapshot").glob("snapshot-*.json"):
        data = json.loads(path.read_text())
        del data["last_overwrite_id"]
        path.write_text(json.dumps(data))
    reader = tbl.stream(start=1, catch_up_after=2, on_overwrite="fail")
    with pytest.raises(StreamError, match=r"snapshot 3 .* overwrites the table"):
        drain(reader)


# -- bad input -----------------------------------------------------------------------------


def test_bad_arguments(warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    tbl.write(rows([1]))
    with pytest.raises(ConsumerError, match="valid consumer id"):
        tbl.stream(consumer_id="../evil")
    with pytest.raises(StreamError, match=re.escape("0 <= index < count")):
        tbl.stream(shard=(3, 3))
    with pytest.raises(StreamError, match="pair"):
        tbl.stream(shard=(0,))  # type: ignore[arg-type]
    with pytest.raises(
        StreamError, match=re.escape("one of ['shard', 'buckets', 'bucket_filter']")
    ):
        tbl.stream(shard=(0, 2), buckets=[1])
    with pytest.raises(SnapshotNotFoundError, match="snapshot 9 does not exist"):
        tbl.stream(start=9)
    with pytest.raises(StreamError, match="start must be one of"):
        tbl.stream(start="newest")  # type: ignore[arg-type]
    with pytest.raises(StreamError, match="on_overwrite"):
        tbl.stream(on_overwrite="ignore")  # type: ignore[arg-type]
    with pytest.raises(StreamError, match="poll_interval"):
        tbl.stream(poll_interval=-1)
    with pytest.raises(ConsumerError, match="needs a consumer"):
        tbl.stream().checkpoint()
    reader = tbl.stream()
    # Refused by the call, not at the first next() (the plans are a generator)
    with pytest.raises(StreamError, match="timeout must be a number of seconds >= 0"):
        reader.plans(timeout=-1)
    with pytest.raises(StreamError, match="max_plans must be an int >= 0 or None"):
        reader.plans(max_plans="2")  # type: ignore[arg-type]
    reader.close()
    assert tbl.consumers() == []  # nothing registered by the failed calls


@pytest.mark.parametrize("commits", [0, 1])
def test_table_deleted_mid_stream(warehouse: Path, commits: int) -> None:
    """Also a table deleted before its first commit: its reader had seen no snapshot."""
    import shutil

    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    for i in range(commits):
        tbl.write(rows([i]))
    reader = tbl.stream(start="latest", consumer_id="c")
    drain(reader)
    shutil.rmtree(warehouse / "t")
    with pytest.raises(TableNotFoundError):
        reader.poll()


def created_again(path: Path, commits: int) -> Table:
    """The table at ``path`` dropped and created again, with ``commits`` new commits."""
    import shutil

    shutil.rmtree(path)
    again = raylake.create_table(str(path), SCHEMA)
    for i in range(commits):
        again.write(rows([100 + i]))
    return again


@pytest.mark.parametrize("commits", [0, 1, 5])
def test_table_created_again_mid_stream(warehouse: Path, commits: int) -> None:
    """The new table's snapshots are no changes of the old one's: the reader says so
    rather than read snapshot 4 of the new table as what followed snapshot 3."""
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    for i in range(3):
        tbl.write(rows([i]))
    reader = tbl.stream(consumer_id="c", start="earliest", prefetch=False)
    assert len(drain(reader)) == 3
    reader.checkpoint()
    again = created_again(warehouse / "t", commits)
    with pytest.raises(StreamError, match=r"dropped and created again.*read snapshot 3"):
        reader.poll()
    assert again.consumers() == []


@pytest.mark.parametrize("start", ["latest-new", "position"])
@pytest.mark.parametrize("commits", [2, 5])
def test_table_created_again_before_the_first_plan(
    warehouse: Path, start: str, commits: int
) -> None:
    """A reader that starts at changes has read no plan yet: it read snapshots 4.. of the
    new table as what followed snapshot 3 of the old one, losing the new table's first."""
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    for i in range(3):
        tbl.write(rows([i]))
    reader = tbl.stream(start="latest-new" if start == "latest-new" else StreamPosition(4))
    assert drain(reader) == []
    created_again(warehouse / "t", commits)
    with pytest.raises(StreamError, match=r"dropped and created again.*read snapshot 3"):
        reader.poll()


def test_a_position_past_the_next_snapshot_is_refused(warehouse: Path) -> None:
    """A position saved (in a trainer's checkpoint) before the table was created again:
    waiting for its snapshot would skip every row committed before it."""
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    for i in range(3):
        tbl.write(rows([i]))
    assert tbl.stream(start=StreamPosition(4)).poll() is None  # the next commit's: fine
    with pytest.raises(SnapshotNotFoundError, match="position 5 is past snapshot 4"):
        tbl.stream(start=StreamPosition(5))


def test_a_seek_past_the_next_snapshot_is_refused(warehouse: Path) -> None:
    """A seek there recorded the consumer at it, and the reader then skipped every
    snapshot committed before it."""
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    for i in range(3):
        tbl.write(rows([i]))
    reader = tbl.stream(start="earliest", consumer_id="c")
    with pytest.raises(SnapshotNotFoundError, match="seek 9 is past snapshot 4"):
        reader.seek(9)
    assert reader.next_snapshot_id == 1 and tbl.consumer("c").next_snapshot_id == 1
    reader.seek(4)  # the next commit's: fine
    tbl.write(rows([3]))
    assert ids_of(drain(reader)) == [3]


def test_corrupted_consumer_file(warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    tbl.write(rows([1]))
    (warehouse / "t" / "consumer").mkdir(exist_ok=True)
    (warehouse / "t" / "consumer" / "consumer-c").write_text('{"consumer_id": "c", "next_')
    with pytest.raises(CorruptMetadataError, match="consumer-c"):
        tbl.stream(consumer_id="c")


def test_closed_reader(warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    with tbl.stream() as reader:
        pass
    with pytest.raises(StreamError, match="closed"):
        reader.poll()


def test_repr_is_informative(warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    tbl.write(rows([1]))
    reader = tbl.stream(consumer_id="c", shard=(1, 2))
    assert "consumer 'c'" in repr(reader) and "shard 1 of 2" in repr(reader)
    assert "StreamPlan(snapshot 1, full" in repr(reader.poll())


def test_pickling_a_reader_says_to_make_it_where_it_reads(warehouse: Path) -> None:
    """Pickle's own "cannot pickle '_thread.lock' object" named nothing."""
    import pickle

    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    tbl.write(rows([1]))
    with tbl.stream(consumer_id="c") as reader:
        with pytest.raises(StreamError, match=r"StreamReader cannot be pickled .*\.stream\("):
            pickle.dumps(reader)
        assert ids_of(drain(reader)) == [1]


def test_datetime_start_before_history(warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    tbl.write(rows([1]))
    with pytest.raises(SnapshotNotFoundError):
        tbl.stream(start=datetime(2000, 1, 1, tzinfo=timezone.utc))


def test_a_checkpoint_back_at_a_full_start_keeps_it_full(warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    tbl.write(rows([1, 2]))
    reader = tbl.stream(consumer_id="c", start="latest")
    assert reader.poll().kind == "full"  # type: ignore[union-attr]
    reader.notify_checkpoint_complete(1)  # the trainer's checkpoint predates the plan
    again = tbl.stream(consumer_id="c")
    plan = again.poll()
    assert plan is not None and plan.kind == "full" and ids_of([plan.to_arrow()]) == [1, 2]


def test_reset_past_a_gap_reads_the_snapshot_whole(warehouse: Path) -> None:
    tbl = pk_table(warehouse / "pk", "none")
    for i in range(4):
        tbl.write(rows([i]))
    tbl.file_io.delete("snapshot/snapshot-1.json")
    tbl.file_io.delete("snapshot/snapshot-2.json")
    tbl.reset_consumer("late", 3)  # 2 is gone: 3's changes are unknown, its state is not
    plans = list(tbl.stream(consumer_id="late").plans(timeout=0))
    assert [(p.snapshot_id, p.kind) for p in plans] == [(3, "full"), (4, "delta")]
    assert ids_of([plans[0].to_arrow()]) == [0, 1, 2]


def test_a_vanished_diff_base_is_an_error_not_a_guess(warehouse: Path) -> None:
    tbl = pk_table(warehouse / "pk", "none")
    tbl.write(rows([0]))
    reader = tbl.stream(start="latest")
    drain(reader)
    tbl.write(rows([1]))
    tbl.write(rows([2]))
    tbl.file_io.delete("snapshot/snapshot-1.json")  # removed by hand under the reader
    with pytest.raises(StreamPositionExpiredError, match="needs snapshot 1"):
        reader.poll()


def test_consumer_properties_must_be_strings(warehouse: Path) -> None:
    """A list failed with Python's bare TypeError; an int value was written, and read
    back as a string; a refused seek left the reader moved without its record."""
    from raylake.errors import ConsumerArgumentError

    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    for i in range(3):
        tbl.write(rows([i]))
    reader = tbl.stream(start="earliest", consumer_id="c")
    assert reader.poll() is not None
    for bad in (["x"], {"a": 1}, {1: "a"}):
        with pytest.raises(ConsumerArgumentError, match="properties must be a dict"):
            reader.checkpoint(properties=bad)  # type: ignore[arg-type]
    with pytest.raises(ConsumerArgumentError, match="properties must be a dict"):
        reader.seek(3, properties={"a": 1})  # type: ignore[dict-item]
    assert reader.next_snapshot_id == 2 and tbl.consumer("c").next_snapshot_id == 1
    assert reader.checkpoint(properties={"a": "1"}).properties["a"] == "1"


def test_a_checkpoint_without_properties_keeps_those_recorded(warehouse: Path) -> None:
    """A checkpoint() after checkpoint({"epoch": "3"}) wrote the consumer with no
    property but the stream's own: what a reader stored to have back after a restart
    was gone at the next plain checkpoint."""
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    for i in range(3):
        tbl.write(rows([i]))
    reader = tbl.stream(start="earliest", consumer_id="c", catch_up_after=None)
    assert reader.poll() is not None
    reader.checkpoint({"epoch": "3"})
    assert reader.poll() is not None
    assert reader.checkpoint().properties["epoch"] == "3"
    assert reader.notify_checkpoint_complete(3).properties["epoch"] == "3"
    reader.close()
    resumed = tbl.stream(consumer_id="c")
    assert resumed.resumed_from is not None and resumed.resumed_from.properties["epoch"] == "3"
    assert resumed.poll() is not None
    assert resumed.checkpoint().properties["epoch"] == "3"  # kept across restarts
    assert resumed.checkpoint({"epoch": "4"}).properties["epoch"] == "4"  # given: replaced
    assert "epoch" not in resumed.checkpoint({}).properties


@pytest.mark.parametrize("start", ["earliest", "latest", 2])
def test_a_new_consumer_whose_named_start_expires_as_it_registers_starts_again(
    warehouse: Path, monkeypatch: pytest.MonkeyPatch, start: str | int
) -> None:
    """An expiration that read the consumers before this one registered removes the
    snapshot it chose: a start by name looks again (was: StreamPositionExpiredError for
    a consumer that had no position yet); a start at a snapshot id still says so."""
    from raylake.format.consumer import ConsumerManager

    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    tbl.write(rows([1]))
    tbl.write(rows([2]))
    other = raylake.open_table(tbl.uri)
    wait = ConsumerManager.wait_for_expirations

    def expired_meanwhile(self: ConsumerManager) -> None:
        monkeypatch.setattr(ConsumerManager, "wait_for_expirations", wait)
        other.write(rows([3]))  # snapshot 3
        for snapshot_id in (1, 2):  # what the expiration chose before the consumer existed
            self.file_io.delete(f"snapshot/snapshot-{snapshot_id}.json")

    monkeypatch.setattr(ConsumerManager, "wait_for_expirations", expired_meanwhile)
    if start == 2:
        with pytest.raises(StreamPositionExpiredError, match="the earliest snapshot is 3"):
            tbl.stream(consumer_id="job", start=start)
        assert tbl.consumer("job") is None
        return
    with tbl.stream(consumer_id="job", start=start) as reader:
        plan = reader.poll()
    assert plan is not None and (plan.kind, plan.snapshot_id) == ("full", 3)
    assert ids_of([plan.to_arrow()]) == [1, 2, 3]
    assert tbl.consumer("job").next_snapshot_id == 3  # type: ignore[union-attr]
