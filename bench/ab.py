"""Reads of the same tables by two raylake source trees, alternately: before/after a change.

Each round runs one process per tree (``PYTHONPATH`` set to it), before then after,
and each process times ``to_arrow()`` of every table (best of ``--repeat``, after one
warm-up read; wall and CPU time). Alternating whole processes keeps both trees under
the same machine state; the summary gives each table's median over the rounds and the
after/before ratio of the medians, and each round's own ratio.

    git archive <commit> raylake | tar -x -C /tmp/before
    python bench/ab.py --before /tmp/before --after . TABLE_URI [TABLE_URI ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def child(uris: list[str], repeat: int) -> None:
    """In a child process: time each table's full read, print one JSON line."""
    import raylake

    out: dict[str, Any] = {"raylake": raylake.__file__}
    for uri in uris:
        tbl = raylake.open_table(uri)
        rows = tbl.to_arrow().num_rows  # warm-up: page cache, footers, kept decisions
        wall, cpu = float("inf"), float("inf")
        for _ in range(repeat):
            w, c = time.perf_counter(), time.process_time()
            tbl.to_arrow()
            wall = min(wall, time.perf_counter() - w)
            cpu = min(cpu, time.process_time() - c)
        out[uri] = {"rows": rows, "wall": wall, "cpu": cpu}
    print(json.dumps(out))


def run(src: str, uris: list[str], repeat: int) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(Path(src).resolve()))
    args = [sys.executable, __file__, "--child", "--repeat", str(repeat), *uris]
    done = subprocess.run(args, env=env, check=True, capture_output=True, text=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("uris", nargs="+")
    parser.add_argument("--before", help="raylake source tree of the baseline")
    parser.add_argument("--after", default=".", help="raylake source tree of the change")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.uris, args.repeat)
        return
    if not args.before:
        parser.error("--before is required")
    results: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    for r in range(args.rounds):
        for side in ("before", "after"):
            results[side].append(run(getattr(args, side), args.uris, args.repeat))
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
