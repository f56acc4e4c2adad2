"""Continual training: batches of a table's new snapshots, as they are committed.

Each consumer (one rank's DataLoader worker; ``G = world_size * num_workers`` of
them) follows the table with a stream reader and reads every plan (the new rows of
a snapshot; for a primary-key table its inserts and after-images). It takes rows
``g, g + G, g + 2G, ...`` of the plan (after a shuffle seeded by the seed and the
snapshot), padded by repeating its first row so that every consumer has
``ceil(n / G)`` rows: every rank takes the same number of steps per snapshot, and the
rows of a snapshot are read once each (plus at most ``G - 1`` repeats).

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

from raylake.errors import ResumeStateError
from raylake.expr import Expr
from raylake.streaming.plan import StreamPlan
from raylake.streaming.reader import StreamPosition
from raylake.table import Table
from raylake.train.stream import Block

STATE_KIND = "raylake.continual"


@dataclass(frozen=True)
class ContinualConfig:
    """What every consumer of one continual dataset shares (picklable)."""

    uri: str
    columns: tuple[str, ...]
    filter: str | Expr | None
    start: Any
    batch_size: int
    shuffle: bool
    seed: int
    drop_last: bool
    poll_interval: float
    until_snapshot: int | None
    idle_timeout: float | None


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
        start = config.start
        self._skip = 0
        if resume is not None:
            start = StreamPosition.from_dict(resume["position"])
            self._skip = int(resume["batches_done"])
        self.reader = table.stream(  # StreamReader, or a Paimon table's own reader
            start=start,
            poll_interval=config.poll_interval,
            columns=config.columns,
            filter=config.filter,
            catch_up_after=None,  # off: every consumer cuts the same plans
            prefetch=False,
        )
        self.position = self.reader.position  # of the plan being read
        self.batches_done = self._skip

    def state_dict(self) -> dict[str, Any]:
        return {
            "kind": STATE_KIND,
            "uri": self.table.uri,
            "seed": self.config.seed,
            "consumer": [self.consumer, self.consumers],
            "position": self.position.to_dict(),
            "batches_done": self.batches_done,
        }

    def __iter__(self) -> Iterator[Block]:
        try:
            for plan in self._plans():
                blocks = self._batches(plan)
                for i, block in enumerate(blocks):
                    if i < self._skip:
                        continue
                    self.batches_done = i + 1
                    yield block
                self._skip = 0
                self.position = StreamPosition(plan.next_snapshot_id)
                self.batches_done = 0
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

    def _batches(self, plan: StreamPlan) -> list[Block]:
        rows = plan.to_arrow()
        n = rows.num_rows
        if n == 0:
            return []
        order = np.arange(n)
        if self.config.shuffle:
            seed = np.random.SeedSequence([self.config.seed, plan.snapshot_id])
            order = np.random.default_rng(seed).permutation(n)
        share = -(-n // self.consumers)
        mine = order[self.consumer :: self.consumers]
        if len(mine) < share:  # pad so that every consumer takes the same steps
            first = mine[:1] if len(mine) else order[self.consumer % n : self.consumer % n + 1]
            mine = np.concatenate([mine, np.repeat(first, share - len(mine))])
        block = self.convert(rows.take(pa.array(mine)))
        size = self.config.batch_size
        stop = share - share % size if self.config.drop_last else share
        return [{k: v[i : i + size] for k, v in block.items()} for i in range(0, stop, size)]


def check_resume_state(
    state: Mapping[str, Any], uri: str, seed: int, consumer: Sequence[int]
) -> Mapping[str, Any]:
    """The state of this consumer, or ResumeStateError naming what differs."""
    if state.get("kind") != STATE_KIND:
        raise ResumeStateError(f"not a continual-training position: {dict(state)!r}")
    for name, mine in (("uri", uri), ("seed", seed), ("consumer", list(consumer))):
        if state.get(name) != mine:
            raise ResumeStateError(
                f"the position is of another {name}: saved {state.get(name)!r}, here {mine!r}"
            )
    return state
