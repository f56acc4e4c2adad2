"""Following Paimon tables as a Paimon consumer: changelog and delta follow-up, COMPACT
snapshots skipped, progress in Paimon's own consumer file."""

from __future__ import annotations

import json
from typing import Any

import pytest
from paimon_util import FIXTURES, expected, rows_by_key
from test_compacted import compact

import raylake
from raylake.errors import (
    ConsumerError,
    StreamError,
    StreamPositionExpiredError,
    UnsupportedOperationError,
)
from raylake.paimon import UnsupportedPaimonError

CHANGELOG = str(FIXTURES / "pk_changelog_input" / "table")
PK = str(FIXTURES / "pk_deduplicate" / "table")


def _kinds(rows: Any) -> list[tuple[int, str]]:
    return sorted((r["id"], r["_rl_kind"]) for r in rows.to_pylist())


def test_changelog_files_are_the_changes() -> None:
    """changelog-producer=input: what each commit wrote, with its row kinds."""
    tbl = raylake.open_table(CHANGELOG)
    plans = list(tbl.stream(start=1, include_row_kind=True).plans(timeout=0))
    assert [(p.snapshot_id, p.kind) for p in plans] == [
        (1, "changelog"),
        (2, "changelog"),
        (3, "changelog"),
    ]
    assert _kinds(plans[0].to_arrow()) == [(k, "+I") for k in range(8)]
    assert _kinds(plans[1].to_arrow()) == [(k, "+U") for k in range(4, 10)]
    assert _kinds(plans[2].to_arrow()) == [(0, "-D"), (1, "-D")]
    assert tbl.changelog(3).column("_rl_kind").to_pylist() == ["-D", "-D"]
    # Without row kinds a stream delivers upserts only.
    upserts = list(tbl.stream(start=3).plans(timeout=0))
    assert upserts[0].to_arrow().num_rows == 0


def test_a_full_start_then_merged_deltas() -> None:
    tbl = raylake.open_table(PK)
    plans = list(tbl.stream(start="earliest", include_row_kind=True).plans(timeout=0))
    assert [(p.snapshot_id, p.kind) for p in plans] == [
        (1, "full"),
        (2, "delta"),
        (3, "delta"),
        (4, "delta"),
        (5, "delta"),
    ]
    full = plans[0].to_arrow()
    assert rows_by_key(full.drop_columns(["_rl_kind"]), ["id"]) == rows_by_key(
        expected("pk_deduplicate", 1), ["id"]
    )
    assert _kinds(plans[4].to_arrow()) == [(0, "-D"), (1, "-D"), (2, "-D")]
    latest = list(tbl.stream().plans(timeout=0))
    assert [(p.snapshot_id, p.kind) for p in latest] == [(5, "full")]
    assert list(tbl.stream(start="latest-new").plans(timeout=0)) == []


def test_progress_lives_in_paimons_consumer_file(paimon_copy: Any) -> None:
    table = paimon_copy("pk_deduplicate")
    tbl = raylake.open_table(str(table))
    reader = tbl.stream(consumer_id="trainer", start=2)
    path = table / "consumer" / "consumer-trainer"
    assert json.loads(path.read_text()) == {"nextSnapshot": 2}
    first = list(reader.plans(max_plans=2))
    assert [p.snapshot_id for p in first] == [2, 3]
    reader.checkpoint()
    assert json.loads(path.read_text()) == {"nextSnapshot": 4}
    assert [(c.consumer_id, c.next_snapshot_id) for c in tbl.consumers()] == [("trainer", 4)]
    assert tbl.consumer("trainer").next_snapshot_id == 4 and tbl.consumer("other") is None
    resumed = tbl.stream(consumer_id="trainer", start="earliest")  # start ignored: resumes
    assert [p.snapshot_id for p in resumed.plans(timeout=0)] == [4, 5]


