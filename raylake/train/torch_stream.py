"""The PyTorch dataset for continual training on a table's new commits
(docs/training.md, raylake/train/continual.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import IterableDataset, get_worker_info

from raylake.arguments import (
    check_flag,
    check_integer,
    check_optional_count,
    check_seconds,
    refuse_unknown_keywords,
)
from raylake.errors import ResumeStateError, StreamArgumentError
from raylake.expr import Expr
from raylake.streaming.options import StreamOptions
from raylake.table import Table
from raylake.train.continual import ContinualConfig, ContinualReader, check_resume_state
from raylake.train.convert import FillNull
from raylake.train.loader import Transform
from raylake.train.passes import close
from raylake.train.setup import TableRows, check_rank, table_and_converter
from raylake.train.stats import FeedRecorder, FeedStats
from raylake.train.tensors import TensorBatches, distributed, rank_for_copy, torch_spec
from raylake.train.workers import WorkerPasses


class LakeStreamDataset(IterableDataset):
    """Continual training: batches of a table's new snapshots as they are committed.

    Every consumer (rank x DataLoader worker) reads each new snapshot's rows (inserts
    and after-images of a primary-key table) and takes an equal, disjoint share, so
    ranks take the same steps per snapshot (raylake/train/continual.py). ``start`` is
    a stream start (``"latest"``: the current state first, ``"latest-new"``, ``"earliest"``,
    a snapshot id). Iteration ends after ``until_snapshot``, or ``idle_timeout`` seconds
    without a commit, else never. ``state_dict()`` is the stream position (also through
    torchdata's StatefulDataLoader, per worker); resume with the same world size and
    worker count.
    """

    @refuse_unknown_keywords
    def __init__(
        self,
        table: str | Table,
        *,
        columns: Sequence[str] | None = None,
        feature_columns: Sequence[str] | None = None,
        label_column: str | None = None,
        filter: str | Expr | None = None,
        start: Any = "latest",
        batch_size: int = 1024,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        poll_interval: float = 1.0,
        until_snapshot: int | None = None,
        idle_timeout: float | None = None,
        transform: Transform | None = None,
        dtype: torch.dtype | None = None,
        fill_null: FillNull = None,
        rank: int | None = None,
        world_size: int | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        rank, world_size = check_rank(rank, world_size)
        batch_size = check_integer("batch_size", batch_size, 1)
        shuffle = check_flag("shuffle", shuffle)
        seed = check_integer("seed", seed)
        drop_last = check_flag("drop_last", drop_last)
        # Checked as poll_interval is (StreamOptions): 0 or a float would end the stream
        # at once or at a snapshot no rank names, a string fail at the first poll.
        until_snapshot = check_optional_count(
            "until_snapshot", until_snapshot, 1, StreamArgumentError, "None (no end)"
        )
        idle_timeout = check_seconds("idle_timeout", idle_timeout, StreamArgumentError)
        spec = torch_spec(columns, feature_columns, label_column, dtype, fill_null)
        rows = TableRows(table, filter, storage_options=storage_options)
        tbl, self._converter = table_and_converter(rows, spec)
        layout = self._converter.layout
        self._table = tbl
        # Resolved now, once: every DataLoader worker of this rank starts at the same
        # snapshot even if a commit lands while they start (under DDP, pass the same
        # snapshot id or saved position to every rank).
        stream = StreamOptions(
            start=start, poll_interval=poll_interval, columns=layout.columns, filter=filter,
            catch_up_after=None, prefetch=False,
        )  # fmt: skip
        stream = stream.replace(start=tbl.stream(options=stream).position)
        self._config = ContinualConfig(
            tbl.uri,
            stream,
            batch_size,
            shuffle,
            seed,
            drop_last,
            until_snapshot,
            idle_timeout,
            tbl.table_schema,
        )
        self._output = TensorBatches(layout, dtype, transform, None, False)
        self._rank = rank
        self._world_size = world_size
        self._resume: Mapping[str, Any] | None = None
        self._reader: ContinualReader | None = None
        self._recorder = FeedRecorder()
        self._workers = WorkerPasses()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_rank"], state["_world_size"] = rank_for_copy(self._rank, self._world_size)
        return state

    def _consumer(self) -> tuple[int, int]:
        rank, world = distributed(self._rank, self._world_size)
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        return rank * workers + worker, world * workers

    def __iter__(self) -> Iterator[Any]:
        self._workers.pass_started()
        consumer, consumers = self._consumer()
        resume = self._resume
        if resume is not None:
            check_resume_state(
                resume,
                self._table.uri,
                self._config.seed,
                (consumer, consumers),
                self._config.order(),
            )
        self._reader = ContinualReader(
            self._table, self._config, self._converter, consumer, consumers, resume
        )
        self._recorder = FeedRecorder()
        return self._fed(self._reader, self._recorder)

    def _fed(self, reader: ContinualReader, recorder: FeedRecorder) -> Iterator[Any]:
        """The reader's blocks as tensors, the trainer's waits recorded (``stats()``)."""
        # The loaded position is used up by the pass that reads, not by every iter():
        # StatefulDataLoader loading a state saved after its end makes an iterator from it
        # and drops it unread for a new one, which must start at that position too.
        self._resume = None
        blocks = iter(reader)
        try:
            while True:
                start = time.perf_counter()
                block = next(blocks, None)
                if block is None:
                    return
                batch = self._output(block)
                recorder.delivered(sum(a.nbytes for a in block.values()))
                recorder.waited(start, len(next(iter(block.values()))) if block else 0)
                yield batch
        finally:
            close(blocks)

    def stats(self) -> FeedStats:
        """How the pass in progress in this process (or its last one) fed the trainer; a
        wait for the next commit counts as a wait (docs/training.md, "Is the GPU
        starved?")."""
        return self._recorder.snapshot()

    def state_dict(self) -> dict[str, Any]:
        """The stream position of this consumer (the plan being read, batches done).

        In the main process after DataLoader workers read this dataset, it raises
        WorkerPositionError: save a StatefulDataLoader's ``loader.state_dict()`` instead.
        """
        self._workers.check(
            "LakeStreamDataset",
            "resume with loader.load_state_dict(saved) on a loader of the same world size "
            "and worker count",
        )
        if self._reader is None:
            if self._resume is not None:
                return dict(self._resume)
            raise ResumeStateError("the dataset has not been iterated: there is no position")
        return self._reader.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from a ``state_dict()`` at the next iteration."""
        consumer = state.get("consumer") if isinstance(state, Mapping) else None
        if not isinstance(consumer, list | tuple) or len(consumer) != 2:
            raise ResumeStateError(f"not a continual-training position: {state!r}")
        config = self._config
        check_resume_state(state, self._table.uri, config.seed, list(consumer), config.order())
        self._resume = dict(state)
        self._reader = None  # the loaded position is the answer until the next pass
        self._workers.position_set()
