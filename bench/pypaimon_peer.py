"""pypaimon 2.1 beside raylake on bench/merge.py's primary-key shape (issue 20).

pypaimon pins pyarrow<20, so it runs in its own virtual environment (``make
paimon-env`` builds ``.venv-paimon``), as a subprocess. This file is both halves:

  python bench/pypaimon_peer.py --pypaimon .venv-paimon/bin/python [--rows 400000]

runs in raylake's environment. It writes bench/merge.py's rows (keys ``id``, 4
buckets; a base write, then 3 commits each upserting a random 25% of the keys with
new feature values; 16 float32 features) as Parquet files, builds raylake's
primary-key table from them and has pypaimon build a Paimon primary-key table from
the same files (``bucket=4``, deduplicate). Then it times the merged read of each
(``to_arrow()`` of the whole table, cold decisions on raylake's side), interleaved,
median of ``--repeat``, and prints rows/s and the ratio. The default is a tenth of
bench/merge.py's 4M rows: pypaimon merges at tens of thousands of rows/s here, so
the full shape would take minutes per read.

  <pypaimon's python> bench/pypaimon_peer.py write|read --data DIR --warehouse DIR

is one step on the peer's side; it prints a JSON line (seconds, rows).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

DATABASE, TABLE = "bench", "pk"


# -- the peer's side (pypaimon's environment: pyarrow<20, no raylake) ----------------------


def _parts(data: Path) -> list[Path]:
    return [data / "base.parquet", *sorted(data.glob("upsert-*.parquet"))]


def _catalog(warehouse: Path) -> Any:
    from pypaimon import CatalogFactory

    return CatalogFactory.create({"warehouse": str(warehouse)})


def peer_write(data: Path, warehouse: Path) -> dict[str, Any]:
    from pypaimon import Schema

    catalog = _catalog(warehouse)
    catalog.create_database(DATABASE, True)
    first = pq.read_table(_parts(data)[0])
    key = first.schema.field("id").with_nullable(False)
    schema = first.schema.set(first.schema.get_field_index("id"), key)
    catalog.create_table(
        f"{DATABASE}.{TABLE}",
        Schema.from_pyarrow_schema(schema, primary_keys=["id"], options={"bucket": "4"}),
        False,
    )
    tbl = catalog.get_table(f"{DATABASE}.{TABLE}")
    seconds, rows = [], []
    for path in _parts(data):
        batch = pq.read_table(path).cast(schema)
        t0 = time.perf_counter()
        builder = tbl.new_batch_write_builder()
        writer, commit = builder.new_write(), builder.new_commit()
        writer.write_arrow(batch)
        commit.commit(writer.prepare_commit())
        writer.close()
        commit.close()
        seconds.append(time.perf_counter() - t0)
        rows.append(batch.num_rows)
    return {"seconds": seconds, "rows": rows}


def peer_read(warehouse: Path) -> dict[str, Any]:
    tbl = _catalog(warehouse).get_table(f"{DATABASE}.{TABLE}")
    t0 = time.perf_counter()
    builder = tbl.new_read_builder()
    out = builder.new_read().to_arrow(builder.new_scan().plan().splits())
    return {"seconds": time.perf_counter() - t0, "rows": out.num_rows}


# -- raylake's side --------------------------------------------------------------------


def _peer(python: str, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [python, str(Path(__file__).resolve()), *args], capture_output=True, text=True
    )
    if done.returncode:
        raise SystemExit(f"pypaimon step {args[0]} failed:\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _rate(rows: int, seconds: float) -> str:
    return f"{rows / seconds / 1e3:9.1f}k rows/s"


def compare(python: str, rows: int, root: Path, repeat: int) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from merge import source_rows, upsert_batch

    import raylake
    from raylake.table.pk.late import clear_decision_cache

    if root.exists():
        shutil.rmtree(root)
    data = root / "data"
    data.mkdir(parents=True)
    base = source_rows(rows)
    pq.write_table(base, data / "base.parquet")
    for i in range(3):
        pq.write_table(upsert_batch(base, 0.25, seed=100 + i), data / f"upsert-{i + 1}.parquet")

    pk = raylake.create_table(str(root / "raylake"), base.schema, primary_key=["id"], buckets=4)
    ours_write = []
    for path in _parts(data):
        batch = pq.read_table(path)
        t0 = time.perf_counter()
        pk.write(batch)
        ours_write.append(time.perf_counter() - t0)
    theirs_write = _peer(python, "write", "--data", str(data), "--warehouse", str(root / "paimon"))
    total = sum(pq.ParquetFile(p).metadata.num_rows for p in _parts(data))

    ours, theirs = [], []
    for _ in range(repeat):  # interleaved: both sides see the same machine state
        clear_decision_cache()
        t0 = time.perf_counter()
        n_ours = pk.to_arrow().num_rows
        ours.append(time.perf_counter() - t0)
        peer = _peer(python, "read", "--warehouse", str(root / "paimon"))
        theirs.append(peer["seconds"])
        assert peer["rows"] == n_ours == rows, (peer["rows"], n_ours, rows)
    ours_s, theirs_s = statistics.median(ours), statistics.median(theirs)
    print(f"{rows:,} keys, 4 buckets, 3 upserts of 25% ({total:,} rows written)")
    print(f"{'':34} {'raylake':>18} {'pypaimon 2.1':>18}")
    print(
        f"{'writes (all 4 commits)':34} "
        f"{_rate(total, sum(ours_write)):>18} {_rate(total, sum(theirs_write['seconds'])):>18}"
    )
    print(
        f"{'merged read, median of ' + str(repeat):34} "
        f"{_rate(rows, ours_s):>18} {_rate(rows, theirs_s):>18}"
    )
    print(
        f"  reads (s): raylake {[round(s, 3) for s in ours]}, "
        f"pypaimon {[round(s, 3) for s in theirs]}"
    )
    print(f"summary: pypaimon's merged read takes {theirs_s / ours_s:.0f}x raylake's")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("step", nargs="?", choices=["write", "read"])
    parser.add_argument("--data", type=Path)
    parser.add_argument("--warehouse", type=Path)
    parser.add_argument("--pypaimon", help="the python of pypaimon's environment")
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path(__file__).parent / ".data" / "peer")
    args = parser.parse_args()
    if args.step == "write":
        print(json.dumps(peer_write(args.data, args.warehouse)))
    elif args.step == "read":
        print(json.dumps(peer_read(args.warehouse)))
    elif args.pypaimon:
        compare(args.pypaimon, args.rows, args.dir, args.repeat)
    else:
        parser.error("give --pypaimon PYTHON (pypaimon's environment: make paimon-env)")


if __name__ == "__main__":
    main()
