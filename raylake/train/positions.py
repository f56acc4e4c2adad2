"""Positions of the training loaders, and the ones inside a StatefulDataLoader's state.

A position (docs/training.md, "Resume") names the table, snapshot and order it is
relative to, the positions of the epoch not yet read when the current division
started, and the division's progress: ``batches`` read by one consumer. A position
made by a consumer that is alone on its rank (no DataLoader workers) is saved as
plain remaining positions, so it resumes under any world size or worker count; one
DataLoader worker's position (what StatefulDataLoader keeps per worker) resumes that
same worker, and the loader's whole state dict resumes anything: it holds every
worker's position as of the batches the loop received (:func:`from_loader_state`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from raylake.errors import ResumeStateError
from raylake.train.sharding import Division, Intervals, normalize, size, subtract

STATE_KEY = "raylake_train_state"
STATE_VERSION = 1


@dataclass(frozen=True)
class Progress:
    """A division and how far one of its consumers got."""

    batch_size: int
    drop_last: bool
    world_size: int
    num_workers: int
    rank: int
    worker: int
    batches: int  # batches this consumer has yielded
    # The worker DataLoader asks first in this pass: 0, but for the pass a
    # StatefulDataLoader makes of a state saved after an epoch's last batch, whose
    # round-robin goes on from the worker after the last one it heard from. The block a
    # worker reads is its place in that order (``role``), so the pass delivers the
    # batches in the order of a pass that starts at worker 0.
    first_worker: int = 0

    def division(self, remaining: Intervals) -> Division:
        return Division(
            remaining, self.batch_size, self.world_size, self.num_workers, self.drop_last
        )

    def state(self) -> dict[str, Any]:
        """What a saved position records (``first_worker`` only where it is not 0, so
        that a raylake before it reads the positions it can resume)."""
        saved = self.__dict__.copy()
        if not self.first_worker:
            del saved["first_worker"]
        return saved

    @property
    def role(self) -> int:
        """Which block of the division this consumer reads."""
        return (self.worker - self.first_worker) % self.num_workers

    def worker_after_pass(self, remaining: Intervals) -> int:
        """The worker a StatefulDataLoader asks first after this pass's last batch: the
        one after the worker that delivered it (the highest role with the most batches)."""
        division = self.division(remaining)
        blocks = [division.worker_block(role)[1] for role in range(self.num_workers)]
        last = max(role for role, count in enumerate(blocks) if count == max(blocks))
        return (self.first_worker + last + 1) % self.num_workers


@dataclass(frozen=True)
class Position:
    epoch: int
    remaining: Intervals  # positions not read when the division started
    progress: Progress | None = None

    def normalized(self) -> Position:
        """The same position as plain remaining positions, when that is exact.

        A consumer alone on its rank has read ``batches`` steps; every rank has read as
        many (equal step counts, synchronous training), so what all of them read is known.
        """
        p = self.progress
        if p is None or p.num_workers != 1:
            return self
        rest = p.division(self.remaining).remaining_after(p.batches)
        return Position(self.epoch, rest)

    def finished(self, batch_size: int, world_size: int, drop_last: bool) -> bool:
        """Whether the pass that saved this position had no batch left: nothing remains,
        or (``drop_last``) only the rows it drops, which a later epoch's loop must not
        go back for."""
        p = self.progress
        if p is not None:
            return not p.division(self.remaining).worker_batches(p.rank, p.role, p.batches)
        division = Division(self.remaining, batch_size, world_size, 1, drop_last)
        return not self.remaining or division.steps == 0


def position_state(state: Mapping[str, Any]) -> Mapping[str, Any]:
    """Our own position, or the one inside a StatefulDataLoader's state dict."""
    if not isinstance(state, Mapping):
        raise ResumeStateError(f"a position is a dict, got {type(state).__name__}")
    if STATE_KEY in state:
        if state[STATE_KEY] != STATE_VERSION:
            raise ResumeStateError(f"position version {state[STATE_KEY]} is not supported")
        return state
    return from_loader_state(state)


def from_loader_state(state: Mapping[str, Any]) -> Mapping[str, Any]:
    """The position a StatefulDataLoader's state dict stands for, as plain remaining rows.

    With DataLoader workers the loader's state holds each worker's dataset position as
    of its last batch the loop received before the loader's last snapshot, and the
    steps taken since; with every rank at the same step, what all ranks read is known.
    The workers' own counts are what they delivered: the loader's step count is not,
    for a loader resumed after an epoch's last batch counts on from it into the next
    epoch, whose round-robin starts at the worker after the last one it heard from.
    In the main process the dataset's position is current.
    """
    since, last = 0, -1
    if "_snapshot" in state:  # worker processes: their positions as of the snapshot
        snap = state["_snapshot"]
        since = int(state.get("_steps_since_snapshot", 0))
        last = int(snap.get("_last_yielded_worker_id", -1))
        workers = snap.get("_worker_snapshots", {})
        datasets = [w.get("dataset_state") for w in workers.values() if isinstance(w, Mapping)]
    elif "_num_yielded" in state:
        datasets = [state.get("dataset_state")]
    else:
        raise ResumeStateError(
            "not a raylake position nor a StatefulDataLoader state dict (expected the key "
            f"{STATE_KEY!r}, '_snapshot' or '_num_yielded')"
        )
    ours = [d for d in datasets if isinstance(d, Mapping) and STATE_KEY in d]
    if not ours:
        raise ResumeStateError("the StatefulDataLoader state holds no raylake dataset position")
    base = ours[0]
    remaining = normalize(base["remaining"])
    progress = [Progress(**d["progress"]) for d in ours if d.get("progress") is not None]
    if progress:  # several workers: what each delivered
        division = progress[0].division(remaining)
        delivered = [0] * division.num_workers
        for p in progress:
            delivered[p.role] = p.batches
        if last >= 0:  # counted in roles, like ``delivered``
            last = replace(progress[0], worker=last).role
        rest = subtract(remaining, division.consumed_by(_asked(division, delivered, last, since)))
    elif since and base.get("world_size"):  # a lone worker, saved ``since`` steps ago
        division = Division(remaining, base["batch_size"], base["world_size"], 1, base["drop_last"])
        rest = division.remaining_after(since)
    else:
        rest = remaining
    return {**base, "remaining": [list(i) for i in rest], "progress": None}


def _asked(division: Division, delivered: list[int], last: int, steps: int) -> list[int]:
    """``delivered`` after ``steps`` more batches, asked of the workers in turn from
    the one after ``last``, passing over those whose block is done (as DataLoader does);
    workers are counted by role (``Progress.role``)."""
    blocks = [division.worker_block(w)[1] for w in range(division.num_workers)]
    w = last
    for _ in range(steps):
        for _ in blocks:
            w = (w + 1) % len(blocks)
            if delivered[w] < blocks[w]:
                delivered[w] += 1
                break
    return delivered


def consumed_rows(state: Mapping[str, Any]) -> int:
    """Rows of the epoch a position has read on all ranks together (for progress reports).

    One DataLoader worker's position does not know what the other workers read; pass
    the StatefulDataLoader's whole state dict instead.
    """
    state = position_state(state)
    if state.get("progress") is not None:
        raise ResumeStateError(
            "one DataLoader worker's position does not tell what the others read; "
            "pass the StatefulDataLoader's state_dict()"
        )
    return int(state["total_rows"]) - size(normalize(state["remaining"]))
