"""DELETE: raylake's Table.delete against deltalake's DeltaTable.delete, same data, same run.

The target of bench/merge_into.py (``--target-rows`` rows: key ``id`` and 8 float32
features, written as 8 files, one commit each) loses the rows of a predicate:

  - ``scattered``: ``f0 < 0.1``, a tenth of the rows, in every file (every file is
    rewritten by a copy-on-write delete);
  - ``one file``: ``id < target_rows / 8``, the rows of the first file only (the other
    files' statistics leave them out).

Three targets take each delete, freshly written before every run: a raylake append
table (copy-on-write), a raylake primary-key table (merge-on-read: ``-D`` rows; 8
buckets) and a Delta table, deleted from by deltalake in its own interpreter (``make
deltalake-env``). Every delete runs in a fresh process and reports its wall time and
the process's peak RSS; the runs interleave (median of ``--repeats``), and the ratios
deltalake / raylake print at the end (higher is better for raylake).

    make deltalake-env
    python bench/delete.py [--target-rows 2000000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
from pathlib import Path

import merge_into
from merge_into import TARGET_FILES, make_data, setup_delta, setup_raylake

ROOT = Path(__file__).resolve().parent.parent
PREDICATES = {"scattered": "f0 < 0.1", "one file": "id < {first}"}


def _peak_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def delete_raylake(uri: str, predicate: str) -> dict[str, float]:
    import time

    import raylake

    tbl = raylake.open_table(uri)
    before = tbl.count()
    t0 = time.perf_counter()
    tbl.delete(predicate)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "deleted": before - tbl.count(), "peak_mb": _peak_mb()}


def delete_delta(uri: str, predicate: str) -> dict[str, float]:
    import time

    from deltalake import DeltaTable

    dt = DeltaTable(uri)
    t0 = time.perf_counter()
    metrics = dt.delete(predicate)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "deleted": metrics["num_deleted_rows"], "peak_mb": _peak_mb()}


def worker(args: list[str]) -> None:
    what, data, uri, predicate = args[0], Path(args[1]), args[2], args[3]
    if what == "setup-append":
        setup_raylake(data, uri, "append")
    elif what == "setup-pk":
        setup_raylake(data, uri, "pk")
    elif what == "setup-delta":
        setup_delta(data, uri)
    elif what == "delete-delta":
        print(json.dumps(delete_delta(uri, predicate)))
    else:
        print(json.dumps(delete_raylake(uri, predicate)))


def run(python: str, *args: str) -> str:
    return merge_into.run(python, *args, script=__file__)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target-rows", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=str(ROOT / "bench/.data/delete"))
    parser.add_argument("--delta-python", default=str(ROOT / ".venv-deltalake/bin/python"))
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    if not Path(args.delta_python).exists():
        raise SystemExit(f"{args.delta_python} is missing: run `make deltalake-env` first")
    base = Path(args.dir)
    data = base / f"data-{args.target_rows}"
    if not (data / "source.parquet").exists():
        make_data(data, args.target_rows, source_rows=2)
    first = args.target_rows // TARGET_FILES
    engines = {
        "raylake append": (sys.executable, "setup-append", "delete"),
        "raylake primary key": (sys.executable, "setup-pk", "delete"),
        "deltalake": (args.delta_python, "setup-delta", "delete-delta"),
    }
    print(f"DELETE from {args.target_rows:,} rows in {TARGET_FILES} files, 8 float32 "
          f"features; median of {args.repeats}")  # fmt: skip
    print(f"{'predicate':10} {'engine':22} {'seconds':>8} {'deleted':>10} {'peak MB':>8}")
    for label, text in PREDICATES.items():
        predicate = text.format(first=first)
        results: dict[str, list[dict[str, float]]] = {name: [] for name in engines}
        for _ in range(args.repeats):
            for name, (python, setup, delete) in engines.items():
                uri = str(base / "tables" / name.replace(" ", "-"))
                shutil.rmtree(uri, ignore_errors=True)
                run(python, setup, str(data), uri, predicate)
                results[name].append(json.loads(run(python, delete, str(data), uri, predicate)))
        medians = {}
        for name, runs in results.items():
            medians[name] = statistics.median(r["seconds"] for r in runs)
            deleted = {int(r["deleted"]) for r in runs}
            print(f"{label:10} {name:22} {medians[name]:8.3f} {min(deleted):>10,} "
                  f"{max(r['peak_mb'] for r in runs):8.0f}")  # fmt: skip
            assert len(deleted) == 1, f"{name} deleted {deleted} rows in its runs"
        for name in ("raylake append", "raylake primary key"):
            print(f"{label:10} deltalake / {name}: {medians['deltalake'] / medians[name]:.2f}x")


if __name__ == "__main__":
    main()
