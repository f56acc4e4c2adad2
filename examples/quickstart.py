"""The raylake end-to-end demo: `make demo` runs this on a local warehouse directory.

It creates a partitioned append table, appends several batches, filters with
pushdown, time-travels, overwrites a partition, and prints what it did.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

import raylake
from raylake import col


def make_events(start: int, rows: int, day: str, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "id": np.arange(start, start + rows, dtype=np.int64),
            "user_id": rng.integers(0, 1_000, rows),
            "dt": day,
            "score": rng.random(rows).astype(np.float32),
            "label": rng.integers(0, 2, rows).astype(np.int32),
        }
    )


def section(title: str) -> None:
    print(f"\n== {title}")


def run_table_demo(warehouse: Path) -> str:
    uri = str(warehouse / "events")
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("user_id", pa.int64()),
            ("dt", pa.string()),
            ("score", pa.float32()),
            ("label", pa.int32()),
        ]
    )
    section("create a table partitioned by dt")
    tbl = raylake.create_table(uri, schema, partition_by=["dt"])
    print(tbl)

    section("append three batches (three commits)")
    days = ["2024-01-01", "2024-01-02", "2024-01-03"]
    for i, day in enumerate(days):
        snap = tbl.write(make_events(i * 10_000, 10_000, day, seed=i))
        print(
            f"snapshot {snap.id}: {snap.commit_kind}, +{snap.delta_record_count} rows, "
            f"total {snap.total_record_count}"
        )

    section("filter with pushdown: partition pruning, then statistics, then rows")
    text = "dt = '2024-01-02' and label = 1"
    splits = tbl.scan(filter=text).plan()
    print(
        f"{text!r}: planned {len(splits)} split(s) over "
        f"{sum(len(s.files) for s in splits)} of 3 files"
    )
    print(f"matching rows: {tbl.count(filter=text)}")
    high = tbl.to_pandas(
        columns=["id", "score"], filter=(col("score") > 0.99) & (col("dt") == "2024-01-03")
    )
    print(f"rows with score > 0.99 on 2024-01-03: {len(high)}")

    section("time travel")
    for snap in tbl.snapshots():
        print(f"as of snapshot {snap.id}: {tbl.count(snapshot_id=snap.id)} rows")

    section("overwrite one partition")
    snap = tbl.write(
        make_events(100_000, 500, "2024-01-01", seed=9),
        mode="overwrite",
        overwrite_filter="dt = '2024-01-01'",
    )
    print(f"snapshot {snap.id}: {snap.commit_kind}; rows per day now:")
    per_day = tbl.to_arrow(columns=["dt"]).group_by("dt").aggregate([("dt", "count")])
    for row in sorted(per_day.to_pylist(), key=lambda r: r["dt"]):
        print(f"  {row['dt']}: {row['dt_count']}")
    print(f"snapshot 3 still reads {tbl.count(snapshot_id=3)} rows")

    section("from_pandas / to_pandas round trip")
    users = pd.DataFrame({"user_id": [1, 2, 3], "country": ["de", "fr", "jp"]})
    users_tbl = raylake.from_pandas(users, str(warehouse / "users"))
    print(users_tbl.to_pandas().to_string(index=False))
    return uri


def run_primary_key_demo(warehouse: Path) -> None:
    section("primary-key table: upserts, deletes, compaction, changelog")
    schema = pa.schema([("user_id", pa.int64()), ("country", pa.string()), ("visits", pa.int64())])
    profiles = raylake.create_table(
        str(warehouse / "profiles"),
        schema,
        primary_key=["user_id"],
        buckets=4,
        options={"changelog-producer": "lookup"},
    )
    profiles.write(
        pd.DataFrame({"user_id": [1, 2, 3], "country": ["de", "fr", "jp"], "visits": [1, 1, 1]})
    )
    snap = profiles.write(
        pd.DataFrame({"user_id": [2, 4], "country": ["es", "br"], "visits": [5, 1]})
    )
    print(f"after the upsert (snapshot {snap.id}), changelog of that commit:")
    print(profiles.changelog(snap.id).to_pandas().to_string(index=False))
    profiles.delete("country = 'jp'")
    compacted = profiles.compact(full=True)
    print(f"after delete and compact (snapshot {compacted.id if compacted else '-'}):")
    current = profiles.to_arrow().sort_by("user_id")
    print(current.to_pandas().to_string(index=False))


def run_ray_demo(warehouse: Path, uri: str) -> None:
    """read_lake -> map_batches -> write_lake on a local Ray cluster (issue 4)."""
    import logging
    import os

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    section("Ray Data: read_lake -> map_batches -> write_lake")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.ERROR)  # keep the demo's output readable
    try:
        ds = raylake.read_lake(uri, columns=["id", "user_id", "dt", "score"], filter="label = 1")

        def to_percent(batch: pa.Table) -> pa.Table:
            percent = pc.multiply(batch.column("score"), pa.scalar(100.0, pa.float32()))
            return batch.set_column(batch.schema.get_field_index("score"), "score", percent)

        scored = ds.map_batches(to_percent, batch_format="pyarrow")
        target = str(warehouse / "events_scored")
        snap = raylake.write_lake(scored, target, partition_by=["dt"])
        assert snap is not None
        for name, tbl in (
            ("events", raylake.open_table(uri)),
            ("events_scored", raylake.open_table(target)),
        ):
            latest = tbl.latest_snapshot()
            print(f"{name:>14}: snapshot {latest.id if latest else None}, {tbl.count():,} rows")
    finally:
        ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--warehouse", default="./warehouse")
    args = parser.parse_args()
    warehouse = Path(args.warehouse).resolve()
    if warehouse.exists():
        shutil.rmtree(warehouse)
    warehouse.mkdir(parents=True)
    print(f"raylake {raylake.__version__} demo, warehouse at {warehouse}")
    uri = run_table_demo(warehouse)
    run_primary_key_demo(warehouse)
    run_ray_demo(warehouse, uri)
    print("\ndemo finished; try: .venv/bin/raylake snapshots", warehouse / "events")


if __name__ == "__main__":
    main()