def test_progress_in_paimons_consumer_file_only_moves_forward(paimon_copy: Any) -> None:
    """As a raylake table's: a late notify of an earlier checkpoint is refused, never
    recorded (a restart would deliver again what was processed)."""
    table = paimon_copy("pk_deduplicate")
    tbl = raylake.open_table(str(table))
    reader = tbl.stream(consumer_id="trainer", start=2)
    list(reader.plans(max_plans=2))
    reader.checkpoint()
    with pytest.raises(ConsumerError, match=r"'trainer' is at snapshot 4; committing 3"):
        reader.notify_checkpoint_complete(3)
    resumed = tbl.stream(consumer_id="trainer")
    with pytest.raises(ConsumerError, match=r"'trainer' is at snapshot 4; committing 2"):
        resumed.notify_checkpoint_complete(2)
    path = table / "consumer" / "consumer-trainer"
    assert json.loads(path.read_text()) == {"nextSnapshot": 4}
    assert resumed.notify_checkpoint_complete(4).next_snapshot_id == 4


def test_compact_snapshots_deliver_nothing(paimon_copy: Any) -> None:
    table = paimon_copy("pk_deduplicate")
    sid = compact(table, lambda e: True, newest=True)
    tbl = raylake.open_table(str(table))
    reader = tbl.stream(start=sid)
    plan = reader.poll()  # an empty plan, as for a raylake table's COMPACT snapshot
    assert plan is not None and plan.kind == "empty" and plan.to_arrow().num_rows == 0
    assert reader.next_snapshot_id == sid + 1 and reader.poll() is None


def test_shards_split_the_buckets() -> None:
    tbl = raylake.open_table(PK)
    ids = []
    for i in range(2):
        plans = tbl.stream(start="earliest", shard=(i, 2)).plans(timeout=0)
        ids.append(
            sorted(r["id"] for p in plans for r in p.to_arrow().to_pylist() if p.kind == "full")
        )
    assert not set(ids[0]) & set(ids[1])
    assert sorted(ids[0] + ids[1]) == list(range(40))


@pytest.mark.parametrize("catch_up_after", [None, 1])
def test_shards_of_an_unbucketed_table_deliver_each_row_once_across_a_compaction(
    catch_up_after: int | None,
) -> None:
    """Java's table: three appends, then a COMPACT that wrote the four rows into a file
    another shard takes (was: that shard's catch-up delivered the compacted file whole,
    two rows twice, where the shard that lost its files read snapshot by snapshot)."""
    from pathlib import Path

    uri = Path(__file__).parent / "java_fixtures" / "orc_append_table_row_tracking_with_compact"
    tbl = raylake.open_table(str(uri))
    assert [s.commit_kind for s in tbl.snapshots()][-1] == "COMPACT"
    delivered = []
    for i in range(2):
        reader = tbl.stream(start="earliest", catch_up_after=catch_up_after, shard=(i, 2))
        delivered += [r for p in reader.plans(timeout=0) for r in p.to_arrow().to_pylist()]
    key = sorted(tbl.to_arrow().column_names)[0]
    assert sorted(r[key] for r in delivered) == sorted(tbl.to_arrow().column(key).to_pylist())


def test_a_bucket_list_is_checked_against_every_bucket_count_the_table_had(
    paimon_copy: Any,
) -> None:
    """A bucket beyond the table's is refused, naming it; after a rescale from 4 buckets
    to 2 the partitions it did not overwrite may still lie in buckets 2 and 3, and a
    dynamic-bucket table has no bound."""
    from test_paimon_overwrite_changes import _rescale

    with pytest.raises(StreamError, match=r"below 2: .* has 2 bucket\(s\), 0 to 1, so bucket 2"):
        raylake.open_table(str(FIXTURES / "append_bucketed" / "table")).stream(buckets=[2])
    with pytest.raises(StreamError, match="so bucket 1 holds none"):
        raylake.open_table(str(FIXTURES / "append_unaware" / "table")).stream(buckets=[1])
    raylake.open_table(str(FIXTURES / "pk_dynamic_overwrite" / "table")).stream(buckets=[99])
    table = paimon_copy("pk_deduplicate")
    _rescale(table)
    tbl = raylake.open_table(str(table))
    (full, *_) = tbl.stream(start="earliest", buckets=[2, 3]).plans(timeout=0)
    assert full.to_arrow().num_rows > 0
    with pytest.raises(StreamError, match=r"below 4: .* so bucket 4"):
        tbl.stream(start="earliest", buckets=[4])


def test_an_expired_position_is_an_error(paimon_copy: Any) -> None:
    table = paimon_copy("pk_deduplicate")
    (table / "snapshot" / "snapshot-1").unlink()
    (table / "snapshot" / "snapshot-2").unlink()
    tbl = raylake.open_table(str(table))
    with pytest.raises(StreamPositionExpiredError):
        tbl.stream(start=1).poll()


