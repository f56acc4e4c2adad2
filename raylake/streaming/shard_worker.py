"""One shard of a StreamingJob: the work its Ray actor does, step by step (usable
without Ray, as the tests do). The module docstring of raylake/streaming/job.py says
what a shard guarantees."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import pandas as pd
import pyarrow as pa

from raylake.errors import (
    CommitConflictError,
    CorruptMetadataError,
    InvalidOptionError,
    SchemaError,
    StreamError,
)
from raylake.format.options import CONSUMER_EXPIRATION_TIME, duration_millis
from raylake.format.snapshot import Snapshot
from raylake.streaming.options import JobSpec, StreamOptions
from raylake.streaming.plan import StreamPlan
from raylake.streaming.reader import StreamReader
from raylake.table import Table, open_table
from raylake.table.conform import pandas_to_arrow as dataframe_as_written
from raylake.table.evolve import adopt_planned_schema, merged_input
from raylake.table.projection import follow_columns
from raylake.table.writer import CommitMessage, writing

logger = logging.getLogger(__name__)

SINK_SNAPSHOT = "stream.sink-snapshot"
# Sink commit property: the source snapshot its first plan starts at, the position of the
# shard's checkpoint before it.
COMMIT_FROM = "stream.from"
# Shards that add different columns to the sink at once race on its next schema file;
# the loser writes its output again under the winner's schema, this many times at most.
SCHEMA_ATTEMPTS = 5


@dataclass(frozen=True)
class ShardStatus:
    shard: int
    next_snapshot_id: int
    plans: int  # plans processed in this step
    rows_in: int
    rows_out: int


class ShardWorker:
    """One shard of a job; a plain object, run as a Ray actor by :class:`StreamingJob`."""

    def __init__(self, spec: JobSpec, shard: int) -> None:
        self.spec = spec
        self.shard = shard
        self.consumer_id = spec.shard_consumer(shard)
        self.commit_user = f"raylake-stream/{self.consumer_id}"
        self.source = open_table(spec.uri, storage_options=spec.storage_options)
        self.sink: Table | None = None
        if spec.sink_uri is not None:
            self.sink = open_table(spec.sink_uri, storage_options=spec.sink_storage_options)
        self.reader = self._open_reader()
        self._sink_base = self._resume()
        self._rewinding = False  # a failed step's rewind failed too: redo it first
        self._expiry_ms = consumer_expiry_millis(self.source)
        self._recorded = time.monotonic()  # when this shard last recorded its position
        self._prefix = f"stream-{shard}"  # of the sink's data file names

    def _open_reader(self) -> StreamReader:
        options = _following(self.source, self.spec, self.spec.reader_options(self.shard))
        return self.source.stream(consumer_id=self.consumer_id, options=options)

    def _resume(self) -> int:
        """Move past plans whose output the sink already holds; the sink snapshot to
        search from next time."""
        self._progress = self.reader.resumed_from
        if self.sink is None:
            return 0
        progress = self.reader.resumed_from  # read once, by the reader, at open
        newest_sink = self.sink.source.latest()
        latest = 0 if newest_sink is None else newest_sink.id
        if self.source.source.consumer_properties and (
            progress is None or SINK_SNAPSHOT not in progress.properties
        ):
            # A new consumer (a first start, one deleted to start over, a source created
            # again): no sink commit is its own yet, even one under its commit user from an
            # earlier life. Recorded at once, so a restart searches only what comes after.
            # So is a consumer that lacks the record, which a shard writes before any of its
            # commits: its reader registered it and the actor died before the record, or
            # reset_consumer registered it (a start chosen after a delete). Either took
            # the earlier life's last commit for its own and skipped the source up to it.
            self._progress = self.reader.notify_checkpoint_complete(
                self.reader.next_snapshot_id, {SINK_SNAPSHOT: str(latest)}
            )
            return latest
        # Past the source's latest snapshot, a commit is of a source that was created
        # again: seeking there would skip what this one has (refused).
        named = None if newest_sink is None else newest_sink.named_commits.get(self.commit_user)
        committed = self._last_commit(newest_sink, named, progress)
        newest = self.source.source.latest_id() or 0
        if named is not None and named[2] <= newest:
            # The sink holds changes of the source up to the highest snapshot this shard
            # committed, also where a reset moved the shard back before it: a catch-up's
            # net changes from before that would keep rows the sink got since and the
            # source lost (the snapshots up to it are read one by one, each change applied
            # again).
            self.reader.catch_up_from = named[2] + 1
        if committed is not None and self.reader.next_snapshot_id <= committed <= newest:
            logger.info(
                "%s: output of source snapshot %d is in the sink (snapshot %d or before); "
                "moving on", self.consumer_id, committed, latest,
            )  # fmt: skip
            self._progress = self.reader.seek(committed + 1, {SINK_SNAPSHOT: str(latest)})
        return latest

    def _last_commit(
        self, newest_sink: Snapshot | None, named: tuple[int, int, int] | None, progress: Any
    ) -> int | None:
        """The identifier of this shard's last sink commit: the source snapshot its
        output ends with."""
        if newest_sink is None or self.sink is None:
            return None
        since = 0 if progress is None else int(progress.properties.get(SINK_SNAPSHOT, "0"))
        if named is not None:  # newest_sink's record of this shard's commits
            # Carried by every sink commit: known after expiration removed the snapshot
            # that made it, which the history below no longer holds (docs/format.md 6.4).
            # A commit at or before the checkpoint's sink snapshot was checkpointed.
            identifier, made_in, _ = named
            if made_in <= since:
                return None
            made = self.sink.source.read_if_present(made_in)  # None: expired, as it was
            return None if made is not None and self._moved(made, progress) else identifier
        # A sink written before snapshots named their users' last commits, or a Paimon
        # consumer file, which keeps neither the sink snapshot nor a whole-state start
        # (it is written at the first checkpoint past it): no progress may be a shard
        # killed between its first commit and that checkpoint, so the whole sink is
        # searched (docs/paimon.md: start over with another consumer id).
        # The sink's history only: a slow commit of this shard, refused as made at an id
        # that expiration had freed, left a stray snapshot under its commit user, whose
        # rows the sink lacks (docs/format.md 6.6).
        for snap in self.sink.source.snapshots.history(newest_sink, since):
            if snap.commit_user == self.commit_user:
                return None if self._moved(snap, progress) else snap.commit_identifier
        return None

    @staticmethod
    def _moved(commit: Snapshot, progress: Any) -> bool:
        """Whether the consumer was moved since ``commit``, a commit of this shard after its
        checkpoint: its plans started at the checkpoint's position, and a consumer that is
        elsewhere now was reset there (Table.reset_consumer) to process from there again.
        Skipping the commit's snapshots undid the reset."""
        start = commit.properties.get(COMMIT_FROM)
        return (
            progress is not None and start is not None and int(start) != progress.next_snapshot_id
        )

    def step(self) -> ShardStatus:
        """Process the plans available now (at most ``max_plans_per_step``); their output
        goes to the sink as one commit, named by the last plan's snapshot.

        If anything fails (``fn``, the sink commit, the checkpoint), the shard goes back
        to its last checkpoint before the error propagates, as a restarted actor would:
        a later step reprocesses the plans that were not committed.
        """
        if self._rewinding:  # the last failed step could not go back: first do that
            self._rewind()
        try:
            return self._step()
        except BaseException:
            try:
                self._rewind()
            except Exception:  # the step's own error is the one to raise; next step retries
                logger.warning("%s: going back failed", self.consumer_id, exc_info=True)
            raise

    def _rewind(self) -> None:
        self._rewinding = True
        self.reader.close()
        self._restore_consumer(self.reader._last_read)
        self.reader = self._open_reader()
        self._sink_base = self._resume()
        self._rewinding = False

    def _restore_consumer(self, last_read: Snapshot | None) -> None:
        """Register the consumer again where this shard last recorded it, where it is gone
        from the source it read (``consumer.expiration-time`` removed it while the shard
        recorded nothing: between the runs of a job, or while every step failed). Opened as
        a new consumer, the shard started over from ``start`` and the sink got again every
        row it had; now it goes on from its checkpoint, or raises
        StreamPositionExpiredError where the snapshots it needs expired with it. A source
        created again (its snapshot read last is another, or gone while earlier ones are
        there) keeps the new consumer: its rows are new."""
        last, source = self._progress, self.source.source
        if last is None or last_read is None or source.consumer(self.consumer_id) is not None:
            return
        now = source.read_if_present(last_read.id)
        if now is None:
            earliest = source.earliest_id()
            if earliest is None or earliest <= last_read.id:
                return
        elif now.commit_id != last_read.commit_id:
            return
        logger.warning(
            "%s: the consumer expired under the running shard; registered again at "
            "snapshot %d, where the shard last recorded it",
            self.consumer_id, last.next_snapshot_id,
        )  # fmt: skip
        source.register_consumer(self.consumer_id, last.next_snapshot_id, last.properties)

    def _step(self) -> ShardStatus:
        batch: list[StreamPlan] = []
        outputs: list[pa.Table] = []
        plans = rows_in = rows_out = 0
        while plans < self.spec.max_plans_per_step:
            plan = self.reader.poll()
            if plan is None:
                break
            if plan.is_refresh:  # it replaces the sink: what came before goes first
                self._flush(batch, outputs)
                batch, outputs = [], []
            seen, out = self._apply(plan)
            batch.append(plan)
            outputs += out
            plans, rows_in, rows_out = plans + 1, rows_in + seen, rows_out + _rows(out)
            if plan.is_refresh:
                self._flush(batch, outputs)
                batch, outputs = [], []
        self._flush(batch, outputs)
        if not plans:
            self._renew()
        return ShardStatus(self.shard, self.reader.next_snapshot_id, plans, rows_in, rows_out)

    def _renew(self) -> None:
        """Record the position again while the source is quiet, a quarter of the source's
        ``consumer.expiration-time`` after the last time: an expiration (raylake's, or
        Paimon's) must not take a running job's consumer for a stopped one's."""
        if self._expiry_ms is None or (time.monotonic() - self._recorded) * 4000 < self._expiry_ms:
            return
        self._progress = self.reader.notify_checkpoint_complete(
            self.reader.next_snapshot_id, {SINK_SNAPSHOT: str(self._sink_base)}
        )
        self._recorded = time.monotonic()

    def _apply(self, plan: StreamPlan) -> tuple[int, list[pa.Table]]:
        rows_in = 0
        outputs = []
        for batch in plan.to_batches():
            rows_in += batch.num_rows
            out = self.spec.fn(pa.Table.from_batches([batch]))
            if out is not None:
                outputs.append(_as_arrow(out, self.sink))
        return rows_in, outputs

    def _flush(self, plans: list[StreamPlan], outputs: list[pa.Table]) -> None:
        """Commit the output of consecutive plans, then checkpoint after the last."""
        if not plans:
            return
        last = plans[-1]
        if self.sink is not None and (_rows(outputs) or last.is_refresh):
            snap = self._commit(last, outputs, plans[0].first_snapshot_id)
            self._sink_base = max(self._sink_base, snap.id)
        self._progress = self.reader.notify_checkpoint_complete(
            last.next_snapshot_id, {SINK_SNAPSHOT: str(self._sink_base)}
        )
        self._recorded = time.monotonic()

    def _commit(self, last: StreamPlan, outputs: list[pa.Table], first: int | None = None) -> Any:
        assert self.sink is not None
        properties = {"stream.source": self.spec.uri, "stream.consumer": self.consumer_id}
        if first is not None:
            properties[COMMIT_FROM] = str(first)
        messages = self._write(outputs)
        return self.sink.commit(
            messages,
            mode="overwrite" if last.is_refresh else "append",
            # A refresh replaces the whole sink: it conflicts with nothing before it. Its
            # base is the latest snapshot, not None, which would make the committer take an
            # earlier run's commit of the same identifier (before a reset) for this one.
            base_snapshot_id=(self.sink.source.latest_id() or 0)
            if last.is_refresh
            else self._sink_base,
            commit_user=self.commit_user,
            commit_identifier=last.snapshot_id,
            properties=properties,
        )

    def _write(self, outputs: list[pa.Table]) -> list[CommitMessage]:
        """The sink's files of ``outputs``. Under ``schema_mode="merge"`` they are written
        under the sink's schema plus their new columns, planned, and that schema is
        committed just before the data, as ``Table.write`` does: a step that fails
        (``fn``, a refused output, the commit) adds no column to the sink."""
        assert self.sink is not None
        if self.spec.schema_mode != "merge":
            return _written(self.sink, outputs, self._prefix)
        for attempt in range(SCHEMA_ATTEMPTS):
            target, chunks = merged_input(self.sink, outputs)
            messages = _written(target, chunks, self._prefix)
            try:
                adopt_planned_schema(self.sink, target, messages)  # deletes them if it fails
            except CommitConflictError:
                if attempt == SCHEMA_ATTEMPTS - 1:
                    raise
                continue
            return messages
        raise AssertionError("unreachable")

    def position(self) -> int:
        return self.reader.next_snapshot_id


