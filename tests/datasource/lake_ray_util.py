"""Helpers shared by the Ray Data tests: small tables with several files, and comparisons."""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import ray.cloudpickle
from ray.data.datasource import ReadTask

import raylake
from raylake import LakeDatasource

# Ray workers cannot import test modules: ship this module's functions by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

EVENTS_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("dt", pa.string()),
        ("x", pa.float32()),
        ("label", pa.int32()),
        ("tag", pa.string()),
    ]
)
DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]
# Small row groups and splits, so that a few thousand rows make several files, row
# groups and splits, and therefore several read tasks.
SMALL = {"write.row-group-rows": 500, "read.split.target-size": 40_000}


def events_batch(start: int, rows: int, day: str, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    tags = pa.array(rng.choice(["a", "b", "c"], rows).astype(object), pa.string())
    return pa.table(
        {
            "id": np.arange(start, start + rows, dtype=np.int64),
            "dt": pa.array([day] * rows, pa.string()),
            "x": rng.random(rows).astype(np.float32),
            "label": rng.integers(0, 3, rows).astype(np.int32),
            "tag": tags,
        },
        schema=EVENTS_SCHEMA,
    )


def make_events(root: Path, rows_per_day: int = 2_000) -> raylake.Table:
    """An append table partitioned by day: one commit per day, ids ascending by day."""
    tbl = raylake.create_table(str(root), EVENTS_SCHEMA, partition_by=["dt"], options=SMALL)
    for i, day in enumerate(DAYS):
        tbl.write(events_batch(i * rows_per_day, rows_per_day, day, seed=i))
    return tbl


def ds_to_arrow(ds: Any) -> pa.Table:
    """Materialize a Ray Dataset as one Arrow table (empty datasets give an empty table)."""
    import ray

    tables = [t for t in ray.get(ds.to_arrow_refs()) if t.num_columns]
    return pa.concat_tables(tables) if tables else pa.table({})


def rows(pa_table: pa.Table, key: str = "id") -> list[dict[str, Any]]:
    """Rows sorted by ``key``: Ray Data does not promise an order."""
    if pa_table.num_rows == 0:
        return []
    return pa_table.sort_by(key).to_pylist()


class FlakyLakeDatasource(LakeDatasource):
    """Wraps each read task so that the first attempt to run any of them kills its worker.

    The crash comes after the task has yielded a block, so Ray must re-run the task
    and drop what the failed attempt produced.
    """

    def __init__(self, uri: str, marker: str) -> None:
        super().__init__(uri)
        self.marker = marker

    def get_read_tasks(self, parallelism: int, *args: Any, **kwargs: Any) -> list[ReadTask]:
        return [
            ReadTask(
                functools.partial(_crash_once, self.marker, t.read_fn),
                t.metadata,
                schema=t.schema,
                per_task_row_limit=t.per_task_row_limit,
            )
            for t in super().get_read_tasks(parallelism, *args, **kwargs)
        ]


def _crash_once(marker: str, read_fn: Callable[[], Iterable[Any]]) -> Iterable[Any]:
    blocks = iter(read_fn())
    yield next(blocks)
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        yield from blocks
        return
    os._exit(1)


def fail_on_block_with(batch: pa.Table, data_dir: str, last_id: int) -> pa.Table:
    """A map_batches UDF that fails on the batch holding ``last_id``, once other files exist."""
    if last_id not in batch.column("id").to_pylist():
        return batch
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not any(Path(data_dir).rglob("ray-*.parquet")):
        time.sleep(0.05)  # let other tasks finish writing first
    raise RuntimeError(f"injected failure at id {last_id}")
