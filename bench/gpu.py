"""Feeding a GPU: one prepared script for a GPU host (docs/benchmarks.md, "Feeding a GPU").

Needs only torch, pyarrow, numpy and raylake (Ray optional: its rows are skipped when
it is missing); nothing is fetched and nothing is written outside a temporary
directory (or ``--out``). Every ratio is against a baseline run in the same process,
the two sides alternated (best of ``--repeat``). Batches of 1024 rows of 16 float32
features stacked into one tensor and the int32 label (bench/_synthetic.py):

  - in-process: LakeIterableDataset(device=...) against pyarrow -> torch -> .to(device);
    shuffled against unshuffled; the same loader on the CPU (no device) against
    pyarrow -> torch, and the device rate against that CPU rate;
  - a primary-key table (3 upserts of 25% of the keys) against the append table;
  - DataLoader workers (``num_workers``, ``pin_memory=True``, the loop copies with
    ``non_blocking=True``) against the loader in-process;
  - Ray: raylake.train.ray.iter_torch_batches on a shard (``streaming_split``, what
    ``ray.train.get_dataset_shard`` returns) against Ray's own
    ``read_parquet(files).iter_torch_batches(device=...)``;
  - overlap: an epoch with a matmul step per batch, calibrated to take as long as
    loading, against the longer of the two alone (bench/feed.py's step), batches of
    1024 and 8192;
  - host-to-device copies of one batch: pageable, pinned, pinned on a side stream
    with an event, and one copy per window of 64 batches cut into views;
  - the loader's ``stats()`` and the device memory it held.

    python bench/gpu.py [--rows 2000000] [--device cuda|cpu] [--quick] [--out DIR]
                        [--repeat 3] [--skip-ray] [--sections feed,pk,workers,ray,overlap,h2d]
                        [--overlap-wait device|stream]

On a machine without a GPU it runs the CPU rows. The last line is one JSON object
with every figure.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow.dataset as pads
import torch
from _synthetic import FEATURES, SCHEMA, build_table, compare, data_files
from feed import calibrate, make_step, steps_alone
from merge import source_rows, upsert_batch

import raylake
from raylake.train import window_process as window_process_module
from raylake.train.torch import LakeIterableDataset

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
BATCH = 1024
COLUMNS = [*FEATURES, "label"]
FIGURES: dict[str, Any] = {}
SECTIONS = ("feed", "pk", "workers", "ray", "overlap", "h2d")  # in the order they run


class Epoch(Protocol):
    """An epoch of a loader (rows in all), with a step per batch when one is given."""

    def __call__(self, step: Callable[[Any], None] | None = None) -> int: ...


OVERLAP_WAIT = ["device"]  # how the overlap rows' step waits for the GPU (--overlap-wait)


def versus(ours: Callable[[], int], theirs: Callable[[], int], repeat: int) -> Any:
    """bench/_synthetic.py's ``compare`` after one warm-up run of each side (the first
    epochs of a process pay for page faults and lazy imports)."""
    ours()
    theirs()
    return compare(ours, theirs, repeat)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def row(
    key: str, name: str, rows: int, ours: float, theirs: float | None, target: str = ""
) -> None:
    """One line of the table; ``ours`` and ``theirs`` are seconds for ``rows`` rows."""
    FIGURES[f"{key}_rows_per_s"] = round(rows / ours)
    if theirs is None:
        print(f"{name:<58} {rows / ours / 1e6:8.2f}M")
        return
    ratio = theirs / ours
    FIGURES[f"{key}_ratio"] = round(ratio, 3)
    print(
        f"{name:<58} {rows / ours / 1e6:8.2f}M {rows / theirs / 1e6:8.2f}M {ratio:7.2f}x  {target}"
    )


def pyarrow_torch(files: list[str], device: str) -> Callable[[], int]:
    """The baseline a training loop writes: pyarrow batches, features stacked, to torch,
    then ``.to(device)``."""

    def run() -> int:
        n = 0
        for batch in pads.dataset(files).to_batches(columns=COLUMNS, batch_size=BATCH):
            features = np.column_stack([batch.column(c).to_numpy() for c in FEATURES])
            x = torch.from_numpy(features)
            y = torch.from_numpy(batch.column("label").to_numpy(zero_copy_only=False).copy())
            if device != "cpu":
                x, y = x.to(device), y.to(device)
            n += len(y)
        sync(device)
        return n

    return run


def lake(tbl: raylake.Table, device: str, **kwargs: Any) -> tuple[Any, Epoch]:
    """An epoch of LakeIterableDataset in-process: each run the next epoch (``set_epoch``,
    as a training loop calls it), with ``step`` on each batch when one is given."""
    kwargs.setdefault("batch_size", BATCH)
    kwargs.setdefault("shuffle", False)
    ds = LakeIterableDataset(
        tbl,
        feature_columns=FEATURES,
        label_column="label",
        device=None if device == "cpu" else device,
        **kwargs,
    )
    epoch = [0]

    def run(step: Callable[[Any], None] | None = None) -> int:
        ds.set_epoch(epoch[0])
        epoch[0] += 1
        n = 0
        for batch in ds:
            n += len(batch[1])
            if step is not None:
                step(batch)
        sync(device)
        return n

    return ds, run


def workers_epoch(tbl: raylake.Table, device: str, workers: int) -> Callable[[], int]:
    """The pattern users write: DataLoader workers, pinned batches, non_blocking copies."""
    from torch.utils.data import DataLoader

    ds = LakeIterableDataset(tbl, feature_columns=FEATURES, label_column="label", shuffle=False)
    on_gpu = device != "cpu"
    loader = DataLoader(
        ds, batch_size=None, num_workers=workers, pin_memory=on_gpu, persistent_workers=True
    )

    def run() -> int:
        n = 0
        for x, y in loader:
            if on_gpu:
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            n += len(y)
        sync(device)
        return n

    return run


def build_pk(
    root: Path, rows: int, buckets: int = 4, options: dict[str, Any] | None = None
) -> raylake.Table:
    base = source_rows(rows)
    pk = raylake.create_table(
        str(root), SCHEMA, primary_key=["id"], buckets=buckets, options=options
    )
    pk.write(base)
    for i in range(3):
        pk.write(upsert_batch(base, 0.25, seed=100 + i))
    return pk


def feed_rows(tbl: raylake.Table, files: list[str], device: str, repeat: int) -> Any:
    ds, ours = lake(tbl, device)
    t_ours, n, t_base, _ = versus(ours, pyarrow_torch(files, device), repeat)
    rows = n
    row("inproc", f"LakeIterableDataset({device}) vs pyarrow->torch->{device}", n, t_ours, t_base,
        ">= 3x on a GPU host; >= 2.5x on the CPU")  # fmt: skip
    _, shuffled = lake(tbl, device, shuffle=True)
    t_shuf, _, t_plain, _ = versus(shuffled, ours, repeat)
    row("shuffled", "  the same, shuffled, vs unshuffled", rows, t_shuf, t_plain, ">= 0.8x")
    if device != "cpu":
        _, cpu = lake(tbl, "cpu")
        t_dev, _, t_cpu, _ = versus(ours, cpu, repeat)
        row("device_vs_cpu", f"  into {device} vs the same loader on the CPU", rows, t_dev, t_cpu,
            ">= 1.0x")  # fmt: skip
        t_cpu, _, t_base_cpu, _ = versus(cpu, pyarrow_torch(files, "cpu"), repeat)
        row("cpu", "LakeIterableDataset(cpu) vs pyarrow->torch", rows, t_cpu, t_base_cpu)
    process, made_there = lake(tbl, device, window_process=True)
    try:
        t_there, _, t_here, _ = versus(made_there, ours, repeat)
    finally:
        process.close()
    row("window_process", "  windows made in another process vs in-process", rows, t_there,
        t_here)  # fmt: skip
    return ds


def pk_rows(tbl: raylake.Table, root: Path, rows: int, device: str, repeat: int) -> None:
    t0 = time.perf_counter()
    pk = build_pk(root / "pk", rows)
    print(f"(wrote the primary-key table in {time.perf_counter() - t0:.1f}s)")
    pk_ds, ours = lake(pk, device)
    append_ds, append = lake(tbl, device)
    t_pk, n_pk, t_append, n_append = versus(ours, append, repeat)
    FIGURES["pk_ratio"] = round((n_pk / t_pk) / (n_append / t_append), 3)
    FIGURES["pk_rows_per_s"] = round(n_pk / t_pk)
    print(f"{'primary-key table vs append table (rows/s)':<58} {n_pk / t_pk / 1e6:8.2f}M "
          f"{n_append / t_append / 1e6:8.2f}M {FIGURES['pk_ratio']:7.2f}x  >= 0.85x")  # fmt: skip
    # Whether the merged pieces' reads hold the epoch: how often a piece was ready when
    # the converter asked for it, and how long the trainer waited (each last epoch).
    for name, ds in (("primary key", pk_ds), ("append", append_ds)):
        print(f"  stats() of the last {name} epoch: {ds.stats()}")


def worker_rows(tbl: raylake.Table, device: str, repeat: int, workers: int) -> None:
    run = workers_epoch(tbl, device, workers)
    _, inproc = lake(tbl, device)
    t_w, n, t_in, _ = versus(run, inproc, repeat)
    row("workers", f"DataLoader({workers} workers, pin_memory) vs in-process", n, t_w, t_in)


def ray_rows(uri: str, files: list[str], device: str, repeat: int, cpus: int) -> None:
    """The Ray Train shape: one shard (``streaming_split``, as ``get_dataset_shard``
    returns it) made once and read once per epoch; its first epoch, which starts the
    split's coordinator, is the warm-up."""
    if importlib.util.find_spec("ray") is None:
        print("(Ray is not installed: its rows are skipped)")
        return
    import logging

    import ray

    from raylake.train.ray import iter_torch_batches

    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    try:
        context = ray.data.DataContext.get_current()  # imports ray.data, sets its logging
        for name in ("ray", "ray.data"):
            logging.getLogger(name).setLevel(logging.ERROR)
        context.enable_progress_bars = False
        context.print_on_execution_start = False
        parquet = ray.data.read_parquet(files).select_columns(COLUMNS)
        shard = raylake.read_lake(uri, columns=COLUMNS).streaming_split(1)[0]

        def theirs() -> int:
            batches = parquet.iter_torch_batches(batch_size=BATCH, device=device)
            n = sum(len(b["label"]) for b in batches)
            sync(device)
            return n

        def ours() -> int:
            batches = iter_torch_batches(
                shard, feature_columns=FEATURES, label_column="label", batch_size=BATCH,
                device=device,
            )  # fmt: skip
            n = sum(len(y) for _, y in batches)
            sync(device)
            return n

        def blocks() -> int:
            arrow = shard.iter_batches(batch_size=None, batch_format="pyarrow")
            return sum(b.num_rows for b in arrow)

        t_ours, n, t_theirs, _ = versus(ours, theirs, repeat)
        row("ray", f"raylake.train.ray.iter_torch_batches(shard, {device}) vs Ray's", n,
            t_ours, t_theirs, ">= 15x on a GPU host")  # fmt: skip
        t_ours, n, t_blocks, _ = compare(ours, blocks, repeat)
        row("ray_blocks", "  the same vs the shard's Arrow blocks alone (Ray's delivery)", n,
            t_ours, t_blocks, "the ceiling of any converter")  # fmt: skip
    finally:
        ray.shutdown()


