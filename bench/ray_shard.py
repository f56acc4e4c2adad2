"""A Ray Train shard's bare delivery: one epoch of Arrow blocks from ``streaming_split``.

The shape bench/gpu.py's Ray rows time: a shard (``ds.streaming_split(1)[0]``, what
``ray.train.get_dataset_shard`` returns) made once and read once per epoch with
``iter_batches(batch_size=None, batch_format="pyarrow")``, its first epoch (which starts
the split's coordinator) a warm-up. Three shards over the same synthetic table (4
files of one row group, the 16 features and the label), alternated in each round:

  - ``read_lake`` (whole task blocks: one read task per split, its blocks not cut);
  - Ray's default parallelism over the same ``LakeDatasource``
    (``read_datasource``: the 4 tasks' output cut into ~1 MB blocks by SplitBlocks);
  - ``ray.data.read_parquet`` over the table's live data files (``--parquet``).

Prints the median epoch of each, its blocks, the median of the rounds' ratios to Ray's
default (each round's epochs run back to back) and the load.

    python bench/ray_shard.py [--rows 1000000] [--rounds 5] [--cpus 2] [--parquet]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _synthetic import FEATURES, build_table, data_files, rate

import raylake

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
COLUMNS = [*FEATURES, "label"]


def epoch(shard: object) -> tuple[float, int, int]:
    """Seconds, rows and blocks of one pass over the shard."""
    t0 = time.perf_counter()
    rows = blocks = 0
    for block in shard.iter_batches(batch_size=None, batch_format="pyarrow"):  # type: ignore[attr-defined]
        rows += block.num_rows
        blocks += 1
    return time.perf_counter() - t0, rows, blocks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cpus", type=int, default=2, help="ray.init(num_cpus=...)")
    parser.add_argument("--parquet", action="store_true", help="also read_parquet's shard")
    args = parser.parse_args()

    import ray

    from raylake.datasource import LakeDatasource

    with tempfile.TemporaryDirectory() as tmp:
        tbl = build_table(Path(tmp) / "append", args.rows)
        ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False,
                 logging_level="WARNING")  # fmt: skip
        try:
            context = ray.data.DataContext.get_current()
            for name in ("ray", "ray.data"):
                logging.getLogger(name).setLevel(logging.ERROR)
            context.enable_progress_bars = False
            context.print_on_execution_start = False
            source = LakeDatasource(tbl.uri, columns=COLUMNS)
            shards: dict[str, Callable[[], object]] = {
                "read_lake": lambda: raylake.read_lake(tbl.uri, columns=COLUMNS),
                "Ray's default": lambda: ray.data.read_datasource(source),
            }
            if args.parquet:
                files = data_files(tbl)
                shards["read_parquet"] = lambda: ray.data.read_parquet(files).select_columns(
                    COLUMNS
                )
            made = {name: make().streaming_split(1)[0] for name, make in shards.items()}
            times: dict[str, list[float]] = {name: [] for name in made}
            blocks: dict[str, int] = {}
            for shard in made.values():
                epoch(shard)  # warm-up: starts the coordinator
            for _ in range(args.rounds):
                for name, shard in made.items():
                    seconds, rows, blocks[name] = epoch(shard)
                    assert rows == args.rows, (name, rows)
                    times[name].append(seconds)
        finally:
            ray.shutdown()
    base = times["Ray's default"]
    print(f"\n{'shard delivery, median epoch':<32} {'s':>7} {'blocks':>7} {'rate':>17} ratio")
    for name, runs in times.items():
        med = statistics.median(runs)
        # The median of each round's ratio: a round's epochs ran back to back.
        ratio = statistics.median(b / t for b, t in zip(base, runs, strict=True))
        print(f"{name:<32} {med:7.3f} {blocks[name]:7d} {rate(args.rows, med)} "
              f"{ratio:5.2f}x")  # fmt: skip
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores, "
          f"{args.rounds} rounds, Ray with {args.cpus} CPUs")  # fmt: skip


if __name__ == "__main__":
    main()
