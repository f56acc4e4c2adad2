"""raylake on an object store: reads, loader epochs, Ray reads and writes against pyarrow.

The moto S3 server runs in a process of its own (raylake.testing.s3server) with a
delay injected into every request: 0, 20 and 50 ms, what a store in the same
zone, another zone, another region costs per round trip. The table: 32 Parquet
files of 2M rows in all (16 float32 features, an int32 label, an int64 id;
~160 MB), one raylake table whose data files the baselines read directly.

For each latency, the two sides of each comparison alternate, median of 3:

  - ``open_table(...).to_arrow()`` (cold: metadata caches cleared) against
    ``pyarrow.dataset`` over ``pyarrow.fs.S3FileSystem`` (listing included);
    target >= 1.0x at 20 and 50 ms;
  - an epoch of ``LakeIterableDataset`` (batches of 1024, features stacked, in
    the main process) against pyarrow batches of 1024 -> torch; target >= 0.8x;
    with the peak growth of the process's resident memory during the epoch;
  - ``read_lake(...).materialize()`` against ``ray.data.read_parquet`` over the
    same files with the native filesystem; target >= 0.8x (``--skip-ray`` skips);
  - a write of the 2M rows into 32 files (``Table.write``, commit included)
    against ``pq.write_to_dataset`` over the native filesystem; target >= 0.9x.

Ratios are baseline time / raylake time: > 1 means raylake is faster.

    python bench/object_store.py [--small] [--latencies 0 20 50] [--repeat 3] [--skip-ray]

``--commits`` times ``Table.commit`` of writer messages adding 1 and 64 data files
instead (the files are copied into place before each timed commit), one process per arm
and round, the arms alternating: this tree as it is, this tree without the existence
checks of the messages' files (raylake/table/aborted.py), without the read of the parent
snapshot after the create (docs/format.md 6.6), without both (the baseline of the
ratios), and ``--before DIR`` (another source tree, e.g. ``git worktree add``) as it is.
Ratios are the baseline's median / the arm's: below 1 is what the reads cost.

    python bench/object_store.py --commits [--before DIR] [--latencies 20 50] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq

import raylake
from raylake.table import clear_caches
from raylake.testing.s3server import S3ServerProcess

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
FEATURES = [f"f{i}" for i in range(16)]
COLUMNS = [*FEATURES, "label"]
BATCH = 1024
FILES = 32


def make_rows(rows: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    features = rng.random((len(FEATURES), rows), dtype=np.float32)
    columns: dict[str, Any] = {name: features[i] for i, name in enumerate(FEATURES)}
    columns["label"] = rng.integers(0, 2, rows, dtype=np.int32)
    columns["id"] = np.arange(rows, dtype=np.int64)
    return pa.table(columns)


def table_options(rows: int) -> dict[str, str]:
    """One row group per file and a file per row group: FILES files."""
    return {"write.row-group-rows": str(rows // FILES), "write.target-file-size": "1"}


def native_fs(server: S3ServerProcess) -> pafs.S3FileSystem:
    return pafs.S3FileSystem(
        access_key=server.access_key,
        secret_key=server.secret_key,
        endpoint_override=server.endpoint_url.removeprefix("http://"),
        scheme="http",
        region="us-east-1",
    )


def median_alternating(
    ours: Callable[[], Any], theirs: Callable[[], Any], repeat: int
) -> tuple[float, float]:
    a: list[float] = []
    b: list[float] = []
    for _ in range(repeat):
        for fn, times in ((ours, a), (theirs, b)):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(a), statistics.median(b)


class PeakRss:
    """The peak growth of this process's resident memory while the block runs."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()

    @staticmethod
    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def _watch(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self.rss() - self.start)

    def __enter__(self) -> PeakRss:
        self.start = self.rss()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def epoch_memory(side: int, uri: str, options: dict[str, Any], data_dir: str) -> int:
    """Peak resident-memory growth of one loader epoch, in a fresh process (so that memory
    an earlier case left to the allocator does not hide it). ``side``: 2 raylake, 3 pyarrow."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_epoch_peak, side, uri, options, data_dir).result()


def _epoch_peak(side: int, uri: str, options: dict[str, Any], data_dir: str) -> int:
    import torch  # noqa: F401 - imported before the measurement starts

    endpoint = options["client_kwargs"]["endpoint_url"].removeprefix("http://")
    fs = pafs.S3FileSystem(
        access_key=options["key"],
        secret_key=options["secret"],
        endpoint_override=endpoint,
        scheme="http",
        region="us-east-1",
    )
    epoch = reads(uri, options, data_dir, fs)[side]
    with PeakRss() as peak:
        epoch()
    return peak.peak


def report(name: str, ours: float, theirs: float, target: str) -> None:
    ratio = theirs / ours
    print(f"  {name:<34} {ours:8.3f}s {theirs:8.3f}s {ratio:7.2f}x   {target}")


def reads(uri: str, options: dict[str, Any], data_dir: str, fs: pafs.FileSystem) -> tuple:
    rows = raylake.open_table(uri, storage_options=options).count()

    def lake_arrow() -> None:
        clear_caches()
        got = raylake.open_table(uri, storage_options=options).to_arrow()
        assert got.num_rows == rows

    def pyarrow_arrow() -> None:
        got = pads.dataset(data_dir, filesystem=fs, format="parquet").to_table()
        assert got.num_rows == rows

    def lake_epoch() -> None:
        from raylake.train.torch import LakeIterableDataset

        clear_caches()
        loader = LakeIterableDataset(
            uri,
            feature_columns=FEATURES,
            label_column="label",
            batch_size=BATCH,
            shuffle=False,
            storage_options=options,
        )
        assert sum(len(y) for _, y in loader) == rows

    def pyarrow_epoch() -> None:
        import torch

        n = 0
        dataset = pads.dataset(data_dir, filesystem=fs, format="parquet")
        for batch in dataset.to_batches(columns=COLUMNS, batch_size=BATCH):
            x = torch.from_numpy(np.column_stack([batch.column(c).to_numpy() for c in FEATURES]))
            y = torch.from_numpy(batch.column("label").to_numpy())
            n += len(y) if x.shape[1] else 0
        assert n == rows

    return lake_arrow, pyarrow_arrow, lake_epoch, pyarrow_epoch


def ray_reads(uri: str, options: dict[str, Any], files: list[str], fs: pafs.FileSystem) -> tuple:
    import ray

    def lake() -> None:
        clear_caches()
        ds = raylake.read_lake(uri, storage_options=options).materialize()
        assert ds.count() > 0

    def parquet() -> None:
        ds = ray.data.read_parquet(files, filesystem=fs).materialize()
        assert ds.count() > 0

    return lake, parquet


def piece_window(uri: str, options: dict[str, Any]) -> Callable[[], None]:
    """The loader's pieces (row groups) read through ``ReadContext.read_tables`` with
    ``FileIO.files_in_flight`` reads in flight, in order, as a loader's read-ahead window
    would: the table and I/O side of an epoch, without the conversion to batches."""
    from raylake.train.source import LakeSource

    def run() -> None:
        clear_caches()
        source = LakeSource.open(uri, columns=COLUMNS, storage_options=options)
        rows = sum(t.num_rows for t in source.context.read_tables(source.pieces))
        assert rows == source.total

    return run


def obstore_read(server: S3ServerProcess, bucket: str, files: list[str]) -> Callable[[], Any]:
    """The candidate client: obstore (Rust's object_store) getting every file whole,
    all at once on its async runtime, then decoded by pyarrow from memory."""
    import asyncio

    import obstore
    from obstore.store import S3Store

    store = S3Store(
        bucket,
        endpoint=server.endpoint_url,
        region="us-east-1",
        access_key_id=server.access_key,
        secret_access_key=server.secret_key,
        client_options={"allow_http": True},
        virtual_hosted_style_request=False,
    )
    keys = [f.split("/", 1)[1] for f in files]

    async def get_all() -> list[Any]:
        results = await asyncio.gather(*(obstore.get_async(store, k) for k in keys))
        return await asyncio.gather(*(r.bytes_async() for r in results))

    def run() -> None:
        blobs = asyncio.run(get_all())
        pa.concat_tables([pq.read_table(pa.py_buffer(b)) for b in blobs])

    return run


def writes(server: S3ServerProcess, bucket: str, data: pa.Table, fs: pafs.FileSystem) -> tuple:
    options = server.storage_options

    def lake() -> None:
        uri = f"s3://{bucket}/write-lake-{uuid.uuid4().hex[:8]}"
        tbl = raylake.create_table(
            uri, data.schema, options=table_options(data.num_rows), storage_options=options
        )
        tbl.write(data)

    def pyarrow_write() -> None:
        root = f"{bucket}/write-pq-{uuid.uuid4().hex[:8]}"
        per_file = data.num_rows // FILES
        pq.write_to_dataset(
            data, root, filesystem=fs, max_rows_per_file=per_file, row_group_size=per_file
        )

    return lake, pyarrow_write


COMMIT_FILES = (1, 64)
# Arm name -> the reads switched off in it (bench/_commit_child.py).
COMMIT_ARMS = {
    "both reads": (),
    "no existence check": ("exists",),
    "no parent read": ("parent",),
    "neither (baseline)": ("exists", "parent"),
}


def commit_arm(
    server: S3ServerProcess, bucket: str, tree: str, off: tuple[str, ...], n: int
) -> dict:
    """One child process on ``tree`` timing ``n`` commits of each size (bench/_commit_child.py)."""
    spec = {
        "endpoint": server.endpoint_url,
        "key": server.access_key,
        "secret": server.secret_key,
        "bucket": bucket,
        "files": COMMIT_FILES,
        "commits": n,
        "off": off,
    }
    env = {**os.environ, "PYTHONPATH": tree}
    child = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_commit_child.py")
    out = subprocess.run(
        [sys.executable, child, json.dumps(spec)], env=env, capture_output=True, text=True
    )
    if out.returncode:
        raise RuntimeError(f"commit child on {tree} failed:\n{out.stderr[-4000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def commits(args: argparse.Namespace) -> None:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    arms: dict[str, tuple[str, tuple[str, ...]]] = {
        name: (here, off) for name, off in COMMIT_ARMS.items()
    }
    if args.before:
        arms["before tree, both reads"] = (os.path.abspath(args.before), ())
    print(f"load average {os.getloadavg()[0]:.2f}, CPUs {os.cpu_count()}")
    with S3ServerProcess() as server:
        bucket = server.create_bucket()
        for ms in args.latencies:
            server.latency_s = ms / 1000
            got: dict[str, dict[str, list[float]]] = {a: {} for a in arms}
            for _ in range(args.repeat):
                for name, (tree, off) in arms.items():
                    result = commit_arm(server, bucket, tree, off, args.per_arm)
                    for key, values in result.items():
                        got[name].setdefault(key, []).extend(values)
            print(f"latency {ms:g} ms per request (load average {os.getloadavg()[0]:.2f})")
            base = "neither (baseline)"
            for files in COMMIT_FILES:
                ref = statistics.median(got[base][f"wall-{files}"])
                print(
                    f"  commit of {files} file(s){'':<22} {'median':>8} {'ratio':>7} {'requests':>9}"
                )
                for name in arms:
                    wall = statistics.median(got[name][f"wall-{files}"])
                    requests = statistics.median(got[name][f"requests-{files}"])
                    print(f"    {name:<36} {wall:7.3f}s {ref / wall:6.2f}x {requests:9.0f}")
    print(f"load average {os.getloadavg()[0]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--small", action="store_true", help="200k rows, a quick run")
    parser.add_argument("--latencies", type=float, nargs="+", default=[0, 20, 50])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-ray", action="store_true")
    parser.add_argument("--skip-write", action="store_true", help="reads only")
    parser.add_argument("--obstore", action="store_true", help="also time obstore against to_arrow")
    parser.add_argument("--commits", action="store_true", help="time commits (see above)")
    parser.add_argument("--before", help="--commits: another source tree to compare")
    parser.add_argument("--commits-per-arm", dest="per_arm", type=int, default=5)
    args = parser.parse_args()
    if args.commits:
        return commits(args)
    rows = 200_000 if args.small else args.rows

    with S3ServerProcess() as server:
        bucket = server.create_bucket()
        fs = native_fs(server)
        options = server.storage_options
        uri = f"s3://{bucket}/lake"
        data = make_rows(rows)
        tbl = raylake.create_table(
            uri, data.schema, options=table_options(rows), storage_options=options
        )
        tbl.write(data)
        files = sorted(
            f.path
            for f in fs.get_file_info(pafs.FileSelector(f"{bucket}/lake/data", recursive=True))
            if f.type == pafs.FileType.File
        )
        size = sum(f.size for f in fs.get_file_info(files))
        print(f"{rows:,} rows in {len(files)} files, {size / 1e6:.0f} MB on the S3 server")
        print(f"pyarrow I/O threads: {pa.io_thread_count()}, CPUs: {os.cpu_count()}")
        data_dir = f"{bucket}/lake/data"
        lake_arrow, pa_arrow, lake_epoch, pa_epoch = reads(uri, options, data_dir, fs)
        lake_write, pa_write = writes(server, bucket, data, fs)
        lake_pieces = piece_window(uri, options)
        if not args.skip_ray:
            import ray

            ray.init(
                address="local",
                num_cpus=os.cpu_count(),
                include_dashboard=False,
                log_to_driver=False,
            )
            ray.data.DataContext.get_current().enable_progress_bars = False
            logging.getLogger("ray.data").setLevel(logging.WARNING)
            lake_ray, pa_ray = ray_reads(uri, options, files, fs)
            lake_ray(), pa_ray()  # start the workers before timing

        print(f"  {'case':<34} {'raylake':>9} {'baseline':>9} {'ratio':>8}")
        for ms in args.latencies:
            server.latency_s = ms / 1000
            print(f"latency {ms:g} ms per request")
            report(
                "to_arrow vs pyarrow.dataset",
                *median_alternating(lake_arrow, pa_arrow, args.repeat),
                ">= 1.0x",
            )
            if args.obstore:
                report(
                    "to_arrow vs obstore whole-file GETs",
                    *median_alternating(
                        lake_arrow, obstore_read(server, bucket, files), args.repeat
                    ),
                    "(candidate client)",
                )
            report(
                "loader epoch vs pyarrow->torch",
                *median_alternating(lake_epoch, pa_epoch, args.repeat),
                ">= 0.8x",
            )
            report(
                "loader pieces, files_in_flight window",
                *median_alternating(lake_pieces, pa_epoch, args.repeat),
                "(the I/O a loader window drives)",
            )
            if args.skip_write and args.skip_ray:
                continue
            if not args.skip_ray:
                report(
                    "read_lake vs read_parquet",
                    *median_alternating(lake_ray, pa_ray, args.repeat),
                    ">= 0.8x",
                )
            if args.skip_write:
                continue
            report(
                "write vs pq.write_to_dataset",
                *median_alternating(lake_write, pa_write, args.repeat),
                ">= 0.9x",
            )
            ours, theirs = (epoch_memory(side, uri, options, data_dir) for side in (2, 3))
            print(
                f"  loader epoch peak memory growth: raylake {ours / 1e6:.0f} MB, "
                f"pyarrow {theirs / 1e6:.0f} MB (table {size / 1e6:.0f} MB on the store)"
            )


if __name__ == "__main__":
    main()
