"""How late a trainer's thread wakes beside the loader (issue 16): the OS, not the GIL.

A trainer whose step waits (the host's side of a GPU step, ``--step wait`` of
bench/feed.py) sleeps once per batch and must be running again when the step ends.
This script times ``--steps`` sleeps of ``--wait-us`` microseconds on the main thread
while something else keeps the cores busy, and prints the sleeps' total against the
same sleeps on an idle machine, their median and 99th percentile, and the rows per
second the loader delivered meanwhile:

  - ``idle``: nothing else runs;
  - ``busy threads``: two threads of this process sort numpy arrays (the GIL released,
    the cores full, no thread ever sleeping);
  - ``loader, this process``: epochs of ``LakeIterableDataset`` (the synthetic table of
    bench/feed.py, batches of 1024, shuffled) on a thread of this process;
  - ``loader, other process``: the same epochs in a process of their own, so the
    sleeping thread shares no GIL with them;
  - ``... SCHED_IDLE``: that process at the idle scheduling class (Linux), which runs
    only when no other thread wants a core.

If the loader's extra delay came from the GIL, the other process would not add it;
if it came from the cores being full, the busy threads would add it too.

    python bench/wakeup.py [--rows 4000000] [--steps 4000] [--wait-us 80] [--repeat 3]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from _synthetic import FEATURES
from feed import build

import raylake


def sleeps(steps: int, wait: float) -> np.ndarray:
    """The measured length of ``steps`` sleeps of ``wait`` seconds, one after another."""
    took = np.empty(steps)
    for i in range(steps):
        t0 = time.perf_counter()
        time.sleep(wait)
        took[i] = time.perf_counter() - t0
    return took


def epochs(uri: str, stop: Any, done: Any, idle_class: bool = False) -> None:
    """Loader epochs until ``stop`` is set, their batches counted in ``done`` every 64
    (run in a thread or a process)."""
    if idle_class:  # threads made later (pyarrow's pools among them) inherit the class
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    from raylake.train.torch import LakeIterableDataset

    ds = LakeIterableDataset(
        uri, feature_columns=FEATURES, label_column="label", batch_size=1024, shuffle=True
    )
    while not stop.is_set():
        for i, _ in enumerate(ds, 1):
            if i % 64 == 0:
                with done.get_lock():
                    done.value += 64


@contextmanager
def nothing() -> Iterator[Callable[[], int]]:
    yield lambda: 0


@contextmanager
def busy_threads(count: int = 2) -> Iterator[Callable[[], int]]:
    stop = threading.Event()
    values = np.random.default_rng(0).random(2_000_000)

    def sort() -> None:
        while not stop.is_set():
            np.sort(values)

    threads = [threading.Thread(target=sort, daemon=True) for _ in range(count)]
    for t in threads:
        t.start()
    try:
        yield lambda: 0
    finally:
        stop.set()
        for t in threads:
            t.join()


@contextmanager
def loader(uri: str, process: bool, idle_class: bool = False) -> Iterator[Callable[[], int]]:
    ctx = multiprocessing.get_context("spawn")
    stop, done = ctx.Event(), ctx.Value("i", 0)
    args = (uri, stop, done, idle_class)
    worker: Any = (
        ctx.Process(target=epochs, args=args, daemon=True)
        if process
        else threading.Thread(target=epochs, args=args, daemon=True)
    )
    worker.start()
    while done.value == 0:  # warm: the dataset is made and reading
        time.sleep(0.05)
    try:
        start = done.value
        yield lambda: done.value - start
    finally:
        stop.set()
        worker.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--wait-us", type=float, default=80.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    wait = args.wait_us / 1e6
    with tempfile.TemporaryDirectory() as tmp:
        uri = str(Path(tmp) / "feed")
        build(uri, args.rows)
        raylake.open_table(uri)
        cases: dict[str, Callable[[], Any]] = {
            "idle": nothing,
            "busy threads (2, GIL released)": busy_threads,
            "loader, this process": lambda: loader(uri, process=False),
            "loader, other process": lambda: loader(uri, process=True),
        }
        if hasattr(os, "SCHED_IDLE"):
            cases["loader, other process, SCHED_IDLE"] = lambda: loader(uri, True, True)
        print(
            f"{args.steps} sleeps of {args.wait_us:g} us on the main thread, "
            f"{os.cpu_count()} cores; medians of {args.repeat}"
        )
        print(
            f"{'beside':<36} {'sleeps':>8} {'/ idle':>7} {'p50':>7} {'p99':>7} {'loader rows/s':>14}"
        )
        base = None
        for name, case in cases.items():
            totals, p50, p99, done = [], [], [], []
            with case() as finished:
                for _ in range(args.repeat):
                    before = finished()
                    took = sleeps(args.steps, wait)
                    totals.append(took.sum())
                    p50.append(np.median(took))
                    p99.append(np.percentile(took, 99))
                    done.append((finished() - before) / took.sum())
            total = statistics.median(totals)
            base = base or total
            print(
                f"{name:<36} {total:>7.3f}s {total / base:>6.2f}x "
                f"{statistics.median(p50) * 1e6:>5.0f}us {statistics.median(p99) * 1e6:>5.0f}us "
                f"{statistics.median(done) * 1024:>14,.0f}"
            )


if __name__ == "__main__":
    main()
