"""Where an epoch of the loader spends its time, on the CPU and on a device.

A diagnostic beside bench/gpu.py, for the rows where the device epoch is slower than
the same loader on the CPU: it times in-process epochs of ``LakeIterableDataset``
under a few settings (CPU, the device, shuffled, smaller and larger ``feed_bytes``),
prints each epoch's ``stats()``, then profiles one epoch on each side twice: with
cProfile (on Python 3.12 and later it sees every thread, so the window thread's
packing, pinning and copying show beside the trainer's waits) and with
``torch.profiler`` (the tensor operations and, on a GPU, the copies and kernels).

    python bench/gpu_profile.py [--rows 2000000] [--device cuda|cpu] [--top 25]
                                [--overlap | --contention | --process]

``--contention`` times the trainer's steps alone and beside other work: the loader on a
thread of this process (on the device, and on the CPU), the loader in another process,
a thread of large numpy copies (which do not hold the interpreter's lock) and a thread
of pure Python (which does): what slows a step, the lock or the machine.

``--process`` times the overlap case with ``window_process=True``, the trainer's
thread's time in the window iterator split into its parts, after a gap and back to back,
and each wait for a window by the window's index in the epoch (the first window's wait
apart from waits inside the pass).

``--pk`` times the primary-key epoch against the append one for a few layouts of the
same rows (bench/gpu.py's 4 buckets, 16 buckets, 4 buckets of smaller row groups) and
a whole-table read of each: whether the merged read's parallelism or its work bounds it.

``--overlap`` instead times bench/gpu.py's overlap case (a step per batch that the host
waits for) under a few settings, with the window thread's wall and CPU time per window
beside each: where its wall time exceeds its CPU time while the trainer steps, the
window thread waits (for the interpreter's lock, or for a device copy).
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import multiprocessing
import os
import pstats
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _synthetic import FEATURES, build_table
from feed import calibrate, make_step, steps_alone
from gpu import build_pk, lake, sync, timed

import raylake.table.pk.group_readers as group_readers
import raylake.train.fill as fill
import raylake.train.window_process as window_process
import raylake.train.windows as windows
from raylake.train.source import LakeSource

MiB = 1 << 20


def best_seconds(run: Callable[[], int], repeat: int) -> float:
    run()  # warm-up: page faults, lazy imports, the pinned ring
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def settings(device: str) -> list[tuple[str, str, dict[str, Any]]]:
    rows = [("cpu", "cpu", {}), ("cpu shuffled", "cpu", {"shuffle": True})]
    if device != "cpu":
        rows += [
            (device, device, {}),
            (f"{device} shuffled", device, {"shuffle": True}),
            (f"{device} feed_bytes=32MiB", device, {"feed_bytes": 32 * MiB}),
            (f"{device} feed_bytes=1GiB", device, {"feed_bytes": 1024 * MiB}),
        ]
    return rows


def profile_epoch(tbl: Any, device: str, top: int, what: str = "", with_torch: bool = True) -> None:
    _, run = lake(tbl, device)
    run()
    profiler = cProfile.Profile()
    profiler.enable()
    run()
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats("raylake", top)  # the loader's own parts
    print(f"--- cProfile of one {what}epoch, {device} (every thread on Python >= 3.12) ---")
    print(out.getvalue())
    if not with_torch:
        return
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        run()
    print(f"--- torch.profiler of one epoch, {device} ---")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=top))


def _timed_next(it: Iterator[Any], spent: list[float]) -> Any:
    """``next(it, None)``, its wall and CPU time added to ``spent``."""
    wall, cpu = time.perf_counter(), time.thread_time()
    item = next(it, None)
    spent[0] += time.perf_counter() - wall
    spent[1] += time.thread_time() - cpu
    return item


class WindowClock:
    """The window thread's time per window (wall and CPU), split into making the numpy
    window (reading included) and staging it (pack, copy): stage_all, wrapped."""

    def __init__(self) -> None:
        self.original = windows.stage_all
        self.make = [0.0, 0.0]
        self.stage = [0.0, 0.0]
        self.windows = 0

    def __enter__(self) -> WindowClock:
        clock = self

        def stage_all(blocks: Iterator[Any], to_tensors: Any, stager: Any) -> Iterator[Any]:
            blocks = iter(blocks)
            try:
                while (block := _timed_next(blocks, clock.make)) is not None:
                    staged = stager(to_tensors(block))
                    while (window := _timed_next(staged, clock.stage)) is not None:
                        clock.windows += 1
                        yield window
            finally:
                stager.close()
                close = getattr(blocks, "close", None)
                if close is not None:
                    close()

        windows.stage_all = stage_all  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        windows.stage_all = self.original

    def __str__(self) -> str:
        n = max(self.windows, 1)
        return (
            f"window thread per window: make {self.make[0] / n * 1e3:.2f} ms wall "
            f"/ {self.make[1] / n * 1e3:.2f} ms CPU, stage {self.stage[0] / n * 1e3:.2f} "
            f"/ {self.stage[1] / n * 1e3:.2f} ({self.windows} windows)"
        )


def overlap_probe(tbl: Any, device: str, repeat: int) -> None:
    """bench/gpu.py's overlap case under a few settings (module docstring)."""
    for shuffle in (False, True):
        _, epoch = lake(tbl, device, shuffle=shuffle)
        epoch()
        with WindowClock() as clock:
            took = min(best_seconds(epoch, 1) for _ in range(repeat))
        print(f"epoch alone, shuffle={shuffle}: {took:.3f}s; {clock}")
    ds, load = lake(tbl, device)
    t_load = min(best_seconds(load, 1) for _ in range(repeat))
    for number in range(3):  # the next epoch's first piece was read by the pass before
        ds.set_epoch(100 + number)
        t0 = time.perf_counter()
        it = iter(ds)
        t1 = time.perf_counter()
        next(it)
        t2 = time.perf_counter()
        for _ in it:
            pass
        print(f"start of an epoch: iter() {(t1 - t0) * 1e3:.1f} ms, first batch after "
              f"{(t2 - t0) * 1e3:.1f} ms")  # fmt: skip
    sample = next(iter(ds))
    steps = len(ds)
    n = calibrate(t_load, sample, steps, device)
    waits = make_step(n, device)
    default = sys.getswitchinterval()
    # name: (step, switch interval, the loader's keywords, fill threads)
    cases: dict[str, tuple[Callable[[Any], None], float, dict[str, Any], int | None]] = {
        "host waits each step": (waits, default, {}, None),
        "the same, switch interval 0.1 ms": (waits, 1e-4, {}, None),
        "the same, loader_threads=4": (waits, default, {"loader_threads": 4}, None),
        "the same, loader_threads=8": (waits, default, {"loader_threads": 8}, None),
        "the same, loader_threads=12": (waits, default, {"loader_threads": 12}, None),
        "the same, no fill threads": (waits, default, {}, 0),
        "host waits each step, again": (waits, default, {}, None),
    }
    if device != "cpu":
        mm = torch.rand(n, n, device=device)
        out = torch.empty(n, n, device=device)

        def queued(batch: Any) -> None:  # no wait per step: the launch queue throttles
            torch.mm(mm, mm, out=out)
            out[0, 0] += batch[0][0, 0]

        cases["no wait per step"] = (queued, default, {}, None)
    threads = fill.FILL_THREADS
    for name, (step, switch, kwargs, fill_threads) in cases.items():
        ds, load = lake(tbl, device, **kwargs)
        sys.setswitchinterval(switch)
        fill.FILL_THREADS = threads if fill_threads is None else fill_threads
        try:
            t_step = min(steps_alone(step, sample, steps) for _ in range(repeat)) + 0.0
            sync(device)

            def both(step: Callable[[Any], None] = step, ds: Any = ds) -> int:
                for b in ds:
                    step(b)
                sync(device)
                return 0

            with WindowClock() as alone:
                t_alone = min(best_seconds(load, 1) for _ in range(repeat))
            with WindowClock() as clock:
                t_both = min(best_seconds(both, 1) for _ in range(repeat))
            stats = ds.stats()
        finally:
            sys.setswitchinterval(default)
            fill.FILL_THREADS = threads
        print(
            f"{name:<36} load {t_alone:.3f}s step {t_step:.3f}s both {t_both:.3f}s = "
            f"{t_both / max(t_alone, t_step):.2f}x; waited {stats.wait_fraction:.0%} "
            f"(steps took {stats.elapsed_s - stats.wait_s:.3f}s), first "
            f"{stats.first_wait_s * 1e3:.0f} ms\n    alone: {alone}\n    both:  {clock}"
        )
    print(f"(threads: {threading.active_count()} alive)")


