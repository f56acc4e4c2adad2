"""Reads of the same tables by two raylake source trees, alternately: before/after a change.

Each round runs one process per tree (``PYTHONPATH`` set to it), before then after,
and each process times ``to_arrow()`` of every table (best of ``--repeat``, after one
warm-up read; wall and CPU time). With ``--loader`` each process instead times epochs
of ``LakeIterableDataset`` in-process (batches of ``--batch-size`` of bench/_synthetic.py's
16 features stacked and the label; ``plain`` and ``shuffled``, one process each, so
that each reports its own peak RSS and, of it, the table's data files it keeps mapped:
page cache, no memory of the process's own), and further processes per round time two
baselines over the same files: the pyarrow -> torch loop (bench/gpu.py's) and a
single-threaded prototype of the window design (``prototype``: 128K-row record
batches decoded, features stacked once each, batches as views); ``--modes tf`` times
epochs of ``to_tf_dataset`` instead. Alternating whole processes keeps both trees under
the same machine state; the summary gives each table's median over the rounds and the
after/before ratio of the medians, and each round's own ratio.

    git archive <commit> raylake | tar -x -C /tmp/before
    python bench/ab.py --before /tmp/before --after . TABLE_URI [TABLE_URI ...]
    python bench/ab.py --loader --before /tmp/before --after . TABLE_URI
    python bench/ab.py --cold --before /tmp/before --after . TABLE_URI  (no kept decisions)

``--before-tables`` gives the before side tables of its own (one per ``TABLE_URI``): a
change of the writer is measured with one tree on both sides, reading a table that the
tree before the change wrote against the same rows written by the change.

    PYTHONPATH=/tmp/before python -c 'import sys; sys.path.insert(0, "bench");
        from _synthetic import build_table; build_table("/tmp/old", 2_000_000)'
    python bench/ab.py --loader --before . --after . TABLE_URI --before-tables /tmp/old
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def best_of(
    fn: Callable[[], T], repeat: int, before_each: Callable[[], object] | None = None
) -> tuple[T, float, float]:
    """In a child process: ``fn()`` once to warm up (page cache, lazy imports, caches),
    then ``repeat`` timed runs; the warm-up's result and the best wall and CPU seconds.
    ``before_each`` runs, untimed, before each timed run. bench/stack_ab.py uses it too."""
    result = fn()
    wall, cpu = float("inf"), float("inf")
    for _ in range(repeat):
        if before_each is not None:
            before_each()
        w, c = time.perf_counter(), time.process_time()
        fn()
        wall = min(wall, time.perf_counter() - w)
        cpu = min(cpu, time.process_time() - c)
    return result, wall, cpu


def child(uris: list[str], repeat: int, cold: bool = False) -> None:
    """In a child process: time each table's full read, print one JSON line (``cold``:
    each timed read after the process's caches are cleared: no kept merge decisions,
    footers or manifests, as a first read in a fresh process; the page cache stays)."""
    import raylake
    from raylake.caching import clear_process_caches

    out: dict[str, Any] = {"raylake": raylake.__file__}
    for uri in uris:
        read = functools.partial(_read_rows, raylake.open_table(uri))
        rows, wall, cpu = best_of(read, repeat, clear_process_caches if cold else None)
        out[uri] = {"rows": rows, "wall": wall, "cpu": cpu}
    print(json.dumps(out))


def _read_rows(tbl: Any) -> int:
    return int(tbl.to_arrow().num_rows)


LOADER_MODES = ("plain", "shuffled", "pyarrow", "prototype", "tf")


def loader_child(uri: str, mode: str, repeat: int, batch_size: int) -> None:
    """In a child process: epochs of one loader over the table, one JSON line (the best
    epoch's wall and CPU seconds, and the process's peak RSS)."""
    import numpy as np
    import pyarrow.dataset as pads
    import pyarrow.parquet as pq
    import torch
    from _synthetic import FEATURES, data_files

    import raylake
    from raylake.train.torch import LakeIterableDataset

    tbl = raylake.open_table(uri)
    if mode == "pyarrow":
        files = data_files(tbl)

        def epoch() -> int:
            n = 0
            columns = [*FEATURES, "label"]
            for b in pads.dataset(files).to_batches(columns=columns, batch_size=batch_size):
                x = torch.from_numpy(np.column_stack([b.column(c).to_numpy() for c in FEATURES]))
                y = torch.from_numpy(b.column("label").to_numpy(zero_copy_only=False).copy())
                n += len(y) + 0 * len(x)
            return n
    elif mode == "prototype":
        files = data_files(tbl)
        columns = [*FEATURES, "label"]

        def epoch() -> int:
            # The design in 10 lines, single-threaded, nothing else promised (no order
            # across files, shuffle, positions or sharding): decode 128K-row record
            # batches, stack the features once per record batch, hand out views.
            n = 0
            for path in files:
                batches = pq.ParquetFile(path, memory_map=True).iter_batches(
                    batch_size=1 << 17, columns=columns, use_threads=False
                )
                for b in batches:
                    x = torch.from_numpy(np.stack([b.column(c).to_numpy() for c in FEATURES], 1))
                    y = torch.from_numpy(b.column("label").to_numpy(zero_copy_only=False).copy())
                    for i in range(0, len(y), batch_size):
                        n += len(y[i : i + batch_size]) + 0 * len(x[i : i + batch_size])
            return n
    elif mode == "tf":
        from raylake.train.tf import to_tf_dataset

        tf_ds = to_tf_dataset(tbl, FEATURES, "label", batch_size=batch_size, shuffle=False)

        def epoch() -> int:
            return sum(len(y) for _, y in tf_ds)
    else:
        ds = LakeIterableDataset(
            tbl, feature_columns=FEATURES, label_column="label", batch_size=batch_size,
            shuffle=mode == "shuffled",
        )  # fmt: skip
        count = [0]

        def epoch() -> int:
            ds.set_epoch(count[0])
            count[0] += 1
            return sum(len(y) for _, y in ds)

    rows, wall, cpu = best_of(epoch, repeat)  # the warm-up also fills the loader's scratch
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"raylake": raylake.__file__, "rows": rows, "wall": wall, "cpu": cpu,
                      "rss": rss, "mapped": mapped_bytes_under(uri)}))  # fmt: skip


def mapped_bytes_under(root: str) -> int:
    """Resident bytes of this process's maps of files under ``root`` (the table's data
    files, kept mapped between reads): page cache counted in the RSS, not memory of the
    process's own. 0 where Linux's /proc/self/smaps is missing."""
    path = Path("/proc/self/smaps")
    if not path.exists():
        return 0
    total, inside = 0, False
    for line in path.read_text().splitlines():
        fields = line.split()
        if fields and "-" in fields[0] and len(fields) >= 5:  # a map's header line
            name = line.split(None, 5)[5] if len(fields) >= 6 else ""
            inside = name.removesuffix(" (deleted)").startswith(os.path.abspath(root) + "/")
        elif inside and fields[:1] == ["Rss:"]:
            total += int(fields[1]) * 1024
    return total


BASELINES = ("pyarrow", "prototype")  # run once per round (they do not use raylake)


def tables_of(args: argparse.Namespace, side: str) -> list[str]:
    """The tables a side reads: its own with ``--before-tables``, else the same."""
    if side == "before" and args.before_tables:
        return list(args.before_tables)
    return list(args.uris)


def loader_main(args: argparse.Namespace) -> None:
    """Rounds of (before, after) per mode, and the pyarrow -> torch baseline."""
    got: dict[tuple[str, str], list[dict[str, Any]]] = {}
    modes = args.modes.split(",")
    for r in range(args.rounds):
        for mode in modes:
            sides = ("after",) if mode in BASELINES else ("before", "after")
            for side in sides:
                extra = ["--loader", "--mode", mode, "--batch-size", str(args.batch_size)]
                got.setdefault((side, mode), []).append(
                    run(getattr(args, side), tables_of(args, side)[:1], args.repeat, extra)
                )
        if not {"plain", "shuffled", "pyarrow"} <= set(modes):
            continue
        base = got["after", "pyarrow"][r]["wall"]
        line = "  ".join(
            f"{mode} {got['before', mode][r]['wall'] / got['after', mode][r]['wall']:.2f}x old, "
            f"{base / got['after', mode][r]['wall']:.2f}x pyarrow"
            for mode in LOADER_MODES[:2]
        )
        shuf = got["after", "plain"][r]["wall"] / got["after", "shuffled"][r]["wall"]
        if "prototype" in modes:
            proto = got["after", "prototype"][r]["wall"] / got["after", "plain"][r]["wall"]
            line += f"  plain {proto:.2f}x prototype"
        print(f"round {r + 1}: {line}  shuffled/plain {shuf:.2f}x  load {os.getloadavg()[0]:.1f}",
              flush=True)  # fmt: skip
    rows = next(iter(got.values()))[0]["rows"]
    print(f"\n{'':<20}{'rows/s median (range)':>30}{'CPU s/epoch median (range)':>30}"
          f"{'peak RSS MB':>13}{'  of it mapped data files':>26}")  # fmt: skip
    for (side, mode), runs in sorted(got.items()):
        rates = sorted(rows / x["wall"] / 1e6 for x in runs)
        cpu = sorted(x["cpu"] for x in runs)
        rss = max(x["rss"] for x in runs) / 1e6
        mapped = max(x.get("mapped", 0) for x in runs) / 1e6
        print(f"{side + ' ' + mode:<20}{statistics.median(rates):>12.2f}M ({rates[0]:.2f}-"
              f"{rates[-1]:.2f}M){statistics.median(cpu):>12.3f} ({cpu[0]:.3f}-{cpu[-1]:.3f})"
              f"{rss:>11.0f}{mapped:>21.0f}")  # fmt: skip
    if {"plain", "shuffled", "pyarrow"} <= set(modes):
        print("\nmedians of the rounds' own ratios (wall):")
        pairs = [
            ("plain / plain before", ("before", "plain"), ("after", "plain")),
            ("plain / pyarrow -> torch", ("after", "pyarrow"), ("after", "plain")),
            ("shuffled / plain", ("after", "plain"), ("after", "shuffled")),
            ("shuffled / shuffled before", ("before", "shuffled"), ("after", "shuffled")),
        ]
        if "prototype" in modes:
            pairs.append(("plain / prototype", ("after", "prototype"), ("after", "plain")))
        for name, base, side in pairs:
            ratios = [b["wall"] / a["wall"] for b, a in zip(got[base], got[side])]
            print(f"  {name:<28}{statistics.median(ratios):6.2f}x  (rounds: "
                  + ", ".join(f"{x:.2f}" for x in ratios) + ")")  # fmt: skip


def run(src: str, uris: list[str], repeat: int, extra: Sequence[str] = ()) -> dict[str, Any]:
    return run_child(__file__, src, ["--repeat", str(repeat), *extra, *uris])


def run_child(script: str, src: str, args: Sequence[str]) -> dict[str, Any]:
    """``script --child *args`` in a process importing raylake from the tree ``src``; the
    JSON line it printed last (bench/stack_ab.py uses it too)."""
    env = dict(os.environ, PYTHONPATH=str(Path(src).resolve()))
    cmd = [sys.executable, script, "--child", *args]
    done = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("uris", nargs="+")
    parser.add_argument("--before", help="raylake source tree of the baseline")
    parser.add_argument("--after", default=".", help="raylake source tree of the change")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--loader", action="store_true", help="time LakeIterableDataset epochs")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument(
        "--modes",
        default="plain,shuffled,pyarrow,prototype",
        help="of plain, shuffled, pyarrow, prototype, tf",
    )
    parser.add_argument("--cold", action="store_true", help="clear caches before each read")
    parser.add_argument(
        "--before-tables", nargs="+", help="the before side's own tables, one per TABLE_URI"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=LOADER_MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child and args.loader:
        loader_child(args.uris[0], args.mode, args.repeat, args.batch_size)
        return
    if args.child:
        child(args.uris, args.repeat, args.cold)
        return
    if not args.before:
        parser.error("--before is required")
    if args.before_tables and len(args.before_tables) != len(args.uris):
        parser.error("--before-tables needs one table per TABLE_URI")
    if args.loader:
        loader_main(args)
        return
    results: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    for r in range(args.rounds):
        for side in ("before", "after"):
            extra = ["--cold"] if args.cold else []
            tables = tables_of(args, side)
            got = run(getattr(args, side), tables, args.repeat, extra)
            results[side].append({"raylake": got["raylake"]} | {
                u: got[t] for u, t in zip(args.uris, tables)
            })  # fmt: skip
        line = "  ".join(
            f"{Path(u).name} {results['after'][r][u]['wall'] / results['before'][r][u]['wall']:.2f}x"
            for u in args.uris
        )
        print(f"round {r + 1}: after / before wall  {line}", flush=True)
    for side in ("before", "after"):
        print(f"{side:>6}: {results[side][0]['raylake']}")
    print(f"\n{'table':<24}{'before':>16}{'after':>16}{'after/before':>14}  (medians; wall, cpu)")
    for u in args.uris:
        med = {
            (side, m): statistics.median(x[u][m] for x in results[side])
            for side in results
            for m in ("wall", "cpu")
        }
        print(
            f"{Path(u).name:<24}"
            f"{med['before', 'wall']:7.3f}s {med['before', 'cpu']:6.3f}s"
            f"{med['after', 'wall']:7.3f}s {med['after', 'cpu']:6.3f}s"
            f"{med['after', 'wall'] / med['before', 'wall']:8.2f}x "
            f"{med['after', 'cpu'] / med['before', 'cpu']:5.2f}x"
        )


if __name__ == "__main__":
    main()