def test_an_expired_consumer_is_told_how_a_paimon_table_moves_it(paimon_copy: Any) -> None:
    """The error said to call Table.reset_consumer, which a Paimon table refuses."""
    table = paimon_copy("pk_deduplicate")
    (table / "consumer").mkdir()
    (table / "consumer" / "consumer-late").write_text(json.dumps({"nextSnapshot": 1}))
    (table / "snapshot" / "snapshot-1").unlink()
    tbl = raylake.open_table(str(table))
    with pytest.raises(StreamPositionExpiredError, match="Paimon's reset_consumer procedure"):
        tbl.stream(consumer_id="late").poll()
    with pytest.raises(UnsupportedOperationError, match="Apache Paimon table"):
        tbl.reset_consumer("late", 2)


def test_a_java_consumer_resumes_and_one_past_the_next_snapshot_is_refused(
    paimon_copy: Any,
) -> None:
    """Consumer files as Java writes them; one past the next snapshot (moved there with
    reset_consumer, or of a table created again) waited for that snapshot and skipped
    every one committed before it, where Paimon's reader raises OutOfRangeException."""
    from raylake.errors import SnapshotNotFoundError

    table = paimon_copy("pk_deduplicate")
    (table / "consumer").mkdir()
    for consumer, next_id in (("flink", 3), ("waiting", 6), ("ahead", 7)):
        text = f'{{\n  "nextSnapshot" : {next_id}\n}}'
        (table / "consumer" / f"consumer-{consumer}").write_text(text)
    tbl = raylake.open_table(str(table))
    assert [p.snapshot_id for p in tbl.stream(consumer_id="flink").plans(timeout=0)] == [3, 4, 5]
    assert tbl.stream(consumer_id="waiting").poll() is None
    with pytest.raises(SnapshotNotFoundError, match="consumer 'ahead' at 7 is past snapshot 6"):
        tbl.stream(consumer_id="ahead")


def _expire_before(table: Any, first_kept: int) -> None:
    """Expire as Paimon's ExpireSnapshotsImpl does: the manifest lists only the expired
    snapshots name, then their snapshot files, then the EARLIEST hint. It keeps a
    consumer's next snapshot, not the one before it."""
    snaps = {
        int(p.name.split("-")[1]): json.loads(p.read_text())
        for p in table.glob("snapshot/snapshot-*")
    }
    lists = ("baseManifestList", "deltaManifestList", "changelogManifestList")
    kept = {s.get(k) for i, s in snaps.items() if i >= first_kept for k in lists}
    for i, snap in snaps.items():
        if i < first_kept:
            for name in {snap.get(k) for k in lists} - kept - {None}:
                (table / "manifest" / name).unlink()
            (table / "snapshot" / f"snapshot-{i}").unlink()
    (table / "snapshot" / "EARLIEST").write_text(str(first_kept))


def test_a_catch_up_after_paimon_expired_the_last_read_snapshot(paimon_copy: Any) -> None:
    """A live reader that checkpointed (consumer at 7), then fell behind: Paimon expired
    snapshot 6, the one it read last, and the catch-up read 6's manifests from the
    reader's cache of it: FileNotFoundError. It now reads the snapshots one by one."""
    from paimon_spec import commit

    table = paimon_copy("pk_deduplicate")
    tbl = raylake.open_table(str(table))
    reader = tbl.stream(consumer_id="c", catch_up_after=2, prefetch=False)
    assert [p.kind for p in reader.plans(timeout=0)] == ["full"]
    commit(table, kind="APPEND")
    assert [p.snapshot_id for p in reader.plans(timeout=0)] == [6]
    reader.checkpoint()
    for _ in range(4):
        commit(table, kind="APPEND")
    _expire_before(table, 7)
    assert [p.snapshot_id for p in reader.plans(timeout=0)] == [7, 10]


