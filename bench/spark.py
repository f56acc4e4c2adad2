"""raylake.spark against Spark's own Parquet paths, in the same run, on the same data.

On the synthetic table of bench/_synthetic.py (default 4M rows, 24 columns; the
source is read by Spark and cached, so both sides write the same in-memory rows):

  - write: ``raylake.spark.write(df, uri)`` vs ``df.write.parquet(path)`` (target >= 0.8x),
  - read of an append table: ``raylake.spark.read(spark, uri)`` vs
    ``spark.read.parquet`` over the same files, counted with a full scan of every
    column (target >= 0.9x),
  - read of the primary-key table of bench/merge.py (4 buckets, 3 upserts of 25% of
    the keys, merged on the executors): rows/s,
  - Spark -> Ray hand-off: ``to_ray(df)`` through RayDP vs ``to_ray(df, via="table")``
    (RayDP on the local Ray cluster), rows/s until the Ray dataset is materialized.

Local Spark uses ``local[2]``. Times are best of ``--repeat`` runs, alternating sides.
The RayDP cases run in a child process: a JVM started for local Spark cannot host
RayDP's Spark (its classpath lacks RayDP's jars), and a JVM cannot be restarted.

    python bench/spark.py [--rows 4000000] [--dir bench/.data/spark]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from _synthetic import build_table, data_files, rate
from merge import source_rows, upsert_batch

import raylake
import raylake.spark as rs


def best_pair(
    a: Callable[[], object], b: Callable[[], object], repeat: int, warmup: bool = False
) -> tuple[float, float]:
    if warmup:  # the JVM compiles the reader's hot paths on first use: not part of either
        a()
        b()
    ta = tb = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        a()
        ta = min(ta, time.perf_counter() - t0)
        t0 = time.perf_counter()
        b()
        tb = min(tb, time.perf_counter() - t0)
    return ta, tb


def line(name: str, rows: int, t_lake: float, t_base: float, base_name: str) -> None:
    print(
        f"{name:<34} raylake {rate(rows, t_lake)}   {base_name} {rate(rows, t_base)}   "
        f"{t_base / t_lake:5.2f}x"
    )


def local_cases(root: Path, rows: int, repeat: int) -> None:
    source = build_table(root / "source", rows, commits_per_day=4)
    spark = rs.session("bench", on_ray=False, master="local[2]",
                       configs={"spark.driver.memory": "6g"})  # fmt: skip
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.read.parquet(*data_files(source)).cache()
    df.count()

    def lake_write() -> None:
        shutil.rmtree(root / "lake_out", ignore_errors=True)
        rs.write(df, str(root / "lake_out"))

    def spark_write() -> None:
        df.write.mode("overwrite").parquet(str(root / "parquet_out"))

    t_lake, t_base = best_pair(lake_write, spark_write, repeat)
    line("write", rows, t_lake, t_base, "df.write.parquet")

    files = data_files(raylake.open_table(str(root / "lake_out")))

    def full(frame: object) -> None:
        frame.selectExpr("sum(id)", "sum(f0)", "sum(length(tag))", "count(dt)").collect()  # type: ignore[attr-defined]

    t_lake, t_base = best_pair(
        lambda: full(rs.read(spark, str(root / "lake_out"))),
        lambda: full(spark.read.parquet(*files)),
        repeat,
        warmup=True,
    )
    line("read, append table", rows, t_lake, t_base, "spark.read.parquet")

    pk_uri = str(root / "pk")
    shutil.rmtree(pk_uri, ignore_errors=True)
    base = source_rows(rows)
    pk = raylake.create_table(pk_uri, base.schema, primary_key=["id"], buckets=4)
    pk.write(base)
    for i in range(3):
        pk.write(upsert_batch(base, 0.25, seed=100 + i))
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        full(rs.read(spark, pk_uri))
        best = min(best, time.perf_counter() - t0)
    print(f"{'read, PK table (3 upserts, merged)':<34} raylake {rate(rows, best)}")
    df.unpersist()
    rs.stop()


def ray_cases(root: Path, rows: int, repeat: int) -> None:
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    # RayDP converts a partition to Arrow inside the executor's JVM: give it heap.
    spark = rs.session("bench-raydp", on_ray=True, executor_memory="6G")
    spark.sparkContext.setLogLevel("ERROR")
    source = raylake.open_table(str(root / "source"))
    df = spark.read.parquet(*data_files(source))
    t_table, t_raydp = best_pair(
        lambda: rs.to_ray(
            df, via="table", uri=str(root / "handoff"), mode="overwrite"
        ).materialize(),
        lambda: rs.to_ray(df).materialize(),
        repeat,
    )
    line("Spark -> Ray hand-off", rows, t_table, t_raydp, "RayDP to_ray(df)")
    rs.stop()
    ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=str(Path(__file__).parent / ".data" / "spark"))
    parser.add_argument("--raydp-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    root = Path(args.dir)
    root.mkdir(parents=True, exist_ok=True)
    if args.raydp_only:
        ray_cases(root, args.rows, args.repeat)
        return
    print(f"### {args.rows:,} rows, 24 columns (ratio = baseline time / raylake time)")
    local_cases(root, args.rows, args.repeat)
    sys.stdout.flush()
    subprocess.run([sys.executable, __file__, "--raydp-only", *sys.argv[1:]], check=True)


if __name__ == "__main__":
    main()
