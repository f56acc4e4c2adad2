"""Following a Paimon table as a Paimon consumer.

    reader = tbl.stream(consumer_id="trainer", start="earliest")
    for plan in reader.plans(timeout=10):
        handle(plan.to_arrow())
        reader.checkpoint()

A reader starts with the whole state of a snapshot (``"latest"``, the default, or
``"earliest"``), or with nothing (``"latest-new"``), or with the changes of a given
snapshot id; then it delivers each later snapshot's changes (raylake/paimon/changes.py).
Progress lives in Paimon's own consumer file, ``consumer/consumer-<id>`` holding
``{"nextSnapshot": n}``, so that Paimon's snapshot expiration keeps what the consumer
still needs, and a reader with the same id resumes there. What was delivered but not
checkpointed is delivered again (at-least-once).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import pyarrow as pa

from raylake.errors import ConsumerError, StreamError, StreamPositionExpiredError
from raylake.expr import Expr
from raylake.format.consumer import ConsumerProgress, validate_consumer_id
from raylake.paimon.changes import changed_files, read_changes
from raylake.paimon.snapshot import PaimonSnapshots, read_snapshot
from raylake.paimon.source import read_consumer, write_consumer
from raylake.table.changes import ROW_KIND_FIELD, StreamPlanBase, with_row_kind
from raylake.table.scan import ReadContext
from raylake.table.split import Split


@dataclass(frozen=True)
class PaimonStreamPlan(StreamPlanBase):
    """What one snapshot delivers: its whole state (``kind="full"``) or its changes."""

    snapshot_id: int
    kind: str  # "full", "delta" (delta files), "changelog" (changelog files), "refresh"
    commit_kind: str
    schema: pa.Schema
    # Reads the rows: a module-level function bound to picklable values, so that a plan
    # can be read in a Ray task (read_lake_stream).
    _rows: Callable[[], pa.Table]

    def to_arrow(self) -> pa.Table:
        return self._rows()

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        yield from self._rows().to_batches()


class PaimonStreamReader:
    """Plans of a Paimon table's snapshots, one per snapshot that changed rows."""

    def __init__(
        self,
        table: Any,
        *,
        consumer_id: str | None = None,
        start: Any = "latest",
        poll_interval: float = 1.0,
        shard: tuple[int, int] | None = None,
        include_row_kind: bool = False,
        on_overwrite: str = "skip",
        columns: Sequence[str] | None = None,
        filter: str | Expr | None = None,
        catch_up_after: int | None = None,
        prefetch: bool = False,
    ) -> None:
        # catch_up_after and prefetch are accepted for StreamingJob's sake: this reader
        # reads one snapshot at a time and never ahead.
        del catch_up_after, prefetch
        if shard is not None and not (0 <= shard[0] < shard[1]):
            raise StreamError(f"shard must be (i, n) with 0 <= i < n, got {shard!r}")
        if on_overwrite not in ("skip", "refresh", "fail"):
            raise StreamError(
                f"on_overwrite must be 'skip', 'refresh' or 'fail', got {on_overwrite!r}"
            )
        self.on_overwrite = on_overwrite
        self.table = table
        self.file_io = table.file_io
        self.consumer_id = None if consumer_id is None else validate_consumer_id(consumer_id)
        self.poll_interval = float(poll_interval)
        self.include_row_kind = bool(include_row_kind)
        self._shard = shard
        self._columns, self._filter = columns, filter
        self._snapshots = PaimonSnapshots(self.file_io)
        self._closed = False
        resumed = (
            None if self.consumer_id is None else read_consumer(self.file_io, self.consumer_id)
        )
        # What the consumer file held at open (None: a new consumer), as StreamingJob
        # reads it; Paimon's consumer file keeps no properties.
        self.resumed_from: ConsumerProgress | None = None
        if resumed is not None and self.consumer_id is not None:
            self.resumed_from = ConsumerProgress(self.consumer_id, resumed, 0)
        if resumed is not None:
            self.next_snapshot_id, self._full_next = resumed, False
        else:
            self.next_snapshot_id, self._full_next = self._start(start)
            # Registered now, unless it starts with a whole state: Paimon's consumer file
            # cannot say "read snapshot n whole", so such a consumer registers at its
            # first checkpoint (until then a restart starts over).
            if self.consumer_id is not None and not self._full_next:
                write_consumer(self.file_io, self.consumer_id, self.next_snapshot_id)

    @property
    def position(self) -> Any:
        """Where the reader stands, as a ``StreamPosition`` (``start=`` takes it back)."""
        from raylake.streaming.reader import StreamPosition  # the streams' shared vocabulary

        return StreamPosition(self.next_snapshot_id, self._full_next)

    def _start(self, start: Any) -> tuple[int, bool]:
        ids = self._snapshots.ids()
        if isinstance(start, int) and not isinstance(start, bool):
            return start, False
        if hasattr(start, "next_snapshot_id"):  # a StreamPosition
            return int(start.next_snapshot_id), bool(start.full)
        if start == "latest":
            return (ids[-1], True) if ids else (1, False)
        if start == "earliest":
            return (ids[0], True) if ids else (1, False)
        if start == "latest-new":
            return (ids[-1] + 1 if ids else 1), False
        raise StreamError(
            f"start must be 'latest', 'earliest', 'latest-new' or a snapshot id, got {start!r}"
        )

    def _keep_bucket(self, bucket: int) -> bool:
        return self._shard is None or bucket % self._shard[1] == self._shard[0]

    def _context(self, snapshot_id: int) -> ReadContext:
        scan = self.table.scan(columns=self._columns, filter=self._filter, snapshot_id=snapshot_id)
        return scan.read_context()  # type: ignore[no-any-return]

    def poll(self) -> PaimonStreamPlan | None:
        """The next snapshot's plan, or None if there is no new snapshot yet."""
        while not self._closed:
            sid = self.next_snapshot_id
            snap = read_snapshot(self.file_io, sid)
            if snap is None:
                ids = self._snapshots.ids()
                if ids and sid < ids[0]:
                    raise StreamPositionExpiredError(
                        sid, ids[0], self.file_io.uri, self.consumer_id
                    )
                return None
            self.next_snapshot_id = sid + 1
            if self._full_next:
                self._full_next = False
                return self._full_plan(sid, snap.commit_kind)
            if snap.commit_kind == "OVERWRITE" and self.on_overwrite != "skip":
                if self.on_overwrite == "fail":
                    raise StreamError(
                        f"snapshot {sid} of {self.file_io.uri} overwrites the table; the "
                        "stream was opened with on_overwrite='fail'"
                    )
                return self._full_plan(sid, snap.commit_kind, kind="refresh")
            ctx = self._context(sid)
            source, files = changed_files(ctx, snap, self._keep_bucket)
            if source == "none":
                continue  # COMPACT without changelog, OVERWRITE: nothing to deliver
            rows = partial(read_changes, ctx, source, files, self.include_row_kind)
            return PaimonStreamPlan(sid, source, snap.commit_kind, self._schema(ctx), rows)
        return None

    def _full_plan(self, sid: int, commit_kind: str, kind: str = "full") -> PaimonStreamPlan:
        scan = self.table.scan(columns=self._columns, filter=self._filter, snapshot_id=sid)
        splits = [s for s in scan.plan() if self._keep_bucket(s.bucket)]
        ctx = scan.read_context()
        rows = partial(_read_state, ctx, splits, self.include_row_kind)
        return PaimonStreamPlan(sid, kind, commit_kind, self._schema(ctx), rows)

    def _schema(self, ctx: ReadContext) -> pa.Schema:
        return with_row_kind(ctx.output_schema, self.include_row_kind)

    def plans(
        self, *, max_plans: int | None = None, timeout: float | None = None
    ) -> Iterator[PaimonStreamPlan]:
        """Plans as they come; ends after ``max_plans``, ``timeout`` idle seconds or ``close()``."""
        delivered, idle_since = 0, time.monotonic()
        while not self._closed and (max_plans is None or delivered < max_plans):
            plan = self.poll()
            if plan is not None:
                delivered, idle_since = delivered + 1, time.monotonic()
                yield plan
                continue
            if timeout is not None and time.monotonic() - idle_since >= timeout:
                return
            time.sleep(self.poll_interval)

    def __iter__(self) -> Iterator[PaimonStreamPlan]:
        return self.plans()

    def checkpoint(self) -> ConsumerProgress:
        """Record that every plan delivered so far is processed."""
        return self.notify_checkpoint_complete(self.next_snapshot_id)

    def notify_checkpoint_complete(
        self, next_snapshot_id: int, properties: Mapping[str, str] | None = None
    ) -> ConsumerProgress:
        """Record progress up to ``next_snapshot_id``. ``properties`` are not kept:
        Paimon's consumer file holds ``nextSnapshot`` only."""
        if self.consumer_id is None:
            raise ConsumerError("a checkpoint needs a reader opened with a consumer_id")
        write_consumer(self.file_io, self.consumer_id, next_snapshot_id)
        return ConsumerProgress(self.consumer_id, next_snapshot_id, int(time.time() * 1000))

    def seek(self, next_snapshot_id: int, properties: Mapping[str, str] | None = None) -> None:
        """Continue at ``next_snapshot_id`` (its changes), recorded if the reader has an id."""
        self.next_snapshot_id, self._full_next = next_snapshot_id, False
        if self.consumer_id is not None:
            write_consumer(self.file_io, self.consumer_id, next_snapshot_id)

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> PaimonStreamReader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _read_state(ctx: ReadContext, splits: Sequence[Split], include_row_kind: bool) -> pa.Table:
    """A whole state as a plan's rows: every row an insert."""
    state = ctx.read_table(splits)
    if include_row_kind:
        state = state.append_column(ROW_KIND_FIELD, pa.repeat(pa.scalar("+I"), state.num_rows))
    return state
