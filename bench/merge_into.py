"""MERGE INTO: raylake's Table.merge against deltalake's DeltaTable.merge, same data, same run.

A target of ``--target-rows`` rows (key ``id`` and 8 float32 features, written as 8
files) takes a source of ``--source-rows`` rows, half of them matching target keys
(random ones) and half new: update all columns when matched, insert when not. Three
targets take it, each freshly written before every run:

  - a raylake append table (copy-on-write),
  - a raylake primary-key table, ``on`` = the key (merge-on-read; 8 buckets),
  - a Delta table, merged by deltalake in its own interpreter (``make deltalake-env``
    builds ``.venv-deltalake``; deltalake is never installed beside raylake).

Every merge runs in a fresh process that reads the source from one Parquet file and
reports the merge's wall time, the files it rewrote and the process's peak RSS. The
runs of the three interleave (median of ``--repeats``), and the ratios deltalake /
raylake print at the end (higher is better for raylake; targets: append >= 1.0x,
primary key >= 3x).

    make deltalake-env
    python bench/merge_into.py [--target-rows 2000000] [--source-rows 200000]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FEATURES = [f"f{i}" for i in range(8)]
TARGET_FILES = 8


def make_data(out: Path, target_rows: int, source_rows: int, seed: int = 7) -> None:
    """The target's files and the source, as Parquet (read alike by both sides)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    out.mkdir(parents=True, exist_ok=True)

    def table(ids: np.ndarray) -> pa.Table:
        cols = {"id": pa.array(ids, pa.int64())}
        for name in FEATURES:
            cols[name] = pa.array(rng.random(len(ids), dtype=np.float32))
        return pa.table(cols)

    per_file = target_rows // TARGET_FILES
    for i in range(TARGET_FILES):
        pq.write_table(table(np.arange(i * per_file, (i + 1) * per_file)), out / f"t{i}.parquet")
    matched = rng.choice(per_file * TARGET_FILES, source_rows // 2, replace=False)
    new = np.arange(target_rows, target_rows + source_rows - len(matched))
    ids = np.concatenate([matched, new])
    rng.shuffle(ids)
    pq.write_table(table(ids), out / "source.parquet")


# -- workers: each runs in its own process -------------------------------------------


def _peak_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def setup_raylake(data: Path, uri: str, kind: str) -> None:
    import pyarrow.parquet as pq

    import raylake

    first = pq.read_table(data / "t0.parquet")
    pk = {"primary_key": ["id"], "buckets": TARGET_FILES} if kind == "pk" else {}
    schema = first.schema.set(0, first.schema.field("id").with_nullable(kind != "pk"))
    tbl = raylake.create_table(uri, schema, **pk)
    for i in range(TARGET_FILES):  # a commit and a file per part, as for the Delta table
        part = pq.read_table(data / f"t{i}.parquet").cast(schema)
        tbl.write(part)
    if kind == "pk":
        tbl.compact(full=True)


def merge_raylake(data: Path, uri: str) -> dict[str, float]:
    import time

    import pyarrow.parquet as pq

    import raylake

    source = pq.read_table(data / "source.parquet")
    tbl = raylake.open_table(uri)
    t0 = time.perf_counter()
    result = tbl.merge(source, on="id").when_matched_update().when_not_matched_insert().execute()
    seconds = time.perf_counter() - t0
    assert result.updated + result.inserted == source.num_rows, result
    return {"seconds": seconds, "rewritten": result.files_rewritten, "peak_mb": _peak_mb()}


def setup_delta(data: Path, uri: str) -> None:
    import pyarrow.parquet as pq
    from deltalake import write_deltalake

    for i in range(TARGET_FILES):
        write_deltalake(uri, pq.read_table(data / f"t{i}.parquet"), mode="append")


def merge_delta(data: Path, uri: str) -> dict[str, float]:
    import time

    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    source = pq.read_table(data / "source.parquet")
    dt = DeltaTable(uri)
    t0 = time.perf_counter()
    metrics = (
        dt.merge(source, predicate="t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    seconds = time.perf_counter() - t0
    rows = metrics["num_target_rows_updated"] + metrics["num_target_rows_inserted"]
    assert rows == source.num_rows, metrics
    rewritten = metrics.get("num_target_files_removed", -1)
    return {"seconds": seconds, "rewritten": rewritten, "peak_mb": _peak_mb()}


def worker(args: list[str]) -> None:
    what, data, uri = args[0], Path(args[1]), args[2]
    if what == "setup-append":
        setup_raylake(data, uri, "append")
    elif what == "setup-pk":
        setup_raylake(data, uri, "pk")
    elif what == "setup-delta":
        setup_delta(data, uri)
    elif what == "merge-delta":
        print(json.dumps(merge_delta(data, uri)))
    else:
        print(json.dumps(merge_raylake(data, uri)))


# -- the driver ----------------------------------------------------------------------


def run(python: str, *args: str, script: str = __file__) -> str:
    """``script --worker args`` under ``python`` in a fresh process: its last line."""
    done = subprocess.run(
        [python, script, "--worker", *args], capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise SystemExit(f"{args[0]} failed:\n{done.stderr}")
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target-rows", type=int, default=2_000_000)
    parser.add_argument("--source-rows", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=str(ROOT / "bench/.data/merge_into"))
    parser.add_argument("--delta-python", default=str(ROOT / ".venv-deltalake/bin/python"))
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    if not Path(args.delta_python).exists():
        raise SystemExit(f"{args.delta_python} is missing: run `make deltalake-env` first")
    base = Path(args.dir)
    data = base / f"data-{args.target_rows}-{args.source_rows}"
    if not (data / "source.parquet").exists():
        make_data(data, args.target_rows, args.source_rows)
    engines = {
        "raylake append": (sys.executable, "setup-append"),
        "raylake primary key": (sys.executable, "setup-pk"),
        "deltalake": (args.delta_python, "setup-delta"),
    }
    results: dict[str, list[dict[str, float]]] = {name: [] for name in engines}
    for _ in range(args.repeats):
        for name, (python, setup) in engines.items():
            uri = str(base / "tables" / name.replace(" ", "-"))
            shutil.rmtree(uri, ignore_errors=True)
            run(python, setup, str(data), uri)
            merge = "merge-delta" if name == "deltalake" else "merge"
            results[name].append(json.loads(run(python, merge, str(data), uri)))
    print(
        f"MERGE of {args.source_rows:,} source rows (half matched) into {args.target_rows:,} "
        f"target rows, 8 float32 features; median of {args.repeats}"
    )
    print(f"{'engine':22} {'seconds':>8} {'rows/s':>12} {'rewritten':>10} {'peak MB':>8}")
    medians = {}
    for name, runs in results.items():
        seconds = statistics.median(r["seconds"] for r in runs)
        medians[name] = seconds
        print(
            f"{name:22} {seconds:8.3f} {args.source_rows / seconds:12,.0f} "
            f"{int(runs[0]['rewritten']):>10} {max(r['peak_mb'] for r in runs):8.0f}"
        )
    for name in ("raylake append", "raylake primary key"):
        print(f"deltalake / {name}: {medians['deltalake'] / medians[name]:.2f}x")


if __name__ == "__main__":
    main()
