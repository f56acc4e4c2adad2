"""Training-loader throughput: raylake's loaders against their baselines, in the same run.

Writes the synthetic table of bench/scan.py (default 2M rows, 4 daily files) and,
from the same rows, the primary-key table of bench/merge.py (4 buckets, then 3
commits each upserting 25% of the keys). Rows/s into torch batches of 1024 (16 float32
features stacked into one tensor + the int32 label), best of ``--repeat`` runs, the
two sides of each comparison alternated so that both see the same machine state:

  - LakeIterableDataset in-process (shuffle off, and on) and through
    DataLoader(num_workers=2), against pyarrow -> torch over the same files
    (``pyarrow.dataset`` batches of 1024, features column-stacked; target >= 0.8x);
  - the same against ``ray.data.read_parquet(files).iter_torch_batches`` (>= 5x);
  - the Ray path: ``read_lake(...).iter_torch_batches`` and
    ``raylake.train.ray.iter_torch_batches(read_lake(...))`` against
    ``read_parquet(...).iter_torch_batches`` (>= 2x);
  - the primary-key table against the append table (>= 0.7x; ``--pk-only`` runs just this);
  - LakeMapDataset random access (a shuffling sampler), rows/s;
  - to_tf_dataset against ``tf.data.Dataset.from_generator`` over pyarrow batches;
  - the overlap of loading and a training step of the same length, with read-ahead and
    without, locally and on S3 at ``--latency`` ms (bench/feed.py; target <= 1.2x the
    longer of the two alone).

    python bench/train.py [--rows 2000000] [--dir bench/.data/train] [--skip-ray] [--skip-tf]
                          [--skip-overlap | --overlap-only] [--latency 20] [--device cuda]

``--device cuda`` copies every batch to the GPU on both sides: raylake's dataset copies
in the main process itself (pinned memory, a side stream), the baselines call
``.to(device)`` in the loop, and each epoch ends when the GPU has its last batch.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import shutil
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import feed
import numpy as np
import pyarrow.dataset as pads
import ray_read
from _synthetic import FEATURES, SCHEMA, build_table, compare, data_files, rate
from merge import source_rows, upsert_batch

import raylake

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
BATCH = 1024
COLUMNS = [*FEATURES, "label"]


def report(name: str, rows: int, ours: float, theirs: float | None, target: str = "") -> None:
    if theirs is None:
        print(f"{name:<52} {rate(rows, ours):>18}")
        return
    ratio = theirs / ours
    print(f"{name:<52} {rate(rows, ours):>18} {rate(rows, theirs):>18} {ratio:>7.2f}x  {target}")


def pyarrow_torch(files: list[str], device: str = "cpu") -> Callable[[], int]:
    """The baseline: pyarrow batches of 1024, features stacked, to torch (and, with a
    GPU, ``.to(device)`` as a training loop writes it)."""
    import torch

    def run() -> int:
        n = 0
        for batch in pads.dataset(files).to_batches(columns=COLUMNS, batch_size=BATCH):
            features = np.column_stack([batch.column(c).to_numpy() for c in FEATURES])
            x = torch.from_numpy(features)
            y = torch.from_numpy(batch.column("label").to_numpy())
            if device != "cpu":
                x, y = x.to(device), y.to(device)
            n += len(y) if x.shape[1] else 0
        synchronize(device)
        return n

    return run


class PyarrowWorkers:
    """The baseline inside DataLoader workers: each worker converts every other file.

    Defined at the top level of a module so that DataLoader can hand it to workers; the
    class is built on first use so that this script imports torch only when it runs.
    """

    @staticmethod
    def loader(files: list[str], workers: int) -> Callable[[], int]:
        import torch
        from torch.utils.data import DataLoader, IterableDataset, get_worker_info

        class Files(IterableDataset):
            def __iter__(self) -> Any:
                info = get_worker_info()
                mine = files[info.id :: info.num_workers] if info else files
                for batch in pads.dataset(mine).to_batches(columns=COLUMNS, batch_size=BATCH):
                    features = np.column_stack([batch.column(c).to_numpy() for c in FEATURES])
                    yield (
                        torch.from_numpy(features),
                        torch.from_numpy(batch.column("label").to_numpy()),
                    )

        def run() -> int:
            loader = DataLoader(Files(), batch_size=None, num_workers=workers)
            return sum(len(y) for _, y in loader)

        return run

    @staticmethod
    def ceiling(rows: int, workers: int) -> Callable[[], int]:
        """Workers that only send ready-made batches: what DataLoader's transport allows."""
        import torch
        from torch.utils.data import DataLoader, IterableDataset, get_worker_info

        class Ready(IterableDataset):
            def __iter__(self) -> Any:
                info = get_worker_info()
                n = rows // BATCH // (info.num_workers if info else 1)
                x, y = torch.zeros(BATCH, len(FEATURES)), torch.zeros(BATCH, dtype=torch.int32)
                for _ in range(n):
                    yield x, y

        def run() -> int:
            return sum(len(y) for _, y in DataLoader(Ready(), batch_size=None, num_workers=workers))

        return run