class ShardActor:
    """A shard as its Ray actor runs it: the :class:`ShardWorker` is made by the first
    call, not in the actor's constructor. Ray restarts an actor lost with its node or
    process, but not one whose constructor raised: that actor stays dead, and every
    later call raises Ray's ActorDiedError. So a store that failed for a moment while a
    lost shard restarted stopped it for good. Here the failure is raised by the call
    that made the worker, as the raylake error it is, and the next call tries again."""

    def __init__(self, spec: JobSpec, shard: int) -> None:
        self.spec = spec
        self.shard = shard
        self._worker: ShardWorker | None = None

    def _made(self) -> ShardWorker:
        if self._worker is None:
            self._worker = ShardWorker(self.spec, self.shard)
        return self._worker

    def position(self) -> int:
        return self._made().position()

    def step(self) -> ShardStatus:
        return self._made().step()


def _following(source: Table, spec: JobSpec, options: StreamOptions) -> StreamOptions:
    """``options`` whose columns and filter name the fields of the schema the job was
    checked under, by their names in ``source``'s schema. A running shard's reader
    follows renames snapshot by snapshot; an actor Ray restarted after one opens the
    source anew, and its reader refused the job's old names (UnknownColumnError at
    every step)."""
    checked, now = spec.source_schema_id, source.table_schema
    if (
        checked is None
        or checked >= now.schema_id
        or (options.columns, options.filter) == (None, None)
    ):
        return options
    try:
        then = Table(source.file_io, source.source.schema(checked), source.source)
        then.source.check_opened_schema(then.table_schema, then.source.latest())
        # A source created again may hold that schema id with other columns.
        scan = then.scan(columns=options.columns, filter=options.filter)
    except (SchemaError, CorruptMetadataError, FileNotFoundError, KeyError):
        return options  # the source was created again: its names are its own
    columns, expr = follow_columns(then.table_schema, now, scan.columns, scan.filter)
    return options.replace(columns=columns, filter=expr)


