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

import logging
import pickle
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
from pyspark import SparkContext, TaskContext
from pyspark.sql import DataFrame

from raylake.errors import RaylakeError

logger = logging.getLogger(__name__)

RESULT_SCHEMA = "partition int, attempt int, part binary"
# How long the driver waits for a job's tasks that still run after it ended (tasks of a
# failed job that Spark stops asynchronously) before it deletes the job's files.
TASKS_END_TIMEOUT_S = 120.0
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


def collect_tasks(df: DataFrame) -> list[Any]:
    """``df.collect()``, returning or raising once no task of its jobs runs any longer.

    A job that fails raises at once, and Spark stops its other running tasks
    asynchronously (without interrupting them, by default): a write task kept writing,
    and its files appeared after the driver had deleted the job's files (an append job
    that failed in one partition left another partition's files in the table)."""
    context = df.sparkSession.sparkContext
    tracker = context.statusTracker()
    group = context.getLocalProperty("spark.jobGroup.id")
    before = set(tracker.getJobIdsForGroup(group))
    try:
        return df.collect()
    except BaseException as exc:
        jobs = set(tracker.getJobIdsForGroup(group)) - before
        if not isinstance(exc, Exception):
            # An interrupted collect (Ctrl-C) left its jobs running; a failed one has
            # ended, and another thread's job that started meanwhile in the same group
            # is not ours to cancel.
            for job_id in jobs:
                context._jsc.sc().cancelJob(job_id)
        _wait_for_tasks(context, jobs)
        raise


def _wait_for_tasks(context: SparkContext, jobs: set[int]) -> None:
    tracker = context.statusTracker()
    stages = {s for j in jobs if (info := tracker.getJobInfo(j)) for s in info.stageIds}
    deadline = time.monotonic() + TASKS_END_TIMEOUT_S
    while any(getattr(tracker.getStageInfo(s), "numActiveTasks", 0) for s in stages):
        if time.monotonic() > deadline:
            logger.warning(
                "tasks of Spark jobs %s still run %.0f s after the jobs ended; their files "
                "may be left behind (remove_orphan_files deletes them)",
                sorted(jobs),
                TASKS_END_TIMEOUT_S,
            )
            return
        time.sleep(0.05)


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