def test_a_sequence_field_consumer_resumes_after_paimon_expired_the_parent(
    paimon_copy: Any,
) -> None:
    """A step of a sequence.field table compares the snapshot with its parent, which
    Paimon's expiration does not keep for a consumer (it keeps the next snapshot on):
    the resumed consumer was refused as expired (and told to move to where it was), for
    good. Without the parent the step reads the snapshot's delta files, as Paimon does."""
    table = paimon_copy("pk_sequence_field")
    tbl = raylake.open_table(str(table))
    reader = tbl.stream(consumer_id="c", start="earliest", catch_up_after=None)
    assert [p.snapshot_id for p in reader.plans(max_plans=4)] == [1, 2, 3, 4]
    reader.checkpoint()
    _expire_before(table, 5)
    (plan,) = tbl.stream(consumer_id="c", include_row_kind=True).plans(timeout=0)
    rows = plan.to_arrow()
    assert plan.snapshot_id == 5 and rows.num_rows > 0
    assert rows.equals(tbl.changelog(5))


def test_a_java_consumer_raylake_cannot_name_leaves_the_others_alone(paimon_copy: Any) -> None:
    """Paimon's consumer ids are free text: one named 'job:1' made consumers(), consumer()
    and every stream with a consumer of the table raise ConsumerArgumentError."""
    table = paimon_copy("pk_deduplicate")
    (table / "consumer").mkdir()
    for consumer in ("job:1", "my job", "trainer"):
        (table / "consumer" / f"consumer-{consumer}").write_text('{"nextSnapshot": 3}')
    tbl = raylake.open_table(str(table))
    assert [(c.consumer_id, c.next_snapshot_id) for c in tbl.consumers()] == [("trainer", 3)]
    assert tbl.consumer("trainer").next_snapshot_id == 3
    assert [p.snapshot_id for p in tbl.stream(consumer_id="trainer").plans(timeout=0)] == [3, 4, 5]


def test_partial_rows_need_a_changelog_producer() -> None:
    """Refused when the snapshot is planned, on the driver: reading the plan's splits
    (in Ray tasks, in a Spark job) raised it only once that work had started."""
    tbl = raylake.open_table(str(FIXTURES / "pk_partial_update" / "table"))
    with pytest.raises(UnsupportedPaimonError, match="changelog producer"):
        tbl.stream(start=2).poll()
    with pytest.raises(UnsupportedPaimonError, match="changelog producer"):
        tbl.changes(1, 3).plan()
    reader = tbl.stream(start="earliest")
    first = reader.poll()  # the whole first snapshot needs no delta files
    assert first is not None and first.to_arrow().num_rows == 40


def test_one_stream_reader_follows_both_formats() -> None:
    from raylake.streaming.reader import StreamReader

    tbl = raylake.open_table(PK)
    reader = tbl.stream(start="earliest")
    assert type(reader) is StreamReader
    assert [p.kind for p in reader.plans(timeout=0)] == ["full", *["delta"] * 4]


def test_a_streaming_job_shard_writes_each_change_once(paimon_copy: Any, tmp_path: Any) -> None:
    """A shard killed after its sink commit and before its checkpoint moves past what
    the sink already holds (exactly once), with Paimon's consumer file as progress."""
    import pyarrow as pa

    from raylake.streaming.job import JobSpec, ShardWorker
    from raylake.streaming.job_check import check_job

    source = paimon_copy("pk_changelog_input")
    sink_uri = str(tmp_path / "sink")
    raylake.create_table(sink_uri, pa.schema([("id", pa.int64()), ("x", pa.float64())]))
    spec = JobSpec(
        uri=str(source),
        fn=lambda rows: rows.select(["id", "x"]).cast(
            pa.schema([("id", pa.int64()), ("x", pa.float64())])
        ),
        consumer_id="copy",
        num_shards=2,
        sink_uri=sink_uri,
    )
    check_job(spec, output_schema=None, storage_options=None, sink_storage_options=None)
    for shard in range(2):
        ShardWorker(spec, shard).step()
    sink = raylake.open_table(sink_uri)
    first = sorted(sink.to_arrow().column("id").to_pylist())
    assert first == sorted([*range(8), *range(4, 10)])  # 8 inserts, then 6 updates
    consumer = source / "consumer" / "consumer-copy.shard-0-of-2"
    assert json.loads(consumer.read_text()) == {"nextSnapshot": 4}
    # The checkpoint after the commit was lost: the consumer is where the shard recorded
    # it before, where the commit's plans started (one elsewhere was reset there).
    consumer.write_text(json.dumps({"nextSnapshot": 1}))
    again = ShardWorker(spec, 0)
    again.step()
    assert again.position() == 4
    assert sorted(raylake.open_table(sink_uri).to_arrow().column("id").to_pylist()) == first


