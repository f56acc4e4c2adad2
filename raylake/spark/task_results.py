"""What a Spark task of a write or a merge hands back to the driver.

Each task returns pickled results tagged with its partition and attempt, as rows of a
``mapInArrow`` output: Spark may run a partition more than once (a retry, a speculative
copy), and the driver keeps only each partition's last attempt, whose files are the
ones committed. A raylake error raised in a task (a null in a key column, a target row
matched twice) comes back as such a result, and the driver raises it as itself: raised
in the task, Spark retried it and then raised a ``PythonException`` holding a traceback
string.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
from pyspark import TaskContext

from raylake.errors import RaylakeError

RESULT_SCHEMA = "partition int, attempt int, part binary"
_RESULT_ARROW = pa.schema(
    [("partition", pa.int32()), ("attempt", pa.int32()), ("part", pa.binary())]
)


def task_attempt() -> tuple[int, int]:
    """This Spark task's partition and attempt numbers (0, 0 outside a task)."""
    context = TaskContext.get()
    if context is None:
        return 0, 0
    return context.partitionId(), context.attemptNumber()


def result_batch(parts: list[Any]) -> pa.RecordBatch:
    """``parts`` as result rows of this task's attempt."""
    partition, attempt = task_attempt()
    return pa.RecordBatch.from_pydict(
        {
            "partition": [partition] * len(parts),
            "attempt": [attempt] * len(parts),
            "part": [pickle.dumps(p) for p in parts],
        },
        schema=_RESULT_ARROW,
    )


def raising_on_driver(
    task: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]],
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """``task``, whose raylake errors come back as a result for the driver to raise."""
    try:
        yield from task(batches)
    except RaylakeError as exc:
        yield result_batch([exc])


def latest_results(rows: list[Any]) -> list[Any]:
    """The results of each partition's last attempt (an earlier attempt's files are
    deleted as stale), raising a task's raylake error as itself."""
    last: dict[int, int] = {}
    for row in rows:
        last[row.partition] = max(row.attempt, last.get(row.partition, row.attempt))
    parts = [pickle.loads(row.part) for row in rows if row.attempt == last[row.partition]]
    for part in parts:
        if isinstance(part, RaylakeError):
            raise part
    return parts
