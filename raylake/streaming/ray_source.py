"""A streaming Ray Data source: one ``ray.data.Dataset`` per new snapshot (or micro-batch).

    stream = read_lake_stream(uri, consumer_id="trainer", start="earliest")
    for ds in stream:                       # blocks until the next commit
        ds.map_batches(score).write_lake(out)
        stream.checkpoint()

Each dataset reads a stream plan's splits in balanced read tasks (the same split
packing as ``read_lake``); ``stream.last_plan`` tells which snapshots it holds.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import ray.data
from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask

from raylake.arguments import (
    check_count,
    check_optional_count,
    check_seconds,
    refuse_unknown_keywords,
)
from raylake.datasource.api import read_task_options
from raylake.datasource.datasource import blocks_of, pack_splits
from raylake.errors import StreamArgumentError
from raylake.format.consumer import ConsumerProgress
from raylake.streaming.options import StreamOptions
from raylake.streaming.plan import StreamPlan
from raylake.streaming.reader import StreamReader
from raylake.streaming.splits import StreamReadContext, StreamSplit
from raylake.table import open_table
from raylake.table.visible import refuse_process_local

if TYPE_CHECKING:
    from ray.data import Dataset
    from ray.data.context import DataContext


class StreamPlanDatasource(Datasource):
    """The rows of one or more consecutive stream plans as a Ray datasource."""

    def __init__(self, plans: Sequence[StreamPlan]) -> None:
        super().__init__()
        if not plans:
            raise StreamArgumentError("plans", plans, "at least one StreamPlan")
        self.snapshot_id = plans[-1].snapshot_id
        self._context = plans[0].context
        # The changes of one bucket stay in one read task, in snapshot order: a key's
        # -U/+U of snapshot 6 must not overtake those of snapshot 5.
        groups: dict[tuple[Any, int], list[StreamSplit]] = {}
        for plan in plans:
            for split in plan.splits:
                groups.setdefault(_bucket_of(split), []).append(split)
        self._groups = list(groups.values())
        self.first_snapshot_id = plans[0].first_snapshot_id

    def get_name(self) -> str:
        return "LakeStream"

    def estimate_inmemory_data_size(self) -> int | None:
        return None

    def get_read_tasks(
        self,
        parallelism: int,
        per_task_row_limit: int | None = None,
        data_context: DataContext | None = None,
    ) -> list[ReadTask]:
        """At most ``parallelism`` tasks, sizes unknown."""
        schema = self._schema()
        return [
            ReadTask(
                read,
                BlockMetadata(num_rows=None, size_bytes=None, input_files=None, exec_stats=None),
                schema=schema,
                per_task_row_limit=per_task_row_limit,
            )
            for read in self._reads(parallelism)
        ]

    def _schema(self) -> pa.Schema:
        return self._context.output_schema

    def _reads(self, parallelism: int) -> list[Callable[[], Iterator[pa.Table]]]:
        """Balanced by the rows of their files."""
        packed = pack_splits(self._groups, parallelism, weight=_rows) or [[]]
        return [
            functools.partial(
                _read_group, self._context, tuple(s for bucket in members for s in bucket)
            )
            for members in packed
        ]


def _rows(splits: list[StreamSplit]) -> int:
    return sum(s.row_count for s in splits)


def _schema_id(plan: StreamPlan) -> int:
    return plan.context.table_schema.schema_id


def _bucket_of(split: StreamSplit) -> tuple[Any, int]:
    return (split.partition, split.bucket)


def _read_group(context: StreamReadContext, splits: tuple[StreamSplit, ...]) -> Iterator[pa.Table]:
    yield from blocks_of(context.read_all(splits), context.output_schema.empty_table())


class LakeStream:
    """An endless iterable of Ray Datasets over a table's new snapshots."""

    def __init__(
        self,
        reader: StreamReader,
        *,
        max_snapshots_per_dataset: int = 1,
        override_num_blocks: int | None = None,
        task_options: dict[str, Any] | None = None,
    ) -> None:
        self.reader = reader
        self.max_snapshots_per_dataset = check_count(
            "max_snapshots_per_dataset", max_snapshots_per_dataset, 1, StreamArgumentError
        )
        self.override_num_blocks = check_optional_count("override_num_blocks", override_num_blocks)
        self.task_options = task_options or {}  # read_datasource's Ray options (read_task_options)
        self.last_plans: list[StreamPlan] = []
        # Plans polled for a dataset not made yet: a refresh that starts the next one, or
        # the plans a batch held when a poll for more failed.
        self._carried: list[StreamPlan] = []

    @refuse_unknown_keywords
    def datasets(
        self, *, max_datasets: int | None = None, timeout: float | None = None
    ) -> Iterator[Dataset]:
        """Datasets as snapshots arrive; ends after ``max_datasets``, or ``timeout``
        seconds without a new snapshot."""
        # Checked here, not at the first next(): a generator's body runs only then.
        max_datasets = check_optional_count("max_datasets", max_datasets, 0, StreamArgumentError)
        return self._datasets(max_datasets, check_seconds("timeout", timeout, StreamArgumentError))

    def _datasets(self, max_datasets: int | None, timeout: float | None) -> Iterator[Dataset]:
        made = 0
        while max_datasets is None or made < max_datasets:
            plans, self._carried = self._carried, []
            if not plans:
                first = next(self.reader.plans(max_plans=1, timeout=timeout), None)
                if first is None:
                    return
                plans = [first]
            self._fill(plans)
            self.last_plans = plans
            made += 1
            yield ray.data.read_datasource(
                StreamPlanDatasource(plans),
                override_num_blocks=self.override_num_blocks,
                **self.task_options,
            )

    def _fill(self, plans: list[StreamPlan]) -> None:
        """Add the plans already committed, up to ``max_snapshots_per_dataset``."""
        while len(plans) < self.max_snapshots_per_dataset and not plans[0].is_refresh:
            try:
                more = self.reader.poll()
            except BaseException:
                # The reader is past the plans taken: the next call starts with them,
                # or they would be skipped (and a later checkpoint pass them).
                self._carried = plans
                raise
            if more is None:
                break
            # A whole new state starts a dataset of its own, and so does a plan under
            # another schema: a dataset has one schema, and reading the later plan under
            # the first one's would drop its new columns and keep renamed ones' old names.
            if more.is_refresh or _schema_id(more) != _schema_id(plans[0]):
                self._carried = [more]
                break
            plans.append(more)

    def __iter__(self) -> Iterator[Dataset]:
        return self.datasets()

    def checkpoint(self) -> ConsumerProgress:
        """Record that every dataset yielded so far is processed."""
        # Not reader.checkpoint(): the reader is past the plans carried to the next dataset.
        if self.last_plans:
            return self.reader.notify_checkpoint_complete(self.last_plans[-1].next_snapshot_id)
        if self._carried:
            return self.reader.notify_checkpoint_complete(self._carried[0].first_snapshot_id)
        return self.reader.checkpoint()

    def close(self) -> None:
        self.reader.close()