def consumer_expiry_millis(table: Table) -> int | None:
    """The table's ``consumer.expiration-time`` in milliseconds, as raylake or Paimon
    stores it (None: consumers do not expire, or a value this reader cannot parse)."""
    raw = table.table_schema.stored_options.get(CONSUMER_EXPIRATION_TIME)
    if raw is None:
        return None
    try:
        return duration_millis(CONSUMER_EXPIRATION_TIME, raw)
    except InvalidOptionError:
        logger.warning("%s: cannot read %s=%r", table.uri, CONSUMER_EXPIRATION_TIME, raw)
        return None


def _written(sink: Table, outputs: Any, prefix: str) -> list[CommitMessage]:
    with writing(sink.new_writer(file_prefix=prefix)) as writer:
        for out in outputs:
            writer.write(out)
        return writer.prepare_commit()


def _rows(tables: list[pa.Table]) -> int:
    return sum(t.num_rows for t in tables)


def _as_arrow(out: Any, sink: Table | None) -> pa.Table:
    if isinstance(out, pa.Table):
        return out
    if isinstance(out, pa.RecordBatch):
        return pa.Table.from_batches([out])
    if isinstance(out, pd.DataFrame):
        # As Table.write takes one: a named index (a groupby's key) is a column, a column
        # pyarrow cannot type takes the sink's type, and one the sink lacks (merged in)
        # takes the type from_pandas gives. pyarrow's own conversion dropped the index.
        return dataframe_as_written(out, None if sink is None else sink.schema)
    raise StreamError(
        f"the job function must return a pyarrow Table or RecordBatch, a pandas DataFrame "
        f"or None, got {type(out).__name__}"
    )