def synchronize(device: str) -> None:
    """Wait for the copies queued on a GPU (a no-op on the CPU)."""
    if device != "cpu":
        import torch

        torch.cuda.synchronize()


def lake_torch(
    tbl: raylake.Table, *, shuffle: bool, workers: int = 0, device: str = "cpu"
) -> Callable[[], int]:
    """An epoch of LakeIterableDataset; with a GPU, in the main process the dataset
    copies batches itself (pinned, on a side stream), and with DataLoader workers the
    loader pins them and the loop copies them with ``non_blocking=True``."""
    import torch
    from torch.utils.data import DataLoader

    from raylake.train.torch import LakeIterableDataset

    on_gpu = device != "cpu"
    ds = LakeIterableDataset(
        tbl,
        feature_columns=FEATURES,
        label_column="label",
        batch_size=BATCH,
        shuffle=shuffle,
        device=device if on_gpu and not workers else None,
    )
    epoch = [0]

    def run() -> int:
        ds.set_epoch(epoch[0])
        epoch[0] += 1
        batches = (
            DataLoader(ds, batch_size=None, num_workers=workers, pin_memory=on_gpu)
            if workers
            else ds
        )
        n = 0
        for x, y in batches:
            if on_gpu and workers:
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            assert x.dtype == torch.float32 and x.shape[1] == len(FEATURES)
            n += len(y)
        synchronize(device)
        return n

    return run


def ray_torch(make: Callable[[], Any]) -> Callable[[], int]:
    def run() -> int:
        return sum(len(b["label"]) for b in make().iter_torch_batches(batch_size=BATCH))

    return run


def lake_ray_torch(uri: str) -> Callable[[], int]:
    from raylake.train.ray import iter_torch_batches

    def run() -> int:
        ds = raylake.read_lake(uri, columns=COLUMNS)
        batches = iter_torch_batches(
            ds, feature_columns=FEATURES, label_column="label", batch_size=BATCH
        )
        return sum(len(y) for _, y in batches)

    return run


def build_pk_table(root: Path, rows: int) -> raylake.Table:
    """bench/merge.py's table: 4 buckets, then 3 commits each upserting 25% of the keys."""
    if root.exists():
        shutil.rmtree(root)
    base = source_rows(rows)
    pk = raylake.create_table(str(root), SCHEMA, primary_key=["id"], buckets=4)
    t0 = time.perf_counter()
    pk.write(base)
    for i in range(3):
        pk.write(upsert_batch(base, 0.25, seed=100 + i))
    print(f"wrote the primary-key table (3 upserts) in {time.perf_counter() - t0:.2f}s")
    return pk


