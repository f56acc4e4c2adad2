"""Continual training: batches of a table's new snapshots, as they are committed.

Each consumer (one rank's DataLoader worker; ``G = world_size * num_workers`` of
them) follows the table with a stream reader and takes an equal share of every plan
(the new rows of a snapshot; for a primary-key table its inserts and after-images):
``ceil(n / G)`` rows, padded by repeating its first row, so that every rank takes the
same number of steps per snapshot and the rows of a snapshot are delivered once each
(plus at most ``G - 1`` repeats).

- A plan of whole-row splits (an append table's new files, a full state) is dealt
  like an epoch (raylake/train/sharding.py): its splits' exact row counts (from
  metadata, or a counting read), the splits in an order seeded by the seed and the
  snapshot, consumer ``g`` taking positions ``g * share ..`` of it; a consumer reads
  only the splits its share touches (issue 17), then shuffles its share.
- A plan of change rows (a primary-key table's changelog or bucket diffs), whose row
  count only reading tells, is read whole by each consumer, which takes rows
  ``g, g + G, ...`` of a seeded shuffle of it.

Catch-up is off: every consumer must cut the history into the same plans. The
position is the stream position of the plan being read and the batches of it already
delivered; it goes in the trainer's checkpoint (``state_dict``), no consumer file is
needed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from raylake.errors import RaylakeError, ResumeStateError, SchemaError
from raylake.expr import AlwaysTrue, as_expr
from raylake.format.schema import TableSchema
from raylake.streaming.options import StreamOptions, StreamPosition
from raylake.streaming.plan import StreamPlan
from raylake.table import Split, Table
from raylake.table.changes import InsertSplit
from raylake.table.counting import exact_counts
from raylake.table.projection import follow_columns
from raylake.table.scan import ReadContext
from raylake.train.sharding import check_shuffle_stream, stream_fields
from raylake.train.stream import Block

STATE_KIND = "raylake.continual"
# How a plan's rows are shared out between consumers, saved with each position: 1 took
# rows g, g + G, ... of every plan; 2 deals whole-row plans by splits; 3 deals them with
# each partition's files in the order they were written, not in name order. A position
# inside a plan only means something under the rule it was saved with.
SHARDING_RULE = 3


@dataclass(frozen=True)
class ContinualConfig:
    """What every consumer of one continual dataset shares (picklable)."""

    uri: str
    # The columns, filter and start of every consumer's reader; catch-up and prefetch
    # off (every consumer must cut the history into the same plans; no threads).
    stream: StreamOptions
    batch_size: int
    shuffle: bool
    seed: int
    drop_last: bool
    until_snapshot: int | None
    idle_timeout: float | None
    # The table's schema when the dataset was made: its batches keep the names and types
    # of these columns while the table's schema changes under the stream.
    made_under: TableSchema

    def order(self) -> dict[str, Any]:
        """What decides the order of a consumer's share of a plan, beside the seed and
        the consumers: a position inside a plan resumes only under the same."""
        expr = as_expr(self.stream.filter)
        return {
            "shuffle": self.shuffle,
            "filter": "" if isinstance(expr, AlwaysTrue) else str(expr),
        }


class ContinualReader:
    """The batches of consumer ``g`` of ``G`` over the new snapshots of a table."""

    def __init__(
        self,
        table: Table,
        config: ContinualConfig,
        convert: Callable[[pa.Table], Block],
        consumer: int,
        consumers: int,
        resume: Mapping[str, Any] | None = None,
    ) -> None:
        self.table = table
        self.config = config
        self.convert = convert
        self.consumer = consumer
        self.consumers = consumers
        options = config.stream
        self._skip = 0  # rows of the first plan's share delivered before a resume
        self.batches_done = 0
        if resume is not None:
            options = options.replace(start=StreamPosition.from_dict(resume["position"]))
            self.batches_done = int(resume["batches_done"])
            self._skip = rows_done(resume, config.batch_size)
        made, now = config.made_under, table.table_schema
        if now.schema_id != made.schema_id:  # the columns as the table names them now
            _, expr = follow_columns(made, now, None, as_expr(options.filter))
            options = options.replace(columns=self._names_in(now), filter=expr)
        self.reader = table.stream(options=options)
        self.position = self.reader.position  # of the plan being read
        self.rows_done = self._skip  # of this consumer's share of that plan

    def state_dict(self) -> dict[str, Any]:
        return {
            "kind": STATE_KIND,
            "uri": self.table.uri,
            "seed": self.config.seed,
            "consumer": [self.consumer, self.consumers],
            "position": self.position.to_dict(),
            "batches_done": self.batches_done,
            "rows_done": self.rows_done,
            **self.config.order(),
            "sharding": SHARDING_RULE,
            **stream_fields(),
        }

    def __iter__(self) -> Iterator[Block]:
        try:
            for plan in self._plans():
                for block in self._batches(plan, self._skip):
                    self.batches_done += 1
                    self.rows_done += len(next(iter(block.values())))
                    yield block
                self._skip = 0
                self.position = StreamPosition(plan.next_snapshot_id)
                self.batches_done = self.rows_done = 0
        finally:
            self.reader.close()

    def _plans(self) -> Iterator[StreamPlan]:
        until = self.config.until_snapshot
        idle = self.config.idle_timeout
        while until is None or self.reader.next_snapshot_id <= until:
            plan = next(self.reader.plans(max_plans=1, timeout=idle), None)
            if plan is None:
                return  # idle for idle_timeout seconds
            yield plan

    def _batches(self, plan: StreamPlan, skip: int = 0) -> list[Block]:
        """This consumer's batches of the plan, after the first ``skip`` rows of its
        share (delivered before a resume, perhaps in batches of another size)."""
        rows = self._rows(plan)
        share = rows.num_rows
        if share <= skip:
            return []
        block = self.convert(rows)
        size = self.config.batch_size
        stop = share - (share - skip) % size if self.config.drop_last else share
        return [{k: v[i : i + size] for k, v in block.items()} for i in range(skip, stop, size)]

    def _rows(self, plan: StreamPlan) -> pa.Table:
        """This consumer's share of the plan's rows, in the order it delivers them."""
        splits = whole_row_splits(plan)
        ts = plan.context.table_schema
        if splits is None:
            return self._strided(self._as_made(plan.to_arrow(), ts), plan.snapshot_id)
        rows = self._dealt(plan.context.read_context(), splits, plan.snapshot_id)
        return self._as_made(rows, ts)

    def _names_in(self, ts: TableSchema) -> tuple[str, ...]:
        """The dataset's columns as schema ``ts`` names them (the same fields, by id)."""
        made = self.config.made_under
        names = ts.names_by_id
        out = []
        for column in self.config.stream.columns or ():
            now = names.get(made.field_id(column))
            if now is None:
                raise SchemaError(
                    f"column {column!r}, which this LakeStreamDataset reads, was deleted by "
                    f"schema {ts.schema_id} of {self.table.uri}; make the dataset again "
                    "with the columns the table has now"
                )
            out.append(now)
        return tuple(out)

    def _as_made(self, rows: pa.Table, ts: TableSchema) -> pa.Table:
        """A plan's rows (of schema ``ts``) as the columns the dataset was made with: a
        renamed column under its name then, a widened one in its type then, so that
        batches keep their keys and dtypes (a value the type cannot hold raises)."""
        made = self.config.made_under
        if ts.schema_id == made.schema_id:
            return rows
        arrays, columns = [], list(self.config.stream.columns or ())
        for column, now in zip(columns, self._names_in(ts)):
            values, want = rows.column(now), made.arrow_schema.field(column).type
            if values.type != want:
                try:
                    values = values.cast(want)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise SchemaError(
                        f"column {column!r} is {values.type} since schema {ts.schema_id} of "
                        f"{self.table.uri}, and a value of it does not fit the {want} this "
                        "LakeStreamDataset was made with (its batches keep their dtypes); "
                        "make the dataset again"
                    ) from exc
            arrays.append(values)
        return pa.table(arrays, names=columns)

    def _dealt(self, ctx: ReadContext, splits: list[Split], snapshot_id: int) -> pa.Table:
        counts = np.asarray(exact_counts(ctx, splits), dtype=np.int64)
        order = np.arange(len(splits))
        if self.config.shuffle:
            order = self._rng(snapshot_id).permutation(len(splits))
        counts = counts[order]
        n = int(counts.sum())
        if n == 0:
            return ctx.output_schema.empty_table()
        share = -(-n // self.consumers)
        lo = self.consumer * share
        hi = min(lo + share, n)
        if lo >= n:  # more consumers than rows: repeat one row
            lo = self.consumer % n
            hi = lo + 1
        rows = read_positions(ctx, [splits[i] for i in order], counts, lo, hi)
        mine = np.arange(share)
        mine[rows.num_rows :] = 0  # a short share: pad by repeating its first row
        if self.config.shuffle:
            mine = mine[self._rng(snapshot_id, self.consumer).permutation(share)]
        return rows.take(pa.array(mine))

    def _strided(self, rows: pa.Table, snapshot_id: int) -> pa.Table:
        n = rows.num_rows
        if n == 0:
            return rows
        order = np.arange(n)
        if self.config.shuffle:
            order = self._rng(snapshot_id).permutation(n)
        share = -(-n // self.consumers)
        mine = order[self.consumer :: self.consumers]
        if len(mine) < share:  # pad so that every consumer takes the same steps
            first = mine[:1] if len(mine) else order[self.consumer % n : self.consumer % n + 1]
            mine = np.concatenate([mine, np.repeat(first, share - len(mine))])
        return rows.take(pa.array(mine))

    def _rng(self, *key: int) -> np.random.Generator:
        return np.random.default_rng(np.random.SeedSequence([self.config.seed, *key]))


def whole_row_splits(plan: Any) -> list[Split] | None:
    """The table splits of a plan whose every split is rows of a table split (inserts);
    None for change rows."""
    if not plan.splits:
        return None
    if not all(isinstance(s, InsertSplit) for s in plan.splits):
        return None
    return [s.split for s in plan.splits if isinstance(s, InsertSplit)]


def read_positions(
    ctx: ReadContext, splits: Sequence[Split], counts: np.ndarray, lo: int, hi: int
) -> pa.Table:
    """Rows ``lo..hi`` of the splits' rows taken in order, reading only the splits they
    fall in (``counts``: each split's exact rows)."""
    ends = np.cumsum(counts)
    starts = ends - counts
    touched = [i for i in range(len(splits)) if starts[i] < hi and ends[i] > lo and counts[i]]
    parts = []
    for i, rows in zip(touched, ctx.read_tables([splits[i] for i in touched])):
        if rows.num_rows != counts[i]:
            raise RaylakeError(
                f"split {i} of a stream plan read {rows.num_rows} rows but was counted at "
                f"{counts[i]}; files changed under a committed snapshot"
            )
        first = max(lo, int(starts[i])) - int(starts[i])
        last = min(hi, int(ends[i])) - int(starts[i])
        parts.append(rows.slice(first, last - first))
    if not parts:
        return ctx.output_schema.empty_table()
    return pa.concat_tables(parts)


def rows_done(state: Mapping[str, Any], batch_size: int) -> int:
    """Rows of its consumer's share of the plan a position had delivered: recorded, or
    (positions saved before they were) its batches, taken to be of ``batch_size``. None
    where ``batches_done`` was set to 0, to read the plan again."""
    batches = int(state["batches_done"])
    return int(state.get("rows_done", batches * batch_size)) if batches else 0


def check_resume_state(
    state: Mapping[str, Any],
    uri: str,
    seed: int,
    consumer: Sequence[int],
    order: Mapping[str, Any] | None = None,
) -> Mapping[str, Any]:
    """The state of this consumer, or ResumeStateError naming what differs."""
    if state.get("kind") != STATE_KIND:
        raise ResumeStateError(f"not a continual-training position: {dict(state)!r}")
    for name, mine in (("uri", uri), ("seed", seed), ("consumer", list(consumer))):
        if state.get(name) != mine:
            raise ResumeStateError(
                f"the position is of another {name}: saved {state.get(name)!r}, here {mine!r}"
            )
    rule = state.get("sharding", 1)  # positions saved before the rule was recorded: 1
    if rule != SHARDING_RULE and state.get("batches_done", 0):
        snapshot = state.get("position", {}).get("next_snapshot_id")
        raise ResumeStateError(
            f"the position was saved {state['batches_done']} batches into snapshot "
            f"{snapshot} under sharding rule {rule!r} (an earlier raylake), and this "
            f"version shares a snapshot's rows out by rule {SHARDING_RULE}: those batches "
            "do not map onto the new shares, so resuming there would repeat or skip rows. "
            "Set 'batches_done' to 0 to read that snapshot again in full, or resume "
            "from the next snapshot"
        )
    if state.get("batches_done", 0):
        check_shuffle_stream(state, "position")  # a plan's shares are dealt by numpy's draws
        for name, mine in (order or {}).items():  # the rows delivered: the first of an order
            saved = state.get(name, mine)
            if saved != mine:
                raise ResumeStateError(
                    f"the position was saved {state['batches_done']} batches into snapshot "
                    f"{state.get('position', {}).get('next_snapshot_id')} with {name}="
                    f"{saved!r}, and this dataset has {name}={mine!r}: the rows it delivered "
                    f"are not the first of this dataset's share. Pass {name}={saved!r}, or "
                    "set 'batches_done' to 0 to read that snapshot again in full"
                )
    return state
