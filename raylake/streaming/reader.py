"""The stream reader: follows a table's new snapshots, sync or async, with consumer progress.

    reader = table.stream(consumer_id="features", start="earliest", shard=(0, 4))
    for plan in reader:                 # blocks between commits (poll_interval)
        handle(plan.to_arrow())
        reader.checkpoint()             # progress survives a restart

Position: the reader delivers plans in snapshot order and knows the snapshot it
reads next. ``checkpoint()`` records that position in ``consumer/consumer-<id>``
(atomically); a new reader with the same id continues exactly there, so what was
delivered but not checkpointed is delivered again (at-least-once for the reader
alone; exactly-once for jobs whose output commit carries the position, see
raylake/streaming/job.py). The consumer is registered when the reader starts, so
expiration keeps what it needs from the first moment.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, NoReturn

from raylake.arguments import (
    check_mapping,
    check_optional_count,
    check_seconds,
    refuse_unknown_keywords,
)
from raylake.caching import LruCache
from raylake.errors import (
    ConsumerArgumentError,
    ConsumerError,
    StreamArgumentError,
    StreamError,
    StreamPositionExpiredError,
    TableNotFoundError,
)
from raylake.format.consumer import STREAM_MODE, ConsumerProgress, validate_consumer_id
from raylake.format.snapshot import Snapshot
from raylake.streaming.options import DEFAULT_CATCH_UP_AFTER as DEFAULT_CATCH_UP_AFTER
from raylake.streaming.options import START_NAMES as START_NAMES
from raylake.streaming.options import StartPosition as StartPosition
from raylake.streaming.options import StreamOptions as StreamOptions
from raylake.streaming.options import StreamPosition as StreamPosition
from raylake.streaming.options import next_snapshot_arg
from raylake.streaming.plan import StreamPlan, StreamPlanner
from raylake.streaming.reach import check_reachable
from raylake.streaming.shard import ShardSpec
from raylake.streaming.splits import StreamReadContext
from raylake.streaming.start import start_position
from raylake.streaming.unpicklable import NotPicklable
from raylake.table.kind import kind_of

if TYPE_CHECKING:
    from raylake.table.table import Table

logger = logging.getLogger(__name__)


class StreamReader(NotPicklable):
    """Plans of a table's new snapshots, one per snapshot (or one per catch-up)."""

    def __init__(
        self,
        table: Table,
        *,
        consumer_id: str | None = None,
        options: StreamOptions | None = None,
        **keywords: Any,
    ) -> None:
        """``options`` (a :class:`StreamOptions`), or its fields as keywords (``start``,
        ``poll_interval``, ``shard``, ``columns``, ...), which replace those of ``options``."""
        options = StreamOptions.of(options, **keywords)
        self.options = options
        table.kind.check_changes("stream()")
        self.table = table
        self.consumer_id = None if consumer_id is None else validate_consumer_id(consumer_id)
        self.poll_interval = options.poll_interval
        self.catch_up_after = options.catch_up_after
        # No catch-up starts before this snapshot: a job's sink already holds the source
        # up to the one before it (a reset's replay; streaming/shard_worker.py).
        self.catch_up_from = 0
        self.shard = ShardSpec.of_options(options).within(table.kind, table.uri)
        scan = table.scan(columns=options.columns, filter=options.filter)
        context = StreamReadContext(
            table.file_io,
            table.table_schema,
            scan.columns,
            scan.filter,
            options.include_row_kind,
        )
        self.planner = StreamPlanner(context, self.shard, options.on_overwrite, table.source)
        self._snapshots = table.source
        self._cache: LruCache[int, Snapshot] = LruCache(64)
        self._prefetcher: ThreadPoolExecutor | None = None
        self._prefetched: tuple[int, Future[Snapshot | None]] | None = None
        self._prefetch = options.prefetch
        self._closed = False
        if consumer_id is not None:  # none registered in a table created again since
            table.source.check_opened_schema(table.table_schema, table.source.latest())
        # The snapshot read next, and whether it is read whole (a start) or as a change.
        progress = None if consumer_id is None else self._snapshots.consumer(self.consumer_id)  # type: ignore[arg-type]
        # The consumer's progress as read at open (None: a new consumer), for callers
        # that keep more in it (a job's sink snapshot) without reading it again.
        self.resumed_from: ConsumerProgress | None = progress
        self._kept: dict[str, str] = {} if progress is None else dict(progress.properties)
        if progress is not None:
            self._check_not_expired(progress.next_snapshot_id)
            # Past the next snapshot (a position moved there by hand, or kept from a table
            # created again): waiting would skip the snapshots before it. Paimon refuses too.
            at, why = progress.next_snapshot_id, "moved there, or the table was created again"
            check_reachable(self._snapshots, table.uri, at, f"consumer {consumer_id!r} at", why)
            self.next_snapshot_id = progress.next_snapshot_id
            self._full_next = progress.properties.get(STREAM_MODE) == "full"
        else:
            self._begin(options.start)
        # The snapshot the last plan ended at (at open, the one before a start at changes),
        # as read here: a table created again shows as a next snapshot not following it.
        n = self.next_snapshot_id
        self._last_read = None if self._full_next or n == 1 else self._get(n - 1)
        # The snapshot read whole first, if any: a checkpoint back at it must say so.
        self._full_start = self.next_snapshot_id if self._full_next else None
        self._pending: asyncio.Future[StreamPlan | None] | None = None
        self._pending_from = self.position  # where the pending async poll started

    def __repr__(self) -> str:
        who = f"consumer {self.consumer_id!r}, " if self.consumer_id else ""
        return (
            f"StreamReader({self.table.uri!r}, {who}{self.shard.describe()}, "
            f"next snapshot {self.next_snapshot_id})"
        )

    # -- where to start ----------------------------------------------------------------

    @property
    def position(self) -> StreamPosition:
        """The position after the plans delivered so far: not past a plan that an async
        poll read and the caller has not received (its ``__anext__`` was cancelled)."""
        if self._pending is not None:
            return self._pending_from
        return StreamPosition(self.next_snapshot_id, self._full_next)

    def _begin(self, start: StartPosition) -> None:
        """Start at ``start``, a new consumer registered there so that expiration keeps
        what it needs. A named start (``"earliest"``, ``"latest"``) that an expiration
        removed while the consumer registered is looked up again: a new consumer has no
        position of its own to lose."""
        while True:
            self.next_snapshot_id, self._full_next = start_position(
                self.table, start, self._check_not_expired
            )
            if self.consumer_id is None:
                return
            try:
                self._record(self.next_snapshot_id, self._full_next)
                return
            except StreamPositionExpiredError:
                if not isinstance(start, str):
                    raise

    def _check_not_expired(self, needed: int) -> None:
        earliest = self._snapshots.earliest_id()
        if earliest is not None and needed < earliest:
            raise StreamPositionExpiredError(needed, earliest, self.table.uri, self.consumer_id)

    # -- reading -------------------------------------------------------------------------

    def poll(self) -> StreamPlan | None:
        """The next plan if its snapshot exists, else None (never blocks on new commits)."""
        if self._closed:
            raise StreamError(f"{self!r} is closed")
        wanted = self.next_snapshot_id
        snap = self._get(wanted)
        if snap is None:
            self._check_position(wanted)
            return None
        if self._full_next:
            plan, last = self.planner.full(snap), snap
        else:
            self._check_follows(snap)
            plan, last = self._catch_up(snap) or (self._step(snap), snap)
        self._advance(plan, last)
        return plan

    def _step(self, snap: Snapshot) -> StreamPlan:
        parent = snap.parent_id
        # Not from the cache: the base must still be on the store when the diff reads it.
        if (
            parent is not None
            and self._snapshots.keeps_step_parent
            and kind_of(self.table.table_schema).step_needs_parent()
            and self._snapshots.read_if_present(parent) is None
        ):
            # The diff base is gone: the changes of this snapshot cannot be known. (A
            # consumer moved past a gap by reset_consumer reads the snapshot whole.)
            self._check_not_expired(parent)
        return self.planner.step(snap)

    def _catch_up(self, snap: Snapshot) -> tuple[StreamPlan, Snapshot] | None:
        if self.catch_up_after is None or snap.id < self.catch_up_from:  # no hint read
            return None
        hint = self._snapshots.read_hint()
        if hint is None or hint - snap.id + 1 <= self.catch_up_after:
            return None
        # Not from the cache: Paimon's expiration keeps a consumer's next snapshot only.
        last_read = self._snapshots.read_if_present(snap.id - 1)
        latest = self._snapshots.latest()
        if last_read is None or latest is None:
            return None
        plan = self.planner.catch_up(last_read, latest)
        if plan is None:
            return None
        logger.info("%r caught up from snapshot %d to %d", self, snap.id, latest.id)
        return plan, latest

    def _advance(self, plan: StreamPlan, last: Snapshot) -> None:
        self.next_snapshot_id = plan.next_snapshot_id
        self._full_next = False
        self._last_read = last
        if self._prefetch and not self._closed:  # a poll run on past close() starts none
            self._start_prefetch(self.next_snapshot_id)

    def _check_position(self, wanted: int) -> None:
        """A missing next snapshot is normal (not committed yet) unless it expired or the
        table went away."""
        hint = self._snapshots.read_hint()
        # No hint: a table without snapshots, or none at all (deleted, whether or not
        # this reader saw a snapshot of it; one look, on empty polls of such a table).
        if hint is None and not self.table.file_io.exists("schema"):
            raise TableNotFoundError(self.table.uri)
        last = self._last_read
        if last is not None and (hint is None or hint < last.id):
            # The hint may lag; the newest snapshot never expires: a table whose newest
            # snapshot is older than one read here was created again.
            latest = self._snapshots.latest()
            if latest is None or latest.id < last.id:
                self._replaced("has no snapshots" if latest is None else f"ends at {latest.id}")
            if latest.id == last.id and latest.commit_id != last.commit_id:
                self._replaced(f"has another snapshot {last.id}")
        if hint is None:
            return
        # It should exist: expired, or committed between the two reads.
        if hint >= wanted and self._get(wanted) is None:
            self._check_not_expired(wanted)

    def _check_follows(self, snap: Snapshot) -> None:
        """``snap`` must be the child of the snapshot read last (by commit id, where the
        format records them: not Paimon's)."""
        last = self._last_read
        if (
            last is not None
            and snap.id == last.id + 1
            and last.commit_id
            and snap.parent_commit_id
            and snap.parent_commit_id != last.commit_id
        ):
            self._replaced(f"has a snapshot {snap.id} made on another snapshot {last.id}")

    def _replaced(self, now: str) -> NoReturn:
        assert self._last_read is not None
        raise StreamError(
            f"{self.table.uri} was dropped and created again under {self!r}: it read snapshot "
            f"{self._last_read.id} of the old table, and the table now {now}. Open a new "
            "stream (a consumer's progress went with the old table)"
        )

    def _get(self, snapshot_id: int) -> Snapshot | None:
        cached = self._cache.get(snapshot_id)
        if cached is not None:
            return cached
        prefetched = self._prefetched
        snap = None
        if prefetched is not None and prefetched[0] == snapshot_id:
            self._prefetched = None
            snap = prefetched[1].result()
        if snap is None:
            snap = self._snapshots.read_if_present(snapshot_id)
        if snap is not None:
            self._cache.put(snapshot_id, snap)
        return snap

    def _start_prefetch(self, snapshot_id: int) -> None:
        """Read the next snapshot and its delta manifests while the caller works."""
        if self._prefetcher is None:
            self._prefetcher = ThreadPoolExecutor(1, thread_name_prefix="raylake-stream")
        self._prefetched = (snapshot_id, self._prefetcher.submit(self._warm, snapshot_id))

    def _warm(self, snapshot_id: int) -> Snapshot | None:
        try:
            snap = self._snapshots.read_if_present(snapshot_id)
            if snap is not None:
                self._snapshots.warm(self.table.table_schema, snap)
            return snap
        except Exception:  # only a prefetch: the real read reports the problem
            logger.debug("prefetch of snapshot %d failed", snapshot_id, exc_info=True)
            return None

    @refuse_unknown_keywords
    def plans(
        self, *, max_plans: int | None = None, timeout: float | None = None
    ) -> Iterator[StreamPlan]:
        """Plans as they come, sleeping ``poll_interval`` between empty polls; ends after
        ``max_plans`` plans, ``timeout`` seconds without a new plan, or ``close()``."""
        # Checked here, not at the first next(): a generator's body runs only then.
        max_plans = check_optional_count("max_plans", max_plans, 0, StreamArgumentError)
        return self._plans(max_plans, check_seconds("timeout", timeout, StreamArgumentError))

    def _plans(self, max_plans: int | None, timeout: float | None) -> Iterator[StreamPlan]:
        delivered = 0
        idle_since = time.monotonic()
        while not self._closed and (max_plans is None or delivered < max_plans):
            polled_at = time.monotonic()
            plan = self.poll()
            if plan is not None:
                delivered += 1
                idle_since = time.monotonic()
                yield plan
                continue
            if timeout is not None and time.monotonic() - idle_since >= timeout:
                return
            # Polls start every poll_interval, however long the empty poll took (the wait
            # for a commit is half the interval on average), and never past the timeout.
            wake = polled_at + self.poll_interval
            wake = wake if timeout is None else min(wake, idle_since + timeout)
            time.sleep(max(0.0, wake - time.monotonic()))

    def __iter__(self) -> Iterator[StreamPlan]:
        return self.plans()

    def __aiter__(self) -> AsyncIterator[StreamPlan]:
        return self

    async def __anext__(self) -> StreamPlan:
        """The next plan; file reads run in a worker thread, waits are ``asyncio.sleep``.

        A poll that was cancelled while its thread ran (``asyncio.wait_for``) is not
        lost: the next call returns its plan, and no two polls run at once. A poll that
        failed raises its error once; the next call polls again.
        """
        while not self._closed:
            if self._pending is None:
                self._pending_from = self.position
                self._pending = asyncio.ensure_future(asyncio.to_thread(self.poll))
            pending = self._pending
            try:
                plan = await asyncio.shield(pending)
            except BaseException:
                # The poll failed, not only this wait: the next call polls again rather
                # than raise the same error for ever.
                if pending.done() and (pending.cancelled() or pending.exception() is not None):
                    self._pending = None
                raise
            self._pending = None
            if plan is not None:
                return plan
            await asyncio.sleep(self.poll_interval)
        raise StopAsyncIteration

    # -- progress ------------------------------------------------------------------------

    @refuse_unknown_keywords
    def checkpoint(self, properties: dict[str, str] | None = None) -> ConsumerProgress:
        """Record that every plan delivered so far is processed."""
        delivered = self.position
        return self._commit(delivered.next_snapshot_id, delivered.full, properties)

    @refuse_unknown_keywords
    def notify_checkpoint_complete(
        self, next_snapshot_id: int, properties: dict[str, str] | None = None
    ) -> ConsumerProgress:
        """Record progress up to a plan's ``next_snapshot_id`` (a checkpoint taken
        earlier by the caller, e.g. a trainer's, completed)."""
        next_id = next_snapshot_arg(next_snapshot_id)
        delivered = self.position.next_snapshot_id
        if next_id > delivered:
            raise ConsumerArgumentError(
                "next_snapshot_id",
                next_id,
                f"at most {delivered}: the reader has only delivered plans up to "
                f"snapshot {delivered - 1}",
                consumer_id=self.consumer_id,
            )
        full = next_id == self._full_start  # that start was not read yet
        return self._commit(next_id, full, properties)

    @refuse_unknown_keywords
    def seek(
        self, next_snapshot_id: int, properties: dict[str, str] | None = None
    ) -> ConsumerProgress | None:
        """Skip forward: continue with the changes of ``next_snapshot_id`` (for instance
        past snapshots whose output a job finds already committed). Recorded for a
        consumer; a reader cannot move backwards (``Table.reset_consumer`` can)."""
        next_id = next_snapshot_arg(next_snapshot_id)
        if next_id < self.next_snapshot_id:
            raise ConsumerArgumentError(
                "next_snapshot_id",
                next_id,
                f"at least {self.next_snapshot_id}: a reader cannot seek back "
                "(Table.reset_consumer can)",
                consumer_id=self.consumer_id,
            )
        why = "waiting for it would skip the snapshots before it"
        check_reachable(self._snapshots, self.table.uri, next_id, "seek", why)
        recorded = None  # recorded first: a refused or failed record leaves the reader
        if self.consumer_id is not None:
            recorded = self._record(next_id, False, properties, forward_only=True)
        self.next_snapshot_id, self._full_next = next_id, False
        self._last_read = None  # snapshots skipped: none read last
        return recorded

    def _commit(
        self, next_snapshot_id: int, full: bool, properties: dict[str, str] | None
    ) -> ConsumerProgress:
        if self.consumer_id is None:
            raise ConsumerError("checkpoint needs a consumer: open the stream with consumer_id=")
        return self._record(next_snapshot_id, full, properties, forward_only=True)

    def _record(
        self,
        next_snapshot_id: int,
        full: bool,
        properties: dict[str, str] | None = None,
        forward_only: bool = False,
    ) -> ConsumerProgress:
        assert self.consumer_id is not None
        check_mapping("properties", properties, "str", ConsumerArgumentError)  # JSON strings
        # None keeps what was recorded last (the reader is its consumer's one writer).
        kept = self._kept if properties is None else dict(properties)
        props = {**kept, STREAM_MODE: "full" if full else "delta"}
        snapshots = self._snapshots
        record = snapshots.commit_consumer if forward_only else snapshots.register_consumer
        progress = record(self.consumer_id, next_snapshot_id, props)
        self._kept = kept
        return progress

    def close(self) -> None:
        self._closed = True
        if self._prefetcher is not None:
            self._prefetcher.shutdown(wait=False, cancel_futures=True)
            self._prefetcher = None

    def __enter__(self) -> StreamReader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
