"""Streams, change reads and Paimon reads by two raylake source trees, alternately (issue 29).

Each round runs one process per tree (``PYTHONPATH`` set to it), before then after, over
the same tables; each process times every case (best of ``--repeat`` after a warm-up,
wall and CPU time). Alternating whole processes keeps both trees under the same machine
state; the summary gives each case's median over the rounds and the after/before ratio.

- ``stream append``: a reader of a raylake append table of ``--commits`` commits, from
  the earliest snapshot, every plan read (one plan per snapshot, no catch-up);
- ``stream pk catch-up``: the same over a primary-key table, with catch-up (one diff);
- ``changes pk``: ``Table.changes(1, latest)`` of that primary-key table;
- ``paimon scan`` / ``paimon stream`` / ``paimon changes``: every Paimon fixture table
  (tests/paimon/fixtures) read whole, followed from its earliest snapshot (OVERWRITE
  snapshots skipped, the old Paimon reader's default), and its changes after
  snapshot 1 (primary-key tables).

    git archive <commit> raylake | tar -x -C /tmp/before
    python bench/stack_ab.py --before /tmp/before --after .
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ab import best_of, run_child

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent / "tests" / "paimon" / "fixtures"


def build(root: Path, commits: int) -> None:
    import numpy as np
    import pyarrow as pa

    import raylake

    rng = np.random.default_rng(7)
    schema = pa.schema([("id", pa.int64()), ("x", pa.float64())])
    append = raylake.create_table(str(root / "append"), schema)
    pk = raylake.create_table(str(root / "pk"), schema, primary_key=["id"], buckets=4)
    for _ in range(commits):
        ids = rng.integers(0, 20_000, 2_000)
        rows = pa.table({"id": ids, "x": rng.random(len(ids))}, schema=schema)
        append.write(rows)
        pk.write(rows.group_by("id").aggregate([("x", "max")]).rename_columns(["id", "x"]))


def cases(root: Path) -> dict[str, Callable[[], int]]:
    import raylake
    from raylake.errors import RaylakeError

    def stream(uri: str, **options: Any) -> int:
        reader = raylake.open_table(uri).stream(start="earliest", **options)
        try:
            return sum(p.to_arrow().num_rows for p in reader.plans(timeout=0))
        except RaylakeError:  # other merge engines' deltas need a changelog producer
            return 0

    def changes(uri: str) -> int:
        try:
            return int(raylake.open_table(uri).changes(1).to_arrow().num_rows)
        except RaylakeError:
            return 0

    paimon = sorted(str(p / "table") for p in FIXTURES.iterdir() if (p / "table").is_dir())
    pk_fixtures = [u for u in paimon if raylake.open_table(u).table_schema.primary_key]
    return {
        "stream append": lambda: stream(str(root / "append"), catch_up_after=None),
        "stream pk catch-up": lambda: stream(str(root / "pk"), catch_up_after=2),
        "changes pk": lambda: raylake.open_table(str(root / "pk")).changes(1).to_arrow().num_rows,
        "paimon scan": lambda: sum(raylake.open_table(u).to_arrow().num_rows for u in paimon),
        # OVERWRITE snapshots skipped, as the old Paimon reader did by default.
        "paimon stream": lambda: sum(
            stream(u, catch_up_after=None, on_overwrite="skip") for u in paimon
        ),
        "paimon changes": lambda: sum(changes(u) for u in pk_fixtures),
    }


def child(root: Path, repeat: int) -> None:
    """In a child process: time each case, print one JSON line."""
    import raylake

    out: dict[str, Any] = {"raylake": raylake.__file__}
    for name, run in cases(root).items():
        rows, wall, cpu = best_of(run, repeat)
        out[name] = {"rows": rows, "wall": wall, "cpu": cpu}
    print(json.dumps(out))


def run_tree(tree: str, root: Path, repeat: int) -> dict[str, Any]:
    return run_child(__file__, tree, [str(root), "--repeat", str(repeat)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=False)
    parser.add_argument("--after", required=False)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--commits", type=int, default=60)
    parser.add_argument("--child")
    args = parser.parse_args()
    if args.child:
        child(Path(args.child), args.repeat)
        return
    root = Path(tempfile.mkdtemp(prefix="raylake-bench-stack-"))
    build(root, args.commits)
    results: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    for _ in range(args.rounds):
        for side in ("before", "after"):
            results[side].append(run_tree(getattr(args, side), root, args.repeat))
    print(f"before: {results['before'][0]['raylake']}\n after: {results['after'][0]['raylake']}")
    print(f"medians of {args.rounds} alternating rounds (best of {args.repeat} each)")
    print(
        "| case | rows | before wall | after wall | wall ratio | before CPU | after CPU | CPU ratio |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in results["before"][0]:
        if name == "raylake":
            continue
        b = {k: statistics.median(r[name][k] for r in results["before"]) for k in ("wall", "cpu")}
        a = {k: statistics.median(r[name][k] for r in results["after"]) for k in ("wall", "cpu")}
        rows = results["after"][0][name]["rows"]
        assert rows == results["before"][0][name]["rows"], name
        print(
            f"| {name} | {rows:,} | {b['wall'] * 1000:.1f} ms | {a['wall'] * 1000:.1f} ms | "
            f"{a['wall'] / b['wall']:.2f}x | {b['cpu'] * 1000:.1f} ms | {a['cpu'] * 1000:.1f} ms | "
            f"{a['cpu'] / b['cpu']:.2f}x |"
        )


if __name__ == "__main__":
    main()