def map_random(tbl: raylake.Table, *, batched: bool) -> Callable[[], int]:
    import torch
    from torch.utils.data import BatchSampler, DataLoader, RandomSampler

    from raylake.train.torch import LakeMapDataset

    ds = LakeMapDataset(tbl, feature_columns=FEATURES, label_column="label")
    generator = torch.Generator().manual_seed(0)

    def run() -> int:
        if batched:  # ds[list]: one gather per batch
            sampler = BatchSampler(RandomSampler(ds, generator=generator), BATCH, False)
            loader = DataLoader(ds, sampler=sampler, batch_size=None)
        else:  # __getitems__ + default collate
            loader = DataLoader(ds, batch_size=BATCH, shuffle=True, generator=generator)
        return sum(len(y) for _, y in loader)

    return run


def tf_cases(tbl: raylake.Table, files: list[str], rows: int, repeat: int) -> None:
    import tensorflow as tf

    from raylake.train.tf import to_tf_dataset

    signature = (
        tf.TensorSpec((None, len(FEATURES)), tf.float32),
        tf.TensorSpec((None,), tf.int32),
    )

    def batches() -> Any:
        for batch in pads.dataset(files).to_batches(columns=COLUMNS, batch_size=BATCH):
            features = np.column_stack([batch.column(c).to_numpy() for c in FEATURES])
            yield features, batch.column("label").to_numpy()

    baseline = tf.data.Dataset.from_generator(batches, output_signature=signature).prefetch(
        tf.data.AUTOTUNE
    )
    for shuffle in (False, True):
        ours = to_tf_dataset(tbl, FEATURES, "label", batch_size=BATCH, shuffle=shuffle)
        t_ours, n_ours, t_base, n_base = compare(
            lambda ours=ours: sum(int(y.shape[0]) for _, y in ours),
            lambda: sum(int(y.shape[0]) for _, y in baseline),
            repeat,
        )
        assert n_ours == n_base == rows
        label = "to_tf_dataset" + (" (shuffle)" if shuffle else "")
        report(f"{label} vs from_generator(pyarrow)", rows, t_ours, t_base)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--dir", default=str(Path(__file__).parent / ".data" / "train"))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--ray-repeat", type=int, default=3)
    parser.add_argument("--skip-ray", action="store_true")
    parser.add_argument("--skip-tf", action="store_true")
    parser.add_argument("--skip-overlap", action="store_true")
    parser.add_argument("--overlap-only", action="store_true")
    parser.add_argument("--overlap-rows", type=int, default=1_000_000)
    parser.add_argument("--latency", type=float, default=20.0, help="ms per S3 request")
    parser.add_argument("--pk-only", action="store_true", help="only the PK vs append case")
    parser.add_argument(
        "--device", default="cpu", help="cuda: every batch copied to the GPU, on both sides"
    )
    args = parser.parse_args()
    device = args.device
    if args.overlap_only:
        feed.run(
            args.overlap_rows, Path(args.dir) / "feed", args.latency, args.repeat, device=device
        )
        return
    # The baseline's zero-copy label is a read-only Arrow view: torch warns once, harmlessly.
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    root = Path(args.dir)
    tbl = build_table(root / "append", args.rows)
    files = data_files(tbl)
    rows = tbl.count()
    head = f"{'case':<52} {'raylake':>18} {'baseline':>18} {'ratio':>8}"
    print(f"\n{head}")

    if args.pk_only:
        pk_case(tbl, root, rows, args.repeat, device)
        return
    baseline = pyarrow_torch(files, device)
    results: dict[str, float] = {}
    for name, workers, shuffle in [
        ("LakeIterableDataset, in-process", 0, False),
        ("LakeIterableDataset, in-process, shuffled", 0, True),
        ("LakeIterableDataset, 2 DataLoader workers", 2, False),
        ("LakeIterableDataset, 2 workers, shuffled", 2, True),
    ]:
        t_ours, n_ours, t_base, n_base = compare(
            lake_torch(tbl, shuffle=shuffle, workers=workers, device=device), baseline, args.repeat
        )
        assert n_ours == n_base == rows, (n_ours, n_base)
        results[name] = t_ours
        report(f"{name} vs pyarrow->torch", rows, t_ours, t_base, ">= 0.8x")

    # DataLoader workers send every batch through shared memory: the same cost for any
    # dataset, so the 2-worker figures are compared with the baseline in 2 workers too.
    t_ours, n_ours, t_base, n_base = compare(
        lake_torch(tbl, shuffle=False, workers=2), PyarrowWorkers.loader(files, 2), args.repeat
    )
    assert n_ours == n_base == rows
    report("LakeIterableDataset vs pyarrow->torch, both in 2 workers", rows, t_ours, t_base)
    t_ceiling = min(_timed(PyarrowWorkers.ceiling(rows, 2)) for _ in range(3))
    report("DataLoader ceiling: 2 workers sending ready tensors", rows, t_ceiling, None)

    pk_case(tbl, root, rows, args.repeat, device)

    for batched in (True, False):
        ours = map_random(tbl, batched=batched)
        ours()  # the first pass fills the cache of decoded pieces
        t_map = min(_timed(ours) for _ in range(3))
        how = "ds[list] via BatchSampler" if batched else "__getitems__ + collate"
        report(f"LakeMapDataset random access, {how}", rows, t_map, None)

    if not args.skip_tf and importlib.util.find_spec("tensorflow") is not None:
        tf_cases(tbl, files, rows, args.repeat)

    if not args.skip_ray:
        ray_cases(tbl, files, rows, results, args.ray_repeat)

    if not args.skip_overlap:
        feed.run(args.overlap_rows, root / "feed", args.latency, args.repeat, device=device)