def read_lake_stream(
    uri: str,
    *,
    consumer_id: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    max_snapshots_per_dataset: int = 1,
    override_num_blocks: int | None = None,
    ray_remote_args: dict[str, Any] | None = None,
    options: StreamOptions | None = None,
    **keywords: Any,
) -> LakeStream:
    """A :class:`LakeStream` of the table at ``uri``: one Dataset per new snapshot, or per
    ``max_snapshots_per_dataset`` snapshots when they are already there. ``options`` (a
    :class:`~raylake.streaming.StreamOptions`), or its fields as keywords (``start``,
    ``poll_interval``, ``shard``, ``columns``, ``filter``, ...), as ``Table.stream``."""
    # Every option first: a wrong one must fail before a consumer is registered.
    options = StreamOptions.of(options, **keywords)
    override_num_blocks = check_optional_count("override_num_blocks", override_num_blocks)
    max_snapshots_per_dataset = check_count(
        "max_snapshots_per_dataset", max_snapshots_per_dataset, 1, StreamArgumentError
    )
    task_options = read_task_options(ray_remote_args)
    refuse_process_local(uri, "read_lake_stream")
    tbl = open_table(uri, storage_options=storage_options)
    reader = tbl.stream(consumer_id=consumer_id, options=options)
    return LakeStream(
        reader,
        max_snapshots_per_dataset=max_snapshots_per_dataset,
        override_num_blocks=override_num_blocks,
        task_options=task_options,
    )
