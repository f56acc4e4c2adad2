"""Small real tables for the training loaders: an append table and a primary-key table.

Row groups are tiny so that an epoch has many pieces; the primary-key table has
overlapping files (merge sections), single-file sections and deleted rows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from read_threads import remember_threads

import raylake

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("dt", pa.string()),
        ("x", pa.float32()),
        ("emb", pa.list_(pa.float32(), 2)),
        ("label", pa.int32()),
    ]
)
APPEND_ROWS = 700
FILTER = "x < 0.6"


def rows(ids: np.ndarray, version: int = 0) -> pa.Table:
    """Rows whose values are a function of (id, version), so a read can be checked by id."""
    ids = np.asarray(ids, dtype=np.int64)
    x = ((ids * 7919 + version * 104729) % 1000 / 1000).astype(np.float32)
    emb = np.stack([ids.astype(np.float32), np.full(len(ids), version, np.float32)], axis=1)
    return pa.table(
        {
            "id": ids,
            "dt": np.where(ids % 2 == 0, "a", "b").astype(object),
            "x": x,
            "emb": pa.FixedSizeListArray.from_arrays(pa.array(emb.reshape(-1)), 2),
            "label": (ids % 3).astype(np.int32),
        },
        schema=SCHEMA,
    )


@pytest.fixture(autouse=True)
def _threads_before_the_test() -> None:
    remember_threads()


@pytest.fixture(scope="session")
def append_table(tmp_path_factory: pytest.TempPathFactory) -> raylake.Table:
    path = tmp_path_factory.mktemp("train") / "append"
    tbl = raylake.create_table(
        str(path), SCHEMA, partition_by=["dt"], options={"write.row-group-rows": "23"}
    )
    for start in range(0, APPEND_ROWS, 175):
        tbl.write(rows(np.arange(start, start + 175)))
    return tbl


@pytest.fixture(scope="session")
def pk_table(tmp_path_factory: pytest.TempPathFactory) -> raylake.Table:
    path = tmp_path_factory.mktemp("train") / "pk"
    tbl = raylake.create_table(
        str(path),
        SCHEMA,
        primary_key=["id"],
        buckets=3,
        options={"write.row-group-rows": "23", "compaction.auto": "false"},
    )
    rng = np.random.default_rng(7)
    tbl.write(rows(np.arange(500)))
    tbl.write(rows(rng.choice(500, 150, replace=False), version=1))
    tbl.write(rows(np.arange(500, 620), version=0))  # new keys: single-file sections
    tbl.write(rows(rng.choice(620, 90, replace=False), version=2))
    tbl.delete("id >= 600 and id < 610")
    return tbl


@pytest.fixture(params=["append", "pk"])
def table(request: pytest.FixtureRequest) -> raylake.Table:
    return request.getfixturevalue(f"{request.param}_table")


def expected_ids(tbl: raylake.Table, filter: str | None = None) -> list[int]:
    return sorted(tbl.to_arrow(columns=["id"], filter=filter).column("id").to_pylist())


def path_of(tbl: raylake.Table) -> Path:
    return Path(tbl.uri)
