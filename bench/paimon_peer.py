"""pypaimon's side of bench/paimon.py: runs in pypaimon's own environment (make paimon-env).

pypaimon 2.1 pins pyarrow<20 and cannot share raylake's environment, so bench/paimon.py
calls this script with that environment's Python. Modes:

    paimon_peer.py write-append WAREHOUSE ROWS   a bucket=-1 append table, one commit
    paimon_peer.py write-pk WAREHOUSE ROWS [CODEC]   a 4-bucket primary-key table, then 3
                                                 upsert commits of 25% of the keys; in
                                                 CODEC (``file.compression``) as table
                                                 ``pk_<CODEC>``, else zstd as ``pk``
    paimon_peer.py read WAREHOUSE NAME REPEAT [OUT]   best wall time of a full read
                                                 (to_arrow); OUT: write the rows there
    paimon_peer.py torch WAREHOUSE NAME REPEAT ROW_LIMIT   pypaimon's torch dataset
                                                 (``TableRead.to_torch``) over the 16
                                                 features and the label, batches of 1024:
                                                 its tensor batches (best of REPEAT, all
                                                 rows) and its default Python rows through
                                                 a DataLoader (the first ROW_LIMIT rows)

Each prints one JSON line. Data is seeded and vectorized (the same shape as
bench/_synthetic.py: id, user_id, dt, f0..f15 float32, label, tag).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import numpy as np
import pyarrow as pa

FEATURES = [f"f{i}" for i in range(16)]
DB = "bench"


def schema(pk: bool) -> pa.Schema:
    id_field = pa.field("id", pa.int64(), nullable=not pk)
    return pa.schema(
        [
            id_field,
            ("user_id", pa.int64()),
            ("dt", pa.string()),
            *[(f, pa.float32()) for f in FEATURES],
            ("label", pa.int32()),
            ("tag", pa.string()),
        ]
    )


def rows(ids: np.ndarray, seed: int, pk: bool) -> pa.Table:
    rng = np.random.default_rng(seed)
    n = len(ids)
    tags = np.array(["red", "green", "blue", "amber", "violet"], dtype=object)
    days = np.array(["2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04"], dtype=object)
    columns: dict[str, Any] = {
        "id": ids.astype(np.int64),
        "user_id": rng.integers(0, 100_000, n, dtype=np.int64),
        "dt": days[ids % 4],
    }
    features = rng.random((len(FEATURES), n), dtype=np.float32)
    for i, name in enumerate(FEATURES):
        columns[name] = features[i]
    columns["label"] = rng.integers(0, 2, n, dtype=np.int32)
    columns["tag"] = tags[rng.integers(0, len(tags), n)]
    return pa.table(columns, schema=schema(pk))


def catalog(warehouse: str) -> Any:
    from pypaimon import CatalogFactory

    cat = CatalogFactory.create({"warehouse": warehouse})
    cat.create_database(DB, True)
    return cat


def write(table: Any, data: pa.Table) -> None:
    builder = table.new_batch_write_builder()
    writer, commit = builder.new_write(), builder.new_commit()
    for batch in data.to_batches(max_chunksize=262_144):
        writer.write_arrow(pa.Table.from_batches([batch]))
    commit.commit(writer.prepare_commit())
    writer.close()
    commit.close()


def write_append(warehouse: str, n: int) -> dict[str, Any]:
    from pypaimon import Schema

    cat = catalog(warehouse)
    cat.create_table(f"{DB}.append", Schema.from_pyarrow_schema(schema(False)), True)
    t0 = time.perf_counter()
    write(cat.get_table(f"{DB}.append"), rows(np.arange(n), 0, False))
    return {"rows": n, "seconds": time.perf_counter() - t0}


def pk_table_name(codec: str | None) -> str:
    """``pk`` in Paimon's default codec (zstd), ``pk_<codec>`` in another."""
    return "pk" if codec is None else f"pk_{codec}"


def write_pk(warehouse: str, n: int, codec: str | None = None) -> dict[str, Any]:
    from pypaimon import Schema

    cat = catalog(warehouse)
    options = {"bucket": "4", **({"file.compression": codec} if codec else {})}
    spec = Schema.from_pyarrow_schema(schema(True), primary_keys=["id"], options=options)
    name = f"{DB}.{pk_table_name(codec)}"
    cat.create_table(name, spec, True)
    t0 = time.perf_counter()
    write(cat.get_table(name), rows(np.arange(n), 0, True))
    rng = np.random.default_rng(1)
    for commit in range(1, 4):
        keys = np.sort(rng.choice(n, n // 4, replace=False))
        write(cat.get_table(name), rows(keys, commit, True))
    return {"rows": n, "seconds": time.perf_counter() - t0}


def read(warehouse: str, name: str, repeat: int, out: str | None = None) -> dict[str, Any]:
    table = catalog(warehouse).get_table(f"{DB}.{name}")
    best, count = float("inf"), 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        builder = table.new_read_builder()
        result = builder.new_read().to_arrow(builder.new_scan().plan().splits())
        best = min(best, time.perf_counter() - t0)
        count = result.num_rows
    if out:  # for the caller's check that both readers return the same rows
        import pyarrow.parquet as pq

        pq.write_table(result.sort_by("id"), out)
    return {"rows": count, "seconds": best}


def torch_read(warehouse: str, name: str, repeat: int, row_limit: int) -> dict[str, Any]:
    """rows/s of pypaimon's torch dataset: ``batch_format="torch"`` (a dict of column
    tensors per batch of 1024) and its default row format batched by a DataLoader."""
    import itertools

    from torch.utils.data import DataLoader

    table = catalog(warehouse).get_table(f"{DB}.{name}")
    builder = table.new_read_builder().with_projection([*FEATURES, "label"])

    def batches() -> Any:
        splits = builder.new_scan().plan().splits()
        read = builder.new_read()
        return read.to_torch(splits, streaming=True, batch_format="torch", batch_size=1024)

    best, count = float("inf"), 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        count = sum(len(b["label"]) for b in batches())
        best = min(best, time.perf_counter() - t0)
    t0 = time.perf_counter()
    splits = builder.new_scan().plan().splits()
    rows_ds = builder.new_read().to_torch(splits, streaming=True)
    loader = DataLoader(rows_ds, batch_size=1024)
    limited = itertools.islice(loader, max(row_limit // 1024, 1))
    row_count = sum(len(b["label"]) for b in limited)
    row_seconds = time.perf_counter() - t0
    return {
        "rows": count,
        "seconds": best,
        "row_format_rows": row_count,
        "row_format_seconds": row_seconds,
    }


def main(argv: list[str]) -> None:
    mode, warehouse = argv[0], argv[1]
    if mode == "write-append":
        out = write_append(warehouse, int(argv[2]))
    elif mode == "write-pk":
        out = write_pk(warehouse, int(argv[2]), argv[3] if len(argv) > 3 else None)
    elif mode == "torch":
        out = torch_read(warehouse, argv[2], int(argv[3]), int(argv[4]))
    else:
        out = read(warehouse, argv[2], int(argv[3]), argv[4] if len(argv) > 4 else None)
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
