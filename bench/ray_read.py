"""Ray Data read throughput: ``read_lake`` against ``ray.data.read_parquet`` over the same files.

Writes the synthetic table of bench/scan.py (default 4M rows, 4 daily partitions,
one commit per day), starts ``ray.init(num_cpus=2)``, and times, best of 3 runs
alternating the two readers, in the same run:
  - ``materialize()`` of the whole table,
  - ``iter_batches`` over all rows,
  - a selective filter (one day and an id range) pushed through ``filter(expr=...)``,
  - ``iter_torch_batches`` over the 16 features and the label (if torch is installed),
through ``read_lake`` and through ``ray.data.read_parquet`` over the table's live data
files. Prints rows/s and the ratio (raylake / read_parquet, >1 means raylake is faster).

    python bench/ray_read.py [--rows 4000000] [--dir bench/.data/ray_read]
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from _synthetic import DATES, FEATURES, build_table, compare, data_files, rate

import raylake

os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def count_materialized(make_ds: Callable[[], Any]) -> int:
    return int(make_ds().materialize().count())


def count_batches(make_ds: Callable[[], Any]) -> int:
    return sum(
        len(b["id"]) for b in make_ds().iter_batches(batch_size=None, batch_format="pyarrow")
    )


def count_torch(make_ds: Callable[[], Any]) -> int:
    total = 0
    for batch in make_ds().iter_torch_batches(batch_size=1024):
        total += len(batch["label"])
    return total


def avoid_http_import_race() -> None:
    """Let ``read_parquet`` list files on a machine without aiohttp.

    Ray 2.60's Parquet reader imports fsspec's HTTPFileSystem from several listing
    threads at once; without aiohttp that import fails, and a thread that sees the
    half-imported module gets an ImportError Ray does not catch (intermittently).
    Marking the module absent up front (driver and workers) makes every attempt fail
    the way Ray expects.
    """
    if importlib.util.find_spec("aiohttp") is None:
        sys.modules.setdefault("fsspec.implementations.http", None)  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--dir", default=str(Path(__file__).parent / ".data" / "ray_read"))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    import ray
    from ray.data.expressions import col

    tbl = build_table(Path(args.dir), args.rows)
    files = data_files(tbl)
    avoid_http_import_race()
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"worker_process_setup_hook": avoid_http_import_race},
    )
    ray.data.DataContext.get_current().enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)  # keep the report readable
    print(
        f"{len(files)} data files, Ray {ray.__version__}, {ray.available_resources()['CPU']} CPUs"
    )

    per_day = args.rows // len(DATES)
    lo, hi = per_day + per_day // 2, per_day + per_day // 2 + per_day // 50
    predicate = (col("dt") == DATES[1]) & (col("id") >= lo) & (col("id") < hi)
    training = [*FEATURES, "label"]

    def lake(columns: list[str] | None = None, pred: Any = None) -> Callable[[], Any]:
        def make() -> Any:
            ds = raylake.read_lake(tbl.uri, columns=columns)
            return ds if pred is None else ds.filter(expr=pred)

        return make

    def parquet(columns: list[str] | None = None, pred: Any = None) -> Callable[[], Any]:
        def make() -> Any:
            ds = ray.data.read_parquet(files, columns=columns)
            return ds if pred is None else ds.filter(expr=pred)

        return make

    cases: list[tuple[str, Callable[[Callable[[], Any]], int], Any, Any]] = [
        ("materialize()", count_materialized, lake(), parquet()),
        ("iter_batches", count_batches, lake(), parquet()),
        ("selective filter", count_materialized, lake(pred=predicate), parquet(pred=predicate)),
    ]
    if importlib.util.find_spec("torch") is not None:
        cases.append(
            ("iter_torch_batches", count_torch, lake(training), parquet(training)),
        )
    else:
        print("torch is not installed: skipping iter_torch_batches")

    print(f"{'case':<20} {'read_lake':>18} {'read_parquet':>18} {'ratio':>7}  rows")
    for name, measure, lake_ds, parquet_ds in cases:
        t_lake, n_lake, t_pq, n_pq = compare(
            partial(measure, lake_ds), partial(measure, parquet_ds), args.repeat
        )
        assert n_lake == n_pq, (name, n_lake, n_pq)
        # Rows/s of the table size for every case, so that filter speed-ups show as rates.
        print(
            f"{name:<20} {rate(args.rows, t_lake):>18} {rate(args.rows, t_pq):>18} "
            f"{t_pq / t_lake:>6.2f}x  {n_lake:,}"
        )
    ray.shutdown()


if __name__ == "__main__":
    main()