def _load_forever(uri: str, stop: Any) -> None:
    """Loader epochs on the CPU until ``stop`` is set (in another process)."""
    from raylake.train import LakeIterableDataset

    ds = LakeIterableDataset(uri, feature_columns=FEATURES, label_column="label", shuffle=False)
    while not stop.is_set():
        for _ in ds:
            pass


def contention_probe(tbl: Any, device: str, repeat: int) -> None:
    """The trainer's steps alone and beside other work (module docstring)."""
    ds, load = lake(tbl, device)
    _, load_cpu = lake(tbl, "cpu")
    # Batches of a whole window: the loop that takes them runs almost no Python, so what
    # the steps feel is the loader's own threads, not a Python loop beside them.
    _, load_windows = lake(tbl, device, batch_size=1 << 16)
    elsewhere, load_elsewhere = lake(tbl, device, batch_size=1 << 16, window_process=True)
    # The same with the child at the trainer's own priority (it reads the value as it
    # is spawned, at its first pass).
    level, window_process.CHILD_NICENESS = window_process.CHILD_NICENESS, 0
    try:
        even, load_even = lake(tbl, device, batch_size=1 << 16, window_process=True)
        load_even()
    finally:
        window_process.CHILD_NICENESS = level
    t_load = best_seconds(load, repeat)
    sample = next(iter(ds))
    steps = len(ds)
    step = make_step(calibrate(t_load, sample, steps, device), device)
    big = np.ones(1 << 22, dtype=np.float32)
    into = np.empty_like(big)

    def forever(work: Callable[[], object]) -> Callable[[threading.Event], None]:
        def run(stop: threading.Event) -> None:
            while not stop.is_set():
                work()

        return run

    def beside(run: Callable[[threading.Event], None] | None, share: int = 1) -> float:
        """The steps' time (``1 / share`` of them, scaled) while ``run`` works."""
        count = max(1, steps // share)
        if run is None:
            return min(steps_alone(step, sample, count) for _ in range(repeat)) * share
        stop = threading.Event()
        thread = threading.Thread(target=run, args=(stop,))
        thread.start()
        time.sleep(0.05)
        try:
            return min(steps_alone(step, sample, count) for _ in range(repeat)) * share
        finally:
            stop.set()
            thread.join()

    def other_process() -> float:
        spawn = multiprocessing.get_context("spawn")
        stop = spawn.Event()
        child = spawn.Process(target=_load_forever, args=(tbl.uri, stop))
        child.start()
        time.sleep(3.0)  # its imports and first epoch
        try:
            return beside(None)
        finally:
            stop.set()
            child.join()

    alone = beside(None)
    cases = {
        f"loader ({device}) on a thread here": lambda: beside(forever(load)),
        "loader (cpu) on a thread here": lambda: beside(forever(load_cpu)),
        f"loader ({device}), 65,536-row batches": lambda: beside(forever(load_windows)),
        f"loader ({device}), 65,536, window_process": lambda: beside(forever(load_elsewhere)),
        f"loader ({device}), 65,536, window_process, nice 0": lambda: beside(forever(load_even)),
        "loader (cpu) in another process": other_process,
        "numpy copies of 16 MB on a thread": lambda: beside(forever(lambda: np.copyto(into, big))),
        "nothing (again)": lambda: beside(None),
        # last, on a twentieth of the steps: each waits for the lock (about 5 ms)
        "pure Python on a thread": lambda: beside(forever(lambda: sum(range(2000))), 20),
    }
    print(f"{steps} steps alone: {alone:.3f}s")
    for name, run in cases.items():
        took = run()
        print(f"  beside {name:<40} {took:.3f}s = {took / alone:.2f}x")
    elsewhere.close()
    even.close()


class TrainerClock:
    """With ``window_process=True``: the trainer's thread's wall time in the window
    iterator's parts (raylake/train/window_process.py ``WindowsFromProcess``, wrapped):
    its whole ``next()``, waiting for a message, and queueing a window's copy."""

    PARTS = {"__next__": "next", "_receive": "receive", "_window": "copy"}

    def __init__(self) -> None:
        self.spent = dict.fromkeys(self.PARTS.values(), 0.0)
        self.calls = dict.fromkeys(self.PARTS.values(), 0)
        self.blocked = 0.0  # of "receive": a blocking one (no window was ready)
        # Each blocking wait of more than 0.2 ms: (windows handed to the trainer before
        # it in the epoch, ms), to tell a pass's first window from waits inside it.
        self.waits: list[tuple[int, float]] = []

    def __enter__(self) -> TrainerClock:
        cls = window_process.WindowsFromProcess
        self.originals = {name: cls.__dict__[name] for name in self.PARTS}
        for name, part in self.PARTS.items():
            setattr(cls, name, self._timed(self.originals[name], part))
        return self

    def _timed(self, method: Callable[..., Any], part: str) -> Callable[..., Any]:
        clock = self

        def timed(this: Any, *args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return method(this, *args, **kwargs)
            finally:
                took = time.perf_counter() - start
                clock.spent[part] += took
                clock.calls[part] += 1
                if part == "receive" and kwargs.get("block", args[:1] == (True,)):
                    clock.blocked += took
                    if took > 2e-4:
                        clock.waits.append((clock.calls["copy"], took * 1e3))

        return timed

    def __exit__(self, *exc: object) -> None:
        for name, method in self.originals.items():
            setattr(window_process.WindowsFromProcess, name, method)

    def __str__(self) -> str:
        parts = ", ".join(
            f"{part} {self.spent[part] * 1e3:.1f} ms / {self.calls[part]}" for part in self.spent
        )
        waits = ", ".join(f"#{i} {ms:.1f}" for i, ms in self.waits[:12])
        more = f" and {len(self.waits) - 12} more" if len(self.waits) > 12 else ""
        return (
            f"trainer's thread in the window iterator: {parts} (blocked "
            f"{self.blocked * 1e3:.1f} ms; waits over 0.2 ms by window, ms: {waits or 'none'}{more})"
        )


def process_probe(tbl: Any, device: str, repeat: int, window_rows: int | None) -> None:
    """bench/gpu.py's overlap case with ``window_process=True``, the trainer's thread
    timed per part, after a gap (the child made the pass ahead) and back to back.
    ``window_rows``: the rows of a window (unshuffled, ``shuffle_window`` only bounds
    them), for the share of the per-window calls."""
    kwargs = {} if window_rows is None else {"shuffle_window": window_rows}
    ds, load = lake(tbl, device, window_process=True, **kwargs)
    load()
    t_load = min(best_seconds(load, 1) for _ in range(repeat))
    slots = list(ds._maker.slots.values())
    print(f"{len(slots)} slots, pinned: {[s.tensor.is_pinned() for s in slots]}; "
          f"load alone {t_load:.3f}s, {ds.stats()}")  # fmt: skip
    sample = next(iter(ds))
    steps = len(ds)
    for wait in ("device", "stream"):
        step = make_step(calibrate(t_load, sample, steps, device, wait), device, wait)
        for number in range(repeat):
            t_alone = min(steps_alone(step, sample, steps) for _ in range(2))
            for when in ("after the steps alone", "back to back"):
                with TrainerClock() as clock:
                    t_both = timed(functools.partial(load, step))
                took, held, ahead = ds._maker.last_pass
                print(f"wait={wait} #{number} {when}: both {t_both:.3f}s = "
                      f"{t_both / max(t_load, t_alone):.2f}x (steps alone {t_alone:.3f}s); "
                      f"{clock}; child's pass {took:.3f}s, {held:.3f}s waiting for a slot, "
                      f"made ahead {ahead}\n    {ds.stats()}")  # fmt: skip
    profiler = cProfile.Profile()
    profiler.enable()
    load(step)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(20)
    print("--- cProfile of one epoch with steps (wait=stream), the trainer's process ---")
    print(out.getvalue())
    ds.close()


def pk_probe(tbl: Any, root: Path, rows: int, device: str, repeat: int) -> None:
    """The primary-key epoch (3 upserts of 25%) against the append one, per layout."""
    _, append = lake(tbl, device)
    t_append = best_seconds(append, repeat)
    t_read = min(timed(tbl.to_arrow) for _ in range(repeat))
    print(f"append: epoch {rows / t_append / 1e6:.2f}M rows/s, to_arrow {t_read:.3f}s")
    layouts = {
        "4 buckets": (4, None),
        "16 buckets": (16, None),
        "4 buckets, row groups of 65,536": (4, {"write.row-group-rows": 65536}),
    }
    for name, (buckets, options) in layouts.items():
        pk = build_pk(root / name.replace(" ", "_").replace(",", ""), rows, buckets, options)
        ds, load = lake(pk, device)
        load()  # a warm-up epoch, then the two alternated
        t_pk = float("inf")
        for _ in range(repeat):
            t_pk, t_append = min(t_pk, timed(load)), min(t_append, timed(append))
        t_pk_read = min(timed(pk.to_arrow) for _ in range(repeat))
        print(f"{name:<34} epoch {rows / t_pk / 1e6:6.2f}M rows/s = {t_append / t_pk:.2f}x "
              f"append; to_arrow {t_pk_read:.3f}s = {t_read / t_pk_read:.2f}x append's; "
              f"{ds.stats()}")  # fmt: skip
        ds.close()
    # The merged reads' row groups on a few threads (the default on 8 cores or more)
    # against one after another, alternated over one table.
    pk = build_pk(root / "4 buckets, groups", rows)
    _, load_pk = lake(pk, device)
    default = group_readers.GROUP_THREADS
    best = {default: float("inf"), 0: float("inf")}
    whole = dict(best)  # the same for a whole-table to_arrow
    for _ in range(repeat + 1):
        for threads in best:
            group_readers.GROUP_THREADS = threads
            load_pk()  # the first epoch after a switch is not counted
            best[threads] = min(best[threads], timed(load_pk))
            whole[threads] = min(whole[threads], timed(pk.to_arrow))
            t_append = min(t_append, timed(append))
    group_readers.GROUP_THREADS = default
    print(f"row groups on {default} threads: {rows / best[default] / 1e6:.2f}M rows/s = "
          f"{t_append / best[default]:.2f}x append; one after another: "
          f"{rows / best[0] / 1e6:.2f}M rows/s = {t_append / best[0]:.2f}x append; "
          f"{best[0] / best[default]:.2f}x faster; to_arrow {whole[default]:.3f}s against "
          f"{whole[0]:.3f}s one after another")  # fmt: skip
    # The same epochs with every piece read beforehand and held (the reads excluded):
    # whether the merged reads or the pipeline after them hold the epoch.
    pk = build_pk(root / "4 buckets, held", rows)
    original = LakeSource.read_piece
    held: dict[tuple[str, int], Any] = {}

    def read_once(self: LakeSource, index: int, **kwargs: Any) -> Any:
        key = (self.uri, index)
        if key not in held:
            held[key] = original(self, index, **kwargs)
        return held[key]

    LakeSource.read_piece = read_once  # type: ignore[method-assign]
    try:
        _, load_pk = lake(pk, device)
        _, load_append = lake(tbl, device)
        t_pk, t_append = best_seconds(load_pk, repeat), best_seconds(load_append, repeat)
        print(f"pieces held in memory: primary key {rows / t_pk / 1e6:.2f}M rows/s, append "
              f"{rows / t_append / 1e6:.2f}M rows/s: {t_append / t_pk:.2f}x")  # fmt: skip
    finally:
        LakeSource.read_piece = original  # type: ignore[method-assign]
    profile_epoch(pk, device, 25, "primary-key ", with_torch=False)


def copy_probe(device: str) -> None:
    """The host's time to queue one window's host-to-device copy (``non_blocking``),
    from pinned memory of torch's own, from shared memory registered with CUDA (what
    ``window_process=True`` maps) and from pageable memory: a queued copy returns at
    once, a synchronous one takes the transfer's time."""

    from raylake.train.window_process import MappedSlot, shared_dir

    for nbytes in (4 << 20, 16 << 20, 64 << 20):
        path = f"{shared_dir()}/raylake-probe-{os.getpid()}"
        with open(path, "wb") as f:
            f.truncate(nbytes)
        slot = MappedSlot(path, nbytes, register=True)
        sources = {
            "torch pinned": torch.empty(nbytes, dtype=torch.uint8, pin_memory=True),
            "registered shm": slot.tensor,
            "pageable": torch.empty(nbytes, dtype=torch.uint8),
        }
        stream = torch.cuda.Stream()
        line = []
        for name, host in sources.items():
            host.fill_(1)
            for _ in range(3):
                host.to(device, non_blocking=True)
            torch.cuda.synchronize()
            queued = []
            for _ in range(10):
                start = time.perf_counter()
                with torch.cuda.stream(stream):
                    host.to(device, non_blocking=True)
                queued.append(time.perf_counter() - start)
                torch.cuda.synchronize()
            start = time.perf_counter()
            with torch.cuda.stream(stream):
                host.to(device, non_blocking=True)
            torch.cuda.synchronize()
            whole = time.perf_counter() - start
            line.append(f"{name} (pinned: {host.is_pinned()}) queued in "
                        f"{sorted(queued)[5] * 1e6:.0f} us, done in {whole * 1e6:.0f} us")  # fmt: skip
        del sources
        slot.close()
        print(f"{nbytes >> 20} MiB: " + "; ".join(line))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--overlap", action="store_true", help="the overlap probe only")
    parser.add_argument("--contention", action="store_true", help="the steps beside other work")
    parser.add_argument("--process", action="store_true", help="window_process's overlap, timed")
    parser.add_argument("--window-rows", type=int, default=None, help="with --process")
    parser.add_argument("--copies", action="store_true", help="queueing a window's copy, timed")
    parser.add_argument("--pk", action="store_true", help="primary-key layouts against append")
    args = parser.parse_args()
    if args.copies:
        copy_probe(args.device)
        return
    with tempfile.TemporaryDirectory() as tmp:
        tbl = build_table(Path(tmp) / "append", args.rows)
        if args.pk:
            pk_probe(tbl, Path(tmp), args.rows, args.device, args.repeat)
            return
        if args.contention:
            contention_probe(tbl, args.device, args.repeat)
            return
        if args.process:
            process_probe(tbl, args.device, args.repeat, args.window_rows)
            return
        if args.overlap:
            overlap_probe(tbl, args.device, args.repeat)
            return
        for name, device, kwargs in settings(args.device):
            ds, run = lake(tbl, device, **kwargs)
            seconds = best_seconds(run, args.repeat)
            print(f"{name:<28} {args.rows / seconds / 1e6:7.2f}M rows/s  {ds.stats()}")
        for device in dict.fromkeys(["cpu", args.device]):
            profile_epoch(tbl, device, args.top)


if __name__ == "__main__":
    main()