def test_a_job_shard_killed_before_its_first_checkpoint_commits_once(
    paimon_copy: Any, tmp_path: Any
) -> None:
    """A job starts with the whole state at the earliest snapshot, which Paimon's consumer
    file cannot record: a shard killed between that commit and its first checkpoint has
    no progress, and must still find its commit rather than write the state again."""
    from raylake.streaming.job import JobSpec, ShardWorker

    source = raylake.open_table(str(paimon_copy("append_unaware")))
    sink = raylake.create_table(str(tmp_path / "sink"), source.schema)
    spec = JobSpec(source.uri, lambda rows: rows, "copy", 1, sink_uri=sink.uri)
    killed = ShardWorker(spec, 0)
    plan = killed.reader.poll()
    assert plan is not None and plan.kind == "full"
    killed._commit(plan, [plan.to_arrow()])  # committed; killed before the checkpoint
    killed.reader.close()
    assert source.consumer("copy.shard-0-of-1") is None
    again = ShardWorker(spec, 0)
    assert again.reader.next_snapshot_id == plan.next_snapshot_id
    again.step()
    assert sorted(sink.to_arrow().column("id").to_pylist()) == sorted(
        source.to_arrow().column("id").to_pylist()
    )


def test_a_job_on_a_paimon_source_created_again_shorter_reads_it(
    paimon_copy: Any, tmp_path: Any
) -> None:
    """The sink's commit of source snapshot 3 cannot be of a source whose latest is 2: the
    shard starts at the new source's start rather than seek past its last snapshot."""
    from raylake.streaming.job import JobSpec, ShardWorker

    root = paimon_copy("append_unaware")
    source = raylake.open_table(str(root))
    sink = raylake.create_table(str(tmp_path / "sink"), source.schema)
    spec = JobSpec(source.uri, lambda rows: rows, "copy", 1, sink_uri=sink.uri)
    assert ShardWorker(spec, 0).step().next_snapshot_id == 4
    (root / "snapshot" / "snapshot-3").unlink()  # created again, with two snapshots
    (root / "snapshot" / "LATEST").write_text("2")
    for consumer in (root / "consumer").iterdir():
        consumer.unlink()
    again = ShardWorker(spec, 0)
    assert again.reader.next_snapshot_id == 1
    assert again.step().next_snapshot_id == 3


def _streamed(tbl: Any, **options: Any) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """The rows a stream's plans reach, applied in order, by primary key."""
    key = list(tbl.table_schema.primary_key)
    state: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for plan in tbl.stream(include_row_kind=True, **options).plans(timeout=0):
        for row in plan.to_arrow().to_pylist():
            kind = row.pop("_rl_kind")
            k = tuple(row[c] for c in key)
            if kind in ("-U", "-D"):
                state.pop(k, None)
            else:
                state[k] = tuple(row.items())
    return state


@pytest.mark.parametrize(
    "name", ["parquet_pk_09", "orc_pk_table_with_alter_table", "parquet_pk_with_bitmap_dv"]
)
@pytest.mark.parametrize("catch_up_after", [None, 1])
def test_a_deletion_vector_stream_reaches_the_compacted_state(
    name: str, catch_up_after: int | None
) -> None:
    """Java-written deletion-vector tables whose every commit a COMPACT follows: a batch
    read of a commit leaves its level-0 files out, the COMPACT that makes their rows
    visible gives a stream nothing, so a stream's whole start (and a catch-up's ends)
    must read level 0: from whichever snapshot it starts, it reaches the latest state."""
    from java_corpus import ROOT

    tbl = raylake.open_table(str(ROOT / name))
    key = list(tbl.table_schema.primary_key)
    want = {tuple(r[c] for c in key): tuple(r.items()) for r in tbl.to_arrow().to_pylist()}
    assert want
    for snap in tbl.snapshots():
        got = _streamed(tbl, start=snap.time, catch_up_after=catch_up_after)
        assert got == want, snap.id
    assert _streamed(tbl, start="earliest", catch_up_after=catch_up_after) == want


