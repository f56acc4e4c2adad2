"""Overlap of loading and training (issue 16), measurable without a GPU.

A training step that takes about as long as loading its batch (one torch matmul on one
thread, ``torch.set_num_threads(1)``, its size calibrated to the measured load time)
runs over an epoch of ``LakeIterableDataset`` iterated in the main process:

  - load alone: the epoch with read-ahead (the setting ``p/ra/lt``:
    prefetch/read_ahead/loader_threads, ``d`` for the loader's default; the default
    ``lt`` is no cap: pieces decoded on pyarrow's pool), no step;
  - step alone: the same number of steps on a batch at hand;
  - with read-ahead: loading on threads while the step runs; target <= 1.2x the
    longer of the two alone;
  - without read-ahead (``prefetch=0, read_ahead=0``): the same loop, one after the
    other (the baseline: about the sum of the two).

Columns: ``load`` (with read-ahead) and ``load0`` (without) alone, ``step`` alone, the
epoch with read-ahead (``ahead``) and without (``serial``), both as ratios to the longer
of the loading (the faster loader) and the steps alone. Then what bounds them:

  - ``c_l``, ``c_s``, ``c_ah``: cores kept busy (CPU seconds of this process and of the
    S3 server, which shares the machine here, per wall second) by loading alone, the
    steps alone, and the ``ahead`` epoch;
  - ``floor/max``: two cores cannot do the CPU work of loading and of the steps in
    less than ``(c_l * load + c_s * step) / 2``, nor the epoch take less than the
    longer of the two: the best ``ahead/max`` any loader could show here;
  - ``main``: the loader's CPU on the trainer's thread per epoch (what cannot overlap);
  - ``pair``: the steps run on two threads at once, each its own matrices, over the
    steps alone: what the machine gives two busy threads of one process (1.0x on two
    whole idle cores);
  - ``others``, ``kept``: cores other processes (not our S3 server) kept busy during
    the cycles counted, and how many cycles of all the cases were counted of those run
    (a cycle while other jobs held a core is left out; see ``cycles``).

Medians of ``--repeat`` cycles, the cases alternated within each. Locally, and on S3
(the moto server of raylake/testing/s3server.py in a process of its own, ``--latency``
ms injected per request). Run by bench/train.py (``--overlap``), or:

    python bench/feed.py [--rows 1000000] [--latency 20] [--repeat 5] [--skip-s3]
                         [--settings d/d/0,d/d] [--batches 1024,8192] [--quiet 0.1]
                         [--patience 120] [--step matmul|wait] [--device cuda]

Every setting of ``--settings`` runs in the same cycles against the same step (sized to
the first setting's loading), one row each: ``--settings d/d,d/d/1`` shows the loader
with no cap (the default) beside one capped at one thread, which leaves a core of two to
the step (``loader_threads``, docs/training.md).

``--step wait`` replaces the matmul by a wait of the same length that uses no core:
the host's side of a GPU step, which waits while the device works. It shows what the
loader overlaps when the trainer leaves the cores to it, on a machine whose two busy
threads slow each other (``pair``).

With ``--device cuda`` the loader copies each batch to the GPU (pinned memory, a side
stream) and the step is a GPU matmul the host waits for; ``c_s`` and ``pair`` then count
the host's share only (two threads of GPU steps share one device: ``pair`` near 2x).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pyarrow as pa
from _synthetic import DATES, FEATURES, SCHEMA, batches_for_date

import raylake

BATCH = 1024
ROW_GROUP = 32_768  # rows per row group: the pieces a loader reads ahead
QUIET = 0.1  # cores other processes may keep busy during a cycle that counts
PATIENCE = 120.0  # seconds to wait for quiet cycles, per setting


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


def make_step(n: int, device: str = "cpu", wait: str = "device") -> Callable[[Any], None]:
    """A training step: one n x n matmul (it releases the GIL once, for its whole time).

    On a GPU the host enqueues the matmul and then waits for it: the host is idle while
    the device works, which is the time read-ahead has to load the next batches in.
    ``wait="device"`` waits with ``torch.cuda.synchronize()``, for every stream (the
    loader's copies on its side stream included); ``wait="stream"`` reads a value back
    (``.item()``), as a loop that reads its loss each step does, which waits for the
    trainer's own stream only."""
    import torch

    m = torch.rand(n, n, device=device)
    out = torch.empty(n, n, device=device)
    cuda = torch.device(device).type == "cuda"
    if wait not in ("device", "stream"):
        raise ValueError(f"wait must be 'device' or 'stream', got {wait!r}")

    def step(batch: Any) -> None:
        features, _ = batch
        torch.mm(m, m, out=out)
        out[0, 0] += features[0, 0].to(out.device)
        if cuda:
            if wait == "device":
                torch.cuda.synchronize()
            else:
                out[0, 0].item()

    return step


def make_wait(seconds: float) -> Callable[[Any], None]:
    """The host's side of a GPU step: it waits ``seconds`` and uses no core (as a loop
    waits for the device to finish its step), so loading has the cores to itself."""

    def step(batch: Any) -> None:
        time.sleep(seconds)

    return step


def steps_alone(step: Callable[[Any], None], sample: Any, steps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(steps):
        step(sample)
    return time.perf_counter() - t0


def calibrate(
    target: float, sample: Any, steps: int, device: str = "cpu", wait: str = "device"
) -> int:
    """The matmul size of a step such that ``steps`` of them take about ``target`` s."""
    n = 256
    for _ in range(6 if device != "cpu" else 4):
        step = make_step(n, device, wait)
        took = min(steps_alone(step, sample, min(steps, 200)) for _ in range(3))
        took *= steps / min(steps, 200)
        n = min(16_384, max(16, round(n * (target / took) ** (1 / 3))))
    return n


def steps_in_pair(make: Callable[[], Callable[[Any], None]], sample: Any, steps: int) -> None:
    """The steps on two threads at once, each with its own step from ``make`` (its own
    matrices): what the machine gives two busy threads of one process (two cores that
    share a physical core, or a host that does not give a VM two whole cores, run them
    slower than one alone)."""
    threads = [threading.Thread(target=steps_alone, args=(make(), sample, steps)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


@dataclass
class Timed:
    """Wall and process CPU seconds of the runs of one case (medians reported)."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    own: list[float] = field(default_factory=list)  # CPU of the calling (trainer's) thread

    def add(self, wall: float, cpu: float, own: float) -> None:
        self.wall.append(wall)
        self.cpu.append(cpu)
        self.own.append(own)

    @property
    def t(self) -> float:
        return statistics.median(self.wall)

    @property
    def cpu_s(self) -> float:
        return statistics.median(self.cpu)

    @property
    def cores(self) -> float:
        """Cores kept busy: process CPU seconds per wall second."""
        return self.cpu_s / self.t


def timed(run: Callable[[], object]) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds of this process and of the S3 server (it shares the
    machine here, where a real store would not), and of the calling thread."""
    t0, c0, o0 = time.perf_counter(), own_cpu(), time.thread_time()
    run()
    return time.perf_counter() - t0, own_cpu() - c0, time.thread_time() - o0


def epoch(ds: Any, step: Callable[[Any], None] | None) -> None:
    for batch in ds:
        if step is not None:
            step(batch)


def machine_busy() -> float | None:
    """CPU seconds the whole machine has spent busy (Linux), to tell how much of the 2
    cores other processes took while a setting ran; None where /proc/stat is missing."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(v) for v in f.readline().split()[1:]]
    except OSError:
        return None
    idle = ticks[3] + ticks[4]  # idle, iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


SERVERS: list[int] = []  # our own helper processes (the S3 server): not "others"


def own_cpu() -> float:
    """CPU seconds of this process and of its helper processes (Linux for the helpers)."""
    total = time.process_time()
    for pid in SERVERS:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            pass
    return total


@dataclass(frozen=True)
class Setting:
    """How the epoch with read-ahead is made (``None``: the loader's default)."""

    prefetch: int | None = None
    read_ahead: int | None = None
    loader_threads: int | None = None

    def __str__(self) -> str:
        def show(v: int | None) -> str:
            return "d" if v is None else str(v)

        return f"{show(self.prefetch)}/{show(self.read_ahead)}/{show(self.loader_threads)}"


def overlap(
    label: str,
    tbl: raylake.Table,
    repeat: int,
    batch: int = BATCH,
    settings: tuple[Setting, ...] = (Setting(),),
    quiet: float = QUIET,
    patience: float = PATIENCE,
    device: str = "cpu",
    kind: str = "matmul",
) -> dict[Setting, dict[str, Timed]]:
    """The timings of every setting against one step (calibrated to the first setting's
    loading): medians of ``repeat`` cycles of all the cases, alternated (cycles while
    other processes kept the machine busy are left out, see ``cycles``). One row per
    setting; ``load0``, ``step``, ``serial`` and ``pair`` are shared by the rows."""
    from raylake.train.torch import LakeIterableDataset

    def dataset(setting: Setting) -> Any:
        knobs = {k: v for k, v in vars(setting).items() if v is not None}
        return LakeIterableDataset(
            tbl,
            feature_columns=FEATURES,
            label_column="label",
            batch_size=batch,
            shuffle=True,
            device=None if device == "cpu" else device,
            **knobs,
        )

    aheads = {setting: dataset(setting) for setting in settings}
    serial = dataset(Setting(0, 0))
    first = aheads[settings[0]]
    steps = len(first)
    t_load = min(timed(lambda: epoch(first, None))[0] for _ in range(3))
    sample = next(iter(serial))
    if kind == "wait":
        make: Callable[[], Callable[[Any], None]] = partial(make_wait, t_load / steps)
    else:
        n = calibrate(t_load, sample, steps, device)  # about as long as loading, alone
        make = partial(make_step, n, device)
    step = make()
    runs: dict[str, Callable[[], object]] = {}
    for i, ds in enumerate(aheads.values()):
        runs[f"load@{i}"] = partial(epoch, ds, None)
        runs[f"ahead@{i}"] = partial(epoch, ds, step)
    runs["load0"] = lambda: epoch(serial, None)
    runs["step"] = lambda: steps_alone(step, sample, steps)
    runs["serial"] = lambda: epoch(serial, step)
    runs["pair"] = lambda: steps_in_pair(make, sample, steps)
    cases = {name: Timed() for name in runs}
    kept, seen, others = cycles(runs, repeat, quiet, patience)
    for result in kept:
        for name, figures in result.items():
            cases[name].add(*figures)
    load0, st, se, pair = (cases[k] for k in ("load0", "step", "serial", "pair"))
    out = {}
    for i, setting in enumerate(settings):
        load, ah = cases[f"load@{i}"], cases[f"ahead@{i}"]
        longer = max(min(load.t, load0.t), st.t)
        # Two cores cannot do the CPU work of loading and of the steps in less than half
        # its sum: the overlapped epoch's floor, whatever the loader's design.
        floor = max(longer, (load.cpu_s + st.cpu_s) / (os.cpu_count() or 1))
        print(
            f"{label:<20} {batch:>5} {setting!s:>7} {steps:>5} {load.t:>6.3f}s "
            f"{load0.t:>6.3f}s {st.t:>6.3f}s {ah.t:>6.3f}s {se.t:>6.3f}s "
            f"{ah.t / longer:>6.2f}x {se.t / longer:>6.2f}x {floor / longer:>6.2f}x "
            f"{load.cores:>5.2f} {st.cores:>5.2f} {ah.cores:>5.2f} "
            f"{statistics.median(load.own) * 1000:>5.0f}ms {pair.t / st.t:>5.2f}x "
            f"{others:>6.2f} {len(kept):>3}/{seen}"
        )
        out[setting] = {
            "load": load,
            "load0": load0,
            "step": st,
            "ahead": ah,
            "serial": se,
            "pair": pair,
        }
    return out


Result = dict[str, tuple[float, float, float]]  # case -> timed(...)


def cycles(
    runs: dict[str, Callable[[], object]], repeat: int, quiet: float, patience: float
) -> tuple[list[Result], int, float]:
    """Cycles of all the cases, alternated, until ``repeat`` of them ran while other
    processes kept at most ``quiet`` cores busy (or ``patience`` seconds passed: then
    the quietest ``repeat``). Returns the cycles kept, how many ran, and the median
    cores the other processes used during the kept ones.

    On a machine shared with other jobs an epoch of a few tenths of a second is often
    run on one core while another job holds the other; such a cycle says nothing about
    the overlap, and the ``others`` column shows it.
    """
    done: list[tuple[float, Result]] = []
    deadline = time.monotonic() + patience
    while True:
        busy0, own0, wall0 = machine_busy(), own_cpu(), time.perf_counter()
        result = {name: timed(run) for name, run in runs.items()}
        busy1, wall = machine_busy(), time.perf_counter() - wall0
        others = 0.0
        if busy0 is not None and busy1 is not None:
            others = max(0.0, busy1 - busy0 - (own_cpu() - own0)) / wall
        done.append((others, result))
        calm = [d for d in done if d[0] <= quiet]
        if len(calm) >= repeat or (time.monotonic() > deadline and len(done) >= repeat):
            break
    kept = calm if len(calm) >= repeat else sorted(done, key=lambda d: d[0])[:repeat]
    return [r for _, r in kept], len(done), statistics.median(o for o, _ in kept)


def header() -> None:
    print(
        f"\n{'overlap':<20} {'batch':>5} {'p/ra/lt':>7} {'steps':>5} {'load':>7} {'load0':>7} "
        f"{'step':>7} {'ahead':>7} {'serial':>7} {'ahead/':>7} {'serial/':>7} {'floor/':>7} "
        f"{'c_l':>5} {'c_s':>5} {'c_ah':>5} {'main':>7} {'pair':>6} {'others':>6} {'kept':>6}"
    )
    print(
        f"{'':<20} {'':>5} {'':>7} {'':>5} {'':>7} {'':>7} {'':>7} {'':>7} {'':>7} "
        f"{'max':>7} {'max':>7} {'max':>7}   (target: ahead/max <= 1.2x; "
        f"floor = (c_l*load + c_s*step) / {os.cpu_count()} cores)"
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
        SERVERS.append(self._process.pid)
        self.storage_options, self.bucket = self._conn.recv()
        return self

    def latency(self, seconds: float) -> None:
        self._conn.send(("latency", seconds))
        self._conn.recv()

    def __exit__(self, *exc: object) -> None:
        self._conn.send(("stop", None))
        self._process.join(timeout=30)
        SERVERS.remove(self._process.pid)


def parse_settings(text: str) -> list[Setting]:
    """``"d/d,d/d/1"``: prefetch/read_ahead[/loader_threads], ``d`` for the loader's
    default (no loader threads cap: pyarrow's pool decodes)."""

    def value(v: str) -> int | None:
        return None if v == "d" else int(v)

    return [Setting(*(value(v) for v in item.split("/"))) for item in text.split(",")]


def run(
    rows: int,
    root: Path,
    latency_ms: float,
    repeat: int,
    s3: bool = True,
    settings: tuple[Setting, ...] = (Setting(),),
    local: bool = True,
    quiet: float = QUIET,
    patience: float = PATIENCE,
    device: str = "cpu",
    kind: str = "matmul",
    batches: tuple[int, ...] = (BATCH, 8 * BATCH),
) -> None:
    """Locally (batches of 1024 and 8192), then on S3 with latency, on half the rows;
    each with every setting of the read-ahead epoch."""
    import shutil

    import torch

    torch.set_num_threads(1)
    if root.exists():
        shutil.rmtree(root)
    print(f"\n(step: {kind}, device: {device}, {os.cpu_count()} cores)", end="")
    header()
    if local:
        tbl = build(str(root / "feed"), rows)
        for batch in batches:
            overlap("local disk", tbl, repeat, batch, settings, quiet, patience, device, kind)
    if not s3:
        return
    with S3Process() as server:
        uri = f"s3://{server.bucket}/feed"
        remote = build(uri, rows // 2, server.storage_options)
        server.latency(latency_ms / 1000)
        label = f"S3, {latency_ms:g} ms latency"
        overlap(label, remote, repeat, BATCH, settings, quiet, patience, device, kind)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dir", default=str(Path(__file__).parent / ".data" / "feed"))
    parser.add_argument("--latency", type=float, default=20.0, help="ms per S3 request")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--skip-s3", action="store_true")
    parser.add_argument("--skip-local", action="store_true")
    parser.add_argument(
        "--settings",
        default="d/d",
        help="prefetch/read_ahead[/loader_threads] of the read-ahead epoch, comma-separated "
        "(d: default; loader_threads d or 0: no cap): all against "
        "the same step, calibrated to the first",
    )
    parser.add_argument(
        "--batches", default=f"{BATCH},{8 * BATCH}", help="local batch sizes, comma-separated"
    )
    parser.add_argument(
        "--quiet",
        type=float,
        default=QUIET,
        help="count only cycles while other processes kept at most this many cores busy",
    )
    parser.add_argument(
        "--patience", type=float, default=PATIENCE, help="seconds to wait for quiet cycles"
    )
    parser.add_argument(
        "--device", default="cpu", help="cuda: batches copied to the GPU, the step a GPU matmul"
    )
    parser.add_argument(
        "--step",
        choices=("matmul", "wait"),
        default="matmul",
        help="the step: a matmul on one thread, or a wait that uses no core (a GPU step)",
    )
    args = parser.parse_args()
    run(
        args.rows,
        Path(args.dir),
        args.latency,
        args.repeat,
        s3=not args.skip_s3,
        settings=tuple(parse_settings(args.settings)),
        local=not args.skip_local,
        quiet=args.quiet,
        patience=args.patience,
        device=args.device,
        kind=args.step,
        batches=tuple(int(b) for b in args.batches.split(",")),
    )


if __name__ == "__main__":
    main()
