"""Where an epoch of the loader spends its time, on the CPU and on a device.

A diagnostic beside bench/gpu.py, for the rows where the device epoch is slower than
the same loader on the CPU: it times in-process epochs of ``LakeIterableDataset``
under a few settings (CPU, the device, shuffled, smaller and larger ``feed_bytes``),
prints each epoch's ``stats()``, then profiles one epoch on each side twice: with
cProfile (on Python 3.12 and later it sees every thread, so the window thread's
packing, pinning and copying show beside the trainer's waits) and with
``torch.profiler`` (the tensor operations and, on a GPU, the copies and kernels).

    python bench/gpu_profile.py [--rows 2000000] [--device cuda|cpu] [--top 25]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from _synthetic import build_table
from gpu import lake

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


def profile_epoch(tbl: Any, device: str, top: int) -> None:
    _, run = lake(tbl, device)
    run()
    profiler = cProfile.Profile()
    profiler.enable()
    run()
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    print(f"--- cProfile of one epoch, {device} (every thread on Python >= 3.12) ---")
    print(out.getvalue())
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        run()
    print(f"--- torch.profiler of one epoch, {device} ---")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=top))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tbl = build_table(Path(tmp) / "append", args.rows)
        for name, device, kwargs in settings(args.device):
            ds, run = lake(tbl, device, **kwargs)
            seconds = best_seconds(run, args.repeat)
            print(f"{name:<28} {args.rows / seconds / 1e6:7.2f}M rows/s  {ds.stats()}")
        for device in dict.fromkeys(["cpu", args.device]):
            profile_epoch(tbl, device, args.top)


if __name__ == "__main__":
    main()
