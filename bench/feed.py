"""Overlap of loading and training (issue 16), measurable without a GPU.

A training step that takes about as long as loading its batch (one torch matmul on one
thread, ``torch.set_num_threads(1)``, its size calibrated to the measured load time)
runs over an epoch of ``LakeIterableDataset`` iterated in the main process:

  - load alone: the epoch with read-ahead, no step;
  - step alone: the same number of steps on a batch at hand;
  - with read-ahead (``prefetch=2``, ``read_ahead=8``): loading on threads while the
    step runs; target <= 1.2x the longer of the two alone;
  - without read-ahead (``prefetch=0, read_ahead=0``): the same loop, one after the
    other (the baseline: about the sum of the two).

Columns: ``load`` (with read-ahead) and ``load0`` (without) alone, ``step`` alone, the
epoch with read-ahead (``ahead``) and without (``serial``), both as ratios to the longer
of the loading (the faster loader) and the steps alone, and the cores the ``ahead``
epoch kept busy (process CPU time / wall time): overlap needs a second core, and a
machine that gives the process only one cannot show it.

Locally, and on S3 (the moto server of raylake/testing/s3server.py in a process of its
own, ``--latency`` ms injected per request). Run by bench/train.py (``--overlap``), or:

    python bench/feed.py [--rows 1000000] [--latency 20] [--repeat 5] [--skip-s3]
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pyarrow as pa
from _synthetic import DATES, FEATURES, SCHEMA, batches_for_date

import raylake

BATCH = 1024
ROW_GROUP = 32_768  # rows per row group: the pieces a loader reads ahead


def build(uri: str, rows: int, storage_options: dict[str, Any] | None = None) -> raylake.Table:
    """The synthetic table of bench/scan.py, in row groups of ROW_GROUP rows."""
    tbl = raylake.create_table(
        uri,
        SCHEMA,
        partition_by=["dt"],
        options={"write.row-group-rows": str(ROW_GROUP)},
        storage_options=storage_options,
    )
    per_day = rows // len(DATES)
    for day in range(len(DATES)):
        tbl.write(pa.concat_tables(batches_for_date(day, per_day)))
    return tbl


def make_step(n: int) -> Callable[[Any], None]:
    """A training step: one n x n matmul (it releases the GIL once, for its whole time)."""
    import torch

    m = torch.rand(n, n)
    out = torch.empty(n, n)

    def step(batch: Any) -> None:
        features, _ = batch
        torch.mm(m, m, out=out)
        out[0, 0] += features[0, 0]

    return step


def steps_alone(step: Callable[[Any], None], sample: Any, steps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(steps):
        step(sample)
    return time.perf_counter() - t0


def calibrate(target: float, sample: Any, steps: int) -> Callable[[Any], None]:
    """A step such that ``steps`` of them take about ``target`` seconds."""
    n = 256
    for _ in range(4):
        took = min(steps_alone(make_step(n), sample, min(steps, 200)) for _ in range(3))
        took *= steps / min(steps, 200)
        n = max(16, round(n * (target / took) ** (1 / 3)))
    return make_step(n)


CPU_USED: dict[int, float] = {}  # id(dataset) -> cores used by its last epoch


def epoch(ds: Any, step: Callable[[Any], None] | None) -> float:
    """Wall seconds of one epoch; the cores it kept busy go to CPU_USED (a machine that
    gives the process one core cannot overlap anything, however the loader is built)."""
    t0, c0 = time.perf_counter(), time.process_time()
    for batch in ds:
        if step is not None:
            step(batch)
    wall = time.perf_counter() - t0
    CPU_USED[id(ds)] = (time.process_time() - c0) / wall
    return wall


def overlap(
    label: str, tbl: raylake.Table, repeat: int, batch: int = BATCH, prefetch: int = 2
) -> dict[str, float]:
    """The four timings of one setting (best of ``repeat``, the cases alternated)."""
    from raylake.train.torch import LakeIterableDataset

    def dataset(prefetch: int, read_ahead: int) -> Any:
        return LakeIterableDataset(
            tbl,
            feature_columns=FEATURES,
            label_column="label",
            batch_size=batch,
            shuffle=True,
            prefetch=prefetch,
            read_ahead=read_ahead,
        )

    ahead, serial = dataset(prefetch, 8), dataset(0, 0)
    steps = len(ahead)
    t_load = min(epoch(ahead, None) for _ in range(3))
    sample = next(iter(serial))
    step = calibrate(t_load, sample, steps)  # about as long as loading, alone
    best = dict.fromkeys(["load", "load0", "step", "ahead", "serial"], float("inf"))
    best["load"] = t_load
    for _ in range(repeat):
        best["load"] = min(best["load"], epoch(ahead, None))
        best["load0"] = min(best["load0"], epoch(serial, None))
        best["step"] = min(best["step"], steps_alone(step, sample, steps))
        t_ahead = epoch(ahead, step)
        if t_ahead < best["ahead"]:
            best["ahead"], best["cores"] = t_ahead, CPU_USED[id(ahead)]
        best["serial"] = min(best["serial"], epoch(serial, step))
    longer = max(min(best["load"], best["load0"]), best["step"])
    print(
        f"{label:<22} {batch:>6} {prefetch:>4} {steps:>6} {best['load']:>8.2f}s {best['load0']:>8.2f}s {best['step']:>8.2f}s "
        f"{best['ahead']:>8.2f}s {best['serial']:>8.2f}s "
        f"{best['ahead'] / longer:>8.2f}x {best['serial'] / longer:>8.2f}x "
        f"{best['cores']:>6.2f}"
    )
    return best


def header() -> None:
    print(
        f"\n{'overlap':<22} {'batch':>6} {'pref':>4} {'steps':>6} {'load':>9} {'load0':>9} "
        f"{'step':>9} {'ahead':>9} {'serial':>9} "
        f"{'ahead/max':>9} {'serial/max':>9} {'cores':>6}   target: ahead/max <= 1.2x"
    )


# -- the S3 server, in a process of its own (in-process it would compete for the GIL) ---


def _serve(conn: Connection) -> None:
    from raylake.testing.s3server import LocalS3Server

    with LocalS3Server() as s3:
        bucket = s3.create_bucket("raylake-bench-feed")
        conn.send((s3.storage_options, bucket))
        while True:
            command, value = conn.recv()
            if command == "stop":
                return
            s3.latency_s = value
            conn.send("ok")


class S3Process:
    """``with S3Process() as s3:``; ``s3.latency(0.02)`` delays every later request."""

    def __enter__(self) -> S3Process:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(target=_serve, args=(child,), daemon=True)
        self._process.start()
        self.storage_options, self.bucket = self._conn.recv()
        return self

    def latency(self, seconds: float) -> None:
        self._conn.send(("latency", seconds))
        self._conn.recv()

    def __exit__(self, *exc: object) -> None:
        self._conn.send(("stop", None))
        self._process.join(timeout=30)


def run(rows: int, root: Path, latency_ms: float, repeat: int, s3: bool = True) -> None:
    """Locally (batches of 1024 and 8192), then on S3 with latency, on half the rows."""
    import shutil

    import torch

    torch.set_num_threads(1)
    if root.exists():
        shutil.rmtree(root)
    local = build(str(root / "feed"), rows)
    header()
    overlap("local disk", local, repeat)
    overlap("local disk", local, repeat, batch=8 * BATCH)
    if not s3:
        return
    with S3Process() as server:
        uri = f"s3://{server.bucket}/feed"
        remote = build(uri, rows // 2, server.storage_options)
        server.latency(latency_ms / 1000)
        overlap(f"S3, {latency_ms:g} ms latency", remote, repeat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dir", default=str(Path(__file__).parent / ".data" / "feed"))
    parser.add_argument("--latency", type=float, default=20.0, help="ms per S3 request")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--skip-s3", action="store_true")
    args = parser.parse_args()
    run(args.rows, Path(args.dir), args.latency, args.repeat, s3=not args.skip_s3)


if __name__ == "__main__":
    main()