def test_a_deletion_vector_stream_gives_level_0_before_a_batch_read_does() -> None:
    """The latest snapshot's level-0 files are not compacted yet: a stream gives their
    rows (as Paimon's streaming scan does), the rows the same commits give a table
    without deletion vectors."""
    from java_corpus import ROOT

    dv = raylake.open_table(str(ROOT / "parquet_pk_table_scan_and_read_dv"))
    mor = raylake.open_table(str(ROOT / "parquet_pk_table_scan_and_read_mor"))
    assert dv.count() < mor.count()
    assert _streamed(dv, start="latest") == _streamed(mor, start="latest")
    assert len(_streamed(dv, start="earliest")) == mor.count()


def test_a_streaming_job_into_a_paimon_sink_is_refused_before_any_shard(tmp_path: Any) -> None:
    """raylake does not write Paimon tables: the driver's check refuses the sink, naming
    its format, where every shard failed at its first commit with its consumer on the
    source registered."""
    import pyarrow as pa

    from raylake.streaming.job import JobSpec
    from raylake.streaming.job_check import check_job

    source = raylake.create_table(str(tmp_path / "src"), pa.schema([("id", pa.int64())]))
    for mode in ("strict", "merge"):
        spec = JobSpec(source.uri, lambda t: t, "copy", 1, sink_uri=PK, schema_mode=mode)
        with pytest.raises(UnsupportedOperationError, match=r"sink_uri is not supported: .*Paimon"):
            check_job(spec, output_schema=None, storage_options=None, sink_storage_options=None)
    assert source.consumers() == []


def _compact_with_changelog(table: Any, level: int) -> int:
    """A COMPACT of every (level-0) file of each bucket into one file at ``level``, with
    the changelog a lookup or full compaction writes: nothing lay above level 0, so an
    insert of each live key."""
    import pyarrow as pa
    from paimon_spec import commit, data_file, live_entries
    from test_compacted import _merge, _rows

    by_bucket: dict[int, list[Any]] = {}
    for entry in live_entries(table):
        by_bucket.setdefault(entry["_BUCKET"], []).append(entry)
    added, changelog = [], []
    for entries in by_bucket.values():
        merged = _merge(pa.concat_tables([_rows(table, e) for e in entries]), newest=True)
        added.append(data_file(table, entries[0], merged, level=level))
        inserts = pa.array([0] * merged.num_rows, pa.int8())
        merged = merged.set_column(
            merged.schema.get_field_index("_VALUE_KIND"), "_VALUE_KIND", inserts
        )
        changelog.append(data_file(table, entries[0], merged, level=0, prefix="changelog"))
    deleted = [e for entries in by_bucket.values() for e in entries]
    return commit(table, kind="COMPACT", added=added, deleted=deleted, changelog=changelog)


@pytest.mark.parametrize(
    ("options", "level"),
    [
        ({"changelog-producer": "lookup"}, 1),
        ({"changelog-producer": "LOOKUP"}, 1),
        ({"changelog-producer": "full-compaction"}, 5),
        ({"changelog-producer": "full-compaction", "num-levels": "3"}, 2),
    ],
)
@pytest.mark.parametrize("catch_up_after", [None, 1])
def test_a_changelog_written_at_compaction_delivers_level_0_once(
    paimon_copy: Any, options: dict[str, str], level: int, catch_up_after: int | None
) -> None:
    """With a lookup (full-compaction) changelog producer Paimon's streaming start reads
    levels above 0 (the top level) only: the rows below come in the changelog of the
    compaction. A stream that read them in its whole start got every key twice."""
    table = paimon_copy("pk_deduplicate")
    schema = json.loads((table / "schema" / "schema-0").read_text())
    schema["options"].update(options)
    (table / "schema" / "schema-0").write_text(json.dumps(schema))
    tbl = raylake.open_table(str(table))
    readers = [tbl.stream(start=s, include_row_kind=True) for s in ("earliest", "latest")]
    before = [list(r.plans(timeout=0)) for r in readers]
    assert all(p.to_arrow().num_rows == 0 for plans in before for p in plans)
    compacted = _compact_with_changelog(table, level)
    want = sorted(tbl.to_arrow(columns=["id"]).column("id").to_pylist())
    for reader in readers:
        (plan,) = reader.plans(timeout=0)
        assert (plan.snapshot_id, plan.kind) == (compacted, "changelog")
        rows = plan.to_arrow()
        assert sorted(rows.column("id").to_pylist()) == want
        assert set(rows.column("_rl_kind").to_pylist()) == {"+I"}
    assert sorted(_streamed(tbl, start="earliest", catch_up_after=catch_up_after)) == [
        (k,) for k in want
    ]