def pk_case(tbl: raylake.Table, root: Path, rows: int, repeat: int, device: str = "cpu") -> None:
    """A loader epoch over the PK table of the same rows against the append table."""
    pk = build_pk_table(root / "pk", rows)
    t0 = time.perf_counter()
    pk_run = lake_torch(pk, shuffle=False, device=device)
    made = time.perf_counter() - t0
    print(f"LakeIterableDataset over the PK table made in {made:.2f}s (counts the merged rows)")
    plain_run = lake_torch(tbl, shuffle=False, device=device)
    t_pk, n_pk, t_plain, n_plain = compare(pk_run, plain_run, repeat)
    assert n_pk == n_plain == rows
    report("PK table (3 upserts) vs append table, in-process", rows, t_pk, t_plain, ">= 0.7x")


def _timed(fn: Callable[[], int]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def ray_cases(
    tbl: raylake.Table, files: list[str], rows: int, results: dict[str, float], repeat: int
) -> None:
    import ray

    ray_read.avoid_http_import_race()
    ray.cloudpickle.register_pickle_by_value(ray_read)
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"worker_process_setup_hook": ray_read.avoid_http_import_race},
    )
    ray.data.DataContext.get_current().enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    parquet = ray_torch(lambda: ray.data.read_parquet(files, columns=COLUMNS))
    lake = ray_torch(lambda: raylake.read_lake(tbl.uri, columns=COLUMNS))
    zero_copy = lake_ray_torch(tbl.uri)
    t_lake, n_lake, t_pq, n_pq = compare(lake, parquet, repeat)
    assert n_lake == n_pq == rows
    report("read_lake().iter_torch_batches vs read_parquet", rows, t_lake, t_pq, ">= 2x")
    t_zero, n_zero, t_pq2, _ = compare(zero_copy, parquet, repeat)
    assert n_zero == rows
    report("raylake.train.ray.iter_torch_batches(read_lake)", rows, t_zero, t_pq2, ">= 2x")
    t_pq = min(t_pq, t_pq2)
    for name, t_ours in results.items():
        report(f"{name} vs read_parquet", rows, t_ours, t_pq, ">= 5x")
    ray.shutdown()


if __name__ == "__main__":
    main()