def overlap_rows(
    tbl: raylake.Table, device: str, batch: int, repeat: int, window_process: bool = False,
    niceness: int | None = None,
) -> None:  # fmt: skip
    """An epoch with a step per batch against the longer of loading and stepping alone,
    the three alternated in each round (a GPU's clocks drift over a run): the median of
    the rounds' ratios. ``niceness``: the window process's, instead of its default."""
    default = window_process_module.CHILD_NICENESS
    if niceness is not None:
        window_process_module.CHILD_NICENESS = niceness  # read as the child is spawned
    suffix = "_process" if window_process else ""
    suffix += "" if niceness is None else f"_nice{niceness}"
    try:
        ds, load = lake(tbl, device, batch_size=batch, window_process=window_process)
        try:
            _overlap(ds, load, device, batch, repeat, suffix)
        finally:
            ds.close()
    finally:
        window_process_module.CHILD_NICENESS = default


def _overlap(ds: Any, load: Epoch, device: str, batch: int, repeat: int,
             suffix: str) -> None:  # fmt: skip
    t_load = min(timed(load) for _ in range(repeat))
    sample = next(iter(ds))
    steps = len(ds)
    n = calibrate(t_load, sample, steps, device, OVERLAP_WAIT[0])
    step = make_step(n, device, OVERLAP_WAIT[0])

    rounds = []
    for _ in range(max(repeat, 5)):
        loads, alone, together = (
            timed(load),
            steps_alone(step, sample, steps),
            timed(lambda: load(step)),
        )
        rounds.append((together / max(loads, alone), loads, alone, together))
    ratio, t_load, t_step, t_both = sorted(rounds)[len(rounds) // 2]
    key = f"overlap_{batch}{suffix}"
    FIGURES[key] = round(ratio, 3)
    FIGURES[f"{key}_rounds"] = [round(r[0], 3) for r in rounds]
    FIGURES[f"{key}_wait_fraction"] = round(ds.stats().wait_fraction, 3)
    FIGURES[f"{key}_first_wait_s"] = round(ds.stats().first_wait_s, 4)
    where = ", windows made in another process" if suffix else ""
    where += f" at nice {suffix.rsplit('nice', 1)[1]}" if "nice" in suffix else ""
    print(f"overlap, batch {batch}{where}: load {t_load:.3f}s, step {t_step:.3f}s (matmul {n}), "
          f"both {t_both:.3f}s = {ratio:.2f}x the longer (<= 1.1x on a GPU; median of "
          f"{', '.join(f'{r[0]:.2f}' for r in rounds)}); the trainer waited "
          f"{ds.stats().wait_fraction:.0%} of the last epoch, "
          f"{ds.stats().first_wait_s * 1e3:.0f} ms of it for the first batch")  # fmt: skip
    if suffix:
        took, held, _ = ds._maker.last_pass
        FIGURES[f"{key}_child"] = [round(took, 4), round(held, 4)]
        print(f"  the child's last pass: {took:.3f}s, of which {held:.3f}s waiting for a slot")


def timed(run: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    run()
    return time.perf_counter() - t0


def copy_rows(device: str, batches: int = 2048) -> None:
    """Host-to-device time per batch of 1024 x 16 float32, four ways."""
    x = torch.rand(BATCH, 16)
    pinned = x.pin_memory()
    window = torch.rand(64 * BATCH, 16).pin_memory()
    stream = torch.cuda.Stream()

    def per_batch(fn: Callable[[], object], n: int = batches) -> float:
        fn()
        sync(device)
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        sync(device)
        return (time.perf_counter() - t0) / n

    def side() -> None:
        with torch.cuda.stream(stream):
            y = pinned.to(device, non_blocking=True)
            event = torch.cuda.Event()
            event.record(stream)
        torch.cuda.current_stream().wait_event(event)
        y.record_stream(torch.cuda.current_stream())

    def windowed() -> None:
        y = window.to(device, non_blocking=True)
        for i in range(0, len(y), BATCH):
            y[i : i + BATCH]

    figures = {
        "pageable": per_batch(lambda: x.to(device)),
        "pinned": per_batch(lambda: pinned.to(device, non_blocking=True)),
        "side_stream": per_batch(side),
        "window_of_64": per_batch(windowed, batches // 64) / 64,
    }
    for k, v in figures.items():
        FIGURES[f"h2d_{k}_us"] = round(v * 1e6, 2)
    print(
        "host-to-device per batch: "
        + ", ".join(f"{k} {v * 1e6:.1f} us" for k, v in figures.items())
    )


def section(name: str, run: Callable[[], object]) -> None:
    """One part of the run; a failure is printed and recorded, and the rest still runs
    (a GPU host's time is short: one broken row must not cost the others)."""
    t0 = time.perf_counter()
    try:
        run()
    except Exception as exc:  # reported; the next section runs
        traceback.print_exc()
        FIGURES[f"{name}_error"] = repr(exc)
    FIGURES[f"{name}_seconds"] = round(time.perf_counter() - t0, 1)


def feed_section(tbl: raylake.Table, files: list[str], device: str, repeat: int) -> None:
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    ds = feed_rows(tbl, files, device, repeat)
    stats = ds.stats()
    FIGURES["stats"] = stats.as_dict()
    if device.startswith("cuda"):
        FIGURES["cuda_peak_allocated"] = torch.cuda.max_memory_allocated()
        print(f"torch.cuda peak allocated {FIGURES['cuda_peak_allocated'] / 1e6:.1f} MB")
    print(f"stats() of the last in-process epoch: {stats}")


def overlap_section(tbl: raylake.Table, device: str, repeat: int) -> None:
    threads = torch.get_num_threads()
    if device == "cpu":
        torch.set_num_threads(1)  # the step on one core, as bench/feed.py runs it
    try:
        for batch in (BATCH, 8 * BATCH):
            for window_process in (False, True):
                overlap_rows(tbl, device, batch, repeat, window_process)
            # The child at the trainer's own priority, for the lowered one's effect.
            overlap_rows(tbl, device, batch, repeat, True, niceness=0)
    finally:
        torch.set_num_threads(threads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=None, help="default 2M (500K with --quick)")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda if present)")
    parser.add_argument("--quick", action="store_true", help="fewer rows and repeats")
    parser.add_argument(
        "--out", default=None, help="directory for the tables (default: a temp dir)"
    )
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--skip-ray", action="store_true")
    parser.add_argument(
        "--overlap-wait",
        choices=("device", "stream"),
        default="device",
        help="the overlap step waits with torch.cuda.synchronize() (every stream) or "
        "with .item() (the trainer's stream, as a loop reading its loss)",
    )
    parser.add_argument(
        "--sections",
        default=None,
        help=f"comma-separated subset of {','.join(SECTIONS)} (default: all)",
    )
    args = parser.parse_args()
    wanted = set(SECTIONS if args.sections is None else args.sections.split(","))
    if wanted - set(SECTIONS):
        parser.error(f"--sections: unknown {sorted(wanted - set(SECTIONS))}; known: {SECTIONS}")
    if args.skip_ray:
        wanted.discard("ray")
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda, but torch finds no CUDA device")
    OVERLAP_WAIT[0] = args.overlap_wait
    FIGURES["overlap_wait"] = args.overlap_wait
    rows = args.rows or (500_000 if args.quick else 2_000_000)
    repeat = args.repeat or (2 if args.quick else 3)
    cores = os.cpu_count() or 1
    FIGURES.update(device=device, rows=rows, cores=cores, torch=torch.__version__)
    if device.startswith("cuda"):
        FIGURES["gpu"] = torch.cuda.get_device_name()
    with tempfile.TemporaryDirectory(dir=args.out) as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        tbl = build_table(root / "append", rows)
        files = data_files(tbl)
        print(f"\n{'rows/s, ours vs baseline':<58} {'ours':>9} {'base':>9} {'ratio':>8}")
        workers = 2 if args.quick or cores < 8 else 4
        ray_repeat = 1 if args.quick else repeat
        runs: dict[str, Callable[[], object]] = {
            "feed": lambda: feed_section(tbl, files, device, repeat),
            "pk": lambda: pk_rows(tbl, root, rows, device, repeat),
            "workers": lambda: worker_rows(tbl, device, repeat, workers),
            "ray": lambda: ray_rows(tbl.uri, files, device, ray_repeat, min(cores, 8)),
            "overlap": lambda: overlap_section(tbl, device, repeat),
            "h2d": lambda: copy_rows(device) if device.startswith("cuda") else None,
        }
        for name in SECTIONS:
            if name in wanted:
                section(name, runs[name])
        FIGURES["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(FIGURES))


if __name__ == "__main__":
    main()
