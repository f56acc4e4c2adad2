"""The framework-neutral core of the training loaders: epochs, consumers, positions.

:class:`ShardedLoader` owns what LakeIterableDataset (torch) and to_tf_dataset
share: the pinned source, the epoch's order, the division of the positions left
among ranks and workers, and the resumable position (``state_dict`` /
``load_state_dict``; what a position holds: raylake/train/positions.py). The
frameworks only say who the consumer is and turn numpy batches into tensors.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from raylake.arguments import check_count, check_flag, check_integer
from raylake.errors import InvalidArgumentError, ResumeStateError
from raylake.train.convert import Converter
from raylake.train.passes import Feed, NumpyFeed, Pass, Taken
from raylake.train.positions import (
    STATE_KEY,
    STATE_VERSION,
    Position,
    Progress,
    position_state,
)
from raylake.train.prefetch import DEFAULT_BYTES, DEFAULT_PIECES, background
from raylake.train.sharding import (
    Division,
    EpochOrder,
    Interval,
    check_shuffle_stream,
    normalize,
    stream_fields,
)
from raylake.train.source import LakeSource
from raylake.train.stats import FeedRecorder, FeedStats
from raylake.train.stream import (
    Carry,
    WindowReader,
    planned_pieces,
    segments_and_sizes,
    window_parts,
)

Transform = Callable[[Any], Any]  # applied to each batch


@dataclass(frozen=True)
class Epochs:
    """How every epoch of a loader is ordered and cut into batches: the user's keywords,
    checked when made (before the loader opens its table), and what positions are
    relative to (``state_dict`` records them)."""

    batch_size: int
    shuffle: bool
    seed: int
    drop_last: bool
    shuffle_window: int

    def __post_init__(self) -> None:
        # Numpy integers taken, kept as ints (saved states record these).
        for name, minimum in (("batch_size", 1), ("seed", 0), ("shuffle_window", 1)):
            object.__setattr__(self, name, check_integer(name, getattr(self, name), minimum))
        for flag in ("shuffle", "drop_last"):
            object.__setattr__(self, flag, check_flag(flag, getattr(self, flag)))


class ShardedLoader:
    """Epochs of a pinned source, sharded exactly over consumers, with a resumable position."""

    def __init__(
        self,
        source: LakeSource,
        converter: Converter,
        epochs: Epochs,
        *,
        read_ahead: int = DEFAULT_PIECES,
        read_ahead_bytes: int = DEFAULT_BYTES,
        convert_ahead: int = 0,
        loader_threads: int = 0,
    ) -> None:
        self.source = source
        self.converter = converter
        self.epochs = epochs
        self.read_ahead = check_integer("read_ahead", read_ahead)
        self.read_ahead_bytes = check_integer("read_ahead_bytes", read_ahead_bytes)
        self.convert_ahead = check_integer("convert_ahead", convert_ahead)  # chunks, on a thread
        self.loader_threads = check_integer("loader_threads", loader_threads)  # 0: no cap
        self.epoch = 0
        self._pending: Position | None = None  # a loaded position, used by the next pass
        self._first_worker = 0  # of the next pass (Progress.first_worker)
        self._live: Position | None = None  # the pass in progress in this process
        self._taken = Taken()  # batches the pass in progress has yielded
        self.recorder = FeedRecorder()  # the pass in progress, or the last one
        self._carry: Carry | None = None  # the last pass's, with the piece it read ahead

    def __getstate__(self) -> dict[str, Any]:
        # DataLoader workers get the loader without the piece carried between passes.
        return {**self.__dict__, "_carry": None}

    # -- epochs and orders -------------------------------------------------------------

    def order(self, epoch: int | None = None) -> EpochOrder:
        return EpochOrder(
            self.source.counts,
            self.epochs.seed,
            self.epoch if epoch is None else epoch,
            self.epochs.shuffle,
            self.epochs.shuffle_window,
        )

    def set_epoch(self, epoch: int) -> None:
        """Use epoch ``epoch``'s order; a loaded position of another epoch is dropped."""
        epoch = check_integer("epoch", epoch)
        if self._pending is not None and self._pending.epoch != epoch:
            self._pending = None
        self.epoch = epoch
        self._live = None

    def forget_loaded(self) -> None:
        """Drop a loaded position not yet used: the next pass reads its epoch whole."""
        self._pending = None

    def _start(self) -> Position:
        if self._pending is not None and self._pending.epoch == self.epoch:
            return self._pending
        return Position(self.epoch, normalize([(0, self.source.total)]))

    def steps(self, world_size: int) -> int:
        """Batches each rank reads in the next pass (the same on every rank)."""
        start = self._start().normalized()
        if start.progress is not None:
            return start.progress.division(start.remaining).steps
        e = self.epochs
        return Division(start.remaining, e.batch_size, world_size, 1, e.drop_last).steps

    # -- reading -----------------------------------------------------------------------

    def batches(
        self, rank: int, world_size: int, worker: int, num_workers: int, feed: Feed | None = None
    ) -> Iterator[Any]:
        """The batches of one consumer for the next pass, in order: windows read and made
        by ``feed`` (default: numpy) on a thread ahead, cut into batches as the consumer
        takes them (raylake/train/passes.py). A batch counts as read when the consumer
        takes it, not when it is read ahead."""
        if not 0 <= rank < world_size:
            raise InvalidArgumentError("rank", rank, f"in [0, {world_size}) (world_size)")
        # iter_shard's launcher names the worker: one past the last read nothing at all.
        if check_count("worker", worker) >= check_count("num_workers", num_workers, 1):
            raise InvalidArgumentError("worker", worker, f"in [0, {num_workers}) (num_workers)")
        start = self._start()
        self._pending = None  # a loaded position resumes one pass only
        first_worker, self._first_worker = self._first_worker, 0
        e = self.epochs
        p = start.progress
        if p is not None:  # a pass resumed goes on in the order it started in
            first_worker = p.first_worker
        here = Progress(
            e.batch_size, e.drop_last, world_size, num_workers, rank, worker, 0, first_worker
        )
        if p is not None and replace(p, batches=0) == here:
            first = p.batches  # this very consumer resumes its own block
        elif p is not None:
            raise ResumeStateError(
                f"this position is DataLoader worker {p.worker}'s of rank {p.rank} "
                f"(world size {p.world_size}, {p.num_workers} workers) and resumes only that "
                f"worker with the division it was saved in; here {_differences(p, here)}. "
                "To resume with other workers, ranks, batch_size or drop_last, load the "
                "StatefulDataLoader's whole state_dict() into the dataset before making the "
                "new loader: dataset.load_state_dict(loader.state_dict())"
            )
        else:
            first = 0
        here = replace(here, batches=first)
        self._live = Position(start.epoch, start.remaining, here)
        feed = NumpyFeed() if feed is None else feed
        self.recorder = feed.recorder
        segments, sizes = segments_and_sizes(self._own(start, here))
        maker = getattr(feed, "maker", None)
        if maker is not None:  # windows made in another process (raylake/train/window_process.py)
            rows = sum(hi - lo for lo, hi in segments)
            made = maker.windows(start, here, feed, rows)
            one = Pass(feed.batches(made, sizes), [made], feed.recorder)
        else:
            chunks, windows = self.made_windows(start, here, feed, segments)
            # The next window read, converted (and copied) while this one's batches are taken.
            ahead = background(windows, self.convert_ahead, "raylake-convert")
            one = Pass(feed.batches(ahead, sizes), [ahead, windows, chunks], feed.recorder)
        self._taken = one.taken
        return one

    @staticmethod
    def _own(start: Position, here: Progress) -> Sequence[Any]:
        """The batches of consumer ``here`` from ``start``, after the ones it has read."""
        division = here.division(start.remaining)
        return division.worker_batches(here.rank, here.role, skip=here.batches)

    def made_windows(
        self,
        start: Position,
        here: Progress,
        feed: Feed,
        segments: Iterator[Interval] | None = None,
    ) -> tuple[Iterator[Any], Iterator[Any]]:
        """The pass's chunks read and converted, and ``feed``'s windows of them (closing
        the windows closes the chunks): what the converting thread runs, or the process
        that makes windows for this one. ``segments``: the consumer's positions, where
        the caller has them already."""
        carried = {} if self._carry is None else self._carry.left
        self._carry = Carry(carried, self._first_piece(here, start.epoch + 1))
        convert = self.converter.columns_first if feed.device_layout else self.converter
        out = getattr(feed, "features_out", None)
        convert_once = (
            functools.partial(self.converter.columns_first, out=out)
            if feed.device_layout and out is not None
            else None
        )
        reader = WindowReader(
            self.source,
            self.order(start.epoch),
            convert,
            read_ahead=self.read_ahead,
            read_ahead_bytes=self.read_ahead_bytes,
            loader_threads=self.loader_threads,
            observe=feed.recorder.piece_taken,
            gather_late=feed.device_layout,
            convert_once=convert_once,
            gather=self.converter.gather,
            carried=self._carry,
        )
        if segments is None:
            segments, _ = segments_and_sizes(self._own(start, here))
        chunks = reader.chunks(segments)
        return chunks, feed.windows(chunks)

    def _first_piece(self, consumer: Progress, epoch: int) -> int | None:
        """The piece that ``consumer``'s pass of ``epoch``, from its start, reads first:
        what a pass of the epoch before reads last, for it (raylake/train/stream.py,
        ``Carry``). None without read-ahead."""
        if not self.read_ahead:
            return None
        everything = normalize([(0, self.source.total)])
        own = consumer.division(everything).worker_batches(consumer.rank, consumer.role)
        segments, _ = segments_and_sizes(own)
        first = next(segments, None)
        if first is None:
            return None
        order = self.order(epoch)
        return next(planned_pieces(order, window_parts(order, [first])[:1]), None)

    def stats(self) -> FeedStats:
        """How the pass in progress (or the last one) in this process fed its consumer."""
        return self.recorder.snapshot()

    # -- positions ---------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The position: of the pass in progress in this process, else where the next starts."""
        position = self._live or self._start()
        if position.progress is not None and self._live is not None:
            progress = replace(
                position.progress, batches=position.progress.batches + self._taken.batches
            )
            position = replace(position, progress=progress)
        producer = position.progress
        position = position.normalized()
        p = position.progress
        return {
            STATE_KEY: STATE_VERSION,
            **self.source.selection(),
            "seed": self.epochs.seed,
            "shuffle": self.epochs.shuffle,
            "shuffle_window": self.epochs.shuffle_window,
            "total_rows": self.source.total,
            "batch_size": self.epochs.batch_size,
            "drop_last": self.epochs.drop_last,
            "world_size": None if producer is None else producer.world_size,
            "epoch": position.epoch,
            "remaining": [list(i) for i in position.remaining],
            "progress": None if p is None else p.state(),
            **stream_fields(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from a position (or from a StatefulDataLoader's whole state dict)."""
        state = position_state(state)
        source = self.source.for_saved(state, "position")
        position, saved = self._check(state, source)
        if source is not self.source:
            self.source, self._carry = source, None  # the carried piece is of the other order
        self._live = None
        self._first_worker = 0
        pending = position.normalized()
        if pending.epoch < self.epoch and pending.finished(*saved):
            # A finished epoch loaded after the loop set a later one: in the main process,
            # StatefulDataLoader loads the dataset's state when its iterator is made, after
            # the loop's set_epoch(e + 1). The finished epoch leaves nothing to resume
            # (with drop_last, its dropped rows remain, and stay dropped). A worker's
            # finished pass: the loader's round-robin goes on from where it ended.
            self._pending = None
            if pending.progress is not None:
                self._first_worker = pending.progress.worker_after_pass(pending.remaining)
            return
        self.epoch = position.epoch
        self._pending = pending

    def _check(
        self, state: Mapping[str, Any], src: LakeSource
    ) -> tuple[Position, tuple[int, int, bool]]:
        """The position ``state`` names in ``src`` (its selection already checked), and
        the batch size, world size and drop_last of the pass that saved it."""
        for name in ("seed", "shuffle", "shuffle_window"):
            mine = getattr(self.epochs, name)
            if state.get(name) != mine:
                raise ResumeStateError(
                    f"this position was made with {name}={state.get(name)!r}, this loader has "
                    f"{name}={mine!r}; positions are relative to the order, so "
                    f"pass {name}={state.get(name)!r}"
                )
        try:
            remaining = normalize(state["remaining"])
            progress = None if state["progress"] is None else Progress(**state["progress"])
            epoch = int(state["epoch"])
            saved = (int(state["batch_size"]), int(state.get("world_size") or 1))
            drop_last = bool(state["drop_last"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ResumeStateError(f"malformed position: {exc}") from exc
        if remaining and (remaining[0][0] < 0 or remaining[-1][1] > src.total):
            raise ResumeStateError(f"position names rows outside [0, {src.total})")
        if self.epochs.shuffle and remaining != normalize([(0, src.total)]):
            check_shuffle_stream(state, "position")  # part of a shuffled epoch is read
        return Position(epoch, remaining, progress), (*saved, drop_last)


def _differences(saved: Progress, here: Progress) -> str:
    """What differs between the consumer that saved a position and the one resuming it."""
    names = ("batch_size", "drop_last", "world_size", "num_workers", "rank", "worker")
    return ", ".join(
        f"{n} is {getattr(here, n)!r}, not {getattr(saved, n)!r}"
        for n in names
        if getattr(here, n) != getattr(saved, n)
    )
